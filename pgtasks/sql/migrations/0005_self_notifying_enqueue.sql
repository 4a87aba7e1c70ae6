-- pgtasks 0005: a one-job enqueue wakes workers by itself; the trigger covers every
-- other insert path.
--
-- The statement-level trigger of 0001 costs about 20 µs per inserting statement (a
-- transition table and a query over it): a large share of a one-by-one enqueue once the
-- commit is paid. pgtasks' one-job statement (queries.sql: insert_and_notify_job) calls
-- pg_notify itself and sets the transaction-local pgtasks.self_notified to 'on'; it runs
-- only as a transaction of its own (autocommit), so the setting is gone when the next
-- statement starts. The trigger skips statements that set it. Every other insert (bulk
-- enqueue, beat, a job enqueued in the caller's transaction, psql, COPY) still notifies
-- through the trigger, as before. Older code never sets the setting: it keeps working
-- during a rolling upgrade.
DROP TRIGGER jobs_notify_inserted ON {schema}.jobs;

CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    WHEN (current_setting('pgtasks.self_notified', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.notify_jobs_inserted();
