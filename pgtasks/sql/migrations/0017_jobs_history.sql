-- pgtasks migration jobs_history (numbered by its file name): finished jobs leave the hot
-- table.
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- A job that ends (done, failed, cancelled) moves out of jobs into jobs_history in the
-- statement that ends it: the worker’s finish is one fenced DELETE … RETURNING whose rows
-- one INSERT writes into jobs_history (a lost lease matches nothing; a racing cancel finds
-- nothing), and every other statement that ends a job (a cancel, a rescue, a workflow’s
-- cascade, an operator’s UPDATE) is moved by jobs_move_finished, a row trigger. jobs keeps
-- the jobs that wait, are due or run: its size follows the backlog, not the history, and
-- the pruner never deletes a row of it.
--
-- * jobs_history has jobs’ columns in jobs’ order. It is partitioned by retention class
--   (done; failed and cancelled) and then by the UTC day the job finished
--   (jobs_history_done_pYYYYMMDD, jobs_history_failed_pYYYYMMDD), each class with a
--   default partition for a day not created yet. The pruner creates the coming days’
--   partitions ahead (moving into a new day what its default partition held of it) and
--   drops a day once the whole day is past the class’s retention (retentions under a day
--   delete the rows past it from the day still kept).
-- * all_jobs (jobs UNION ALL jobs_history) is what reads of a job by id, the workflows’
--   result assembly, `pgtasks jobs`, stats and the dashboard read.
-- * job_keys: the idempotency key and the unique_for window of every job that has one,
--   from its enqueue (a row trigger) until its history is pruned. Its unique indexes make
--   a key exact across both tables: an enqueue of a key whose job finished (and left the
--   jobs’ own unique index) fails on job_keys, and the enqueue answers with that job. A
--   job deleted outright (by hand, or by the pruner of an earlier release) frees its key
--   when its transaction commits (jobs_forget_key, jobs_history_forget_key).
-- * The workflow triggers fire when a row enters jobs_history, and the workflow functions
--   read the jobs that ended through all_jobs.
-- * jobs_restore / jobs_refinish move jobs back for a retry (and again if not retried).
--
-- Online, in three steps here and one in migration jobs_history_moves, which follows:
-- jobs_history, job_keys and the triggers that register the key of each job inserted from
-- then on and forget those of jobs deleted (catalog changes under lock_timeout, retried);
-- the keys of the keyed jobs already in jobs copied in batches of ids (one short
-- transaction each: enqueues and claims go on); then the all_jobs view and the functions
-- of the partitions (catalog changes again). Until jobs_history_moves, no job moves: the
-- schema in between reads as before. Finished jobs already in jobs stay there and age
-- out: the pruner moves them into jobs_history in batches (rows of an old day go to the
-- default partition of their class and are deleted when past retention).

-- pgtasks:step transaction
CREATE TABLE {schema}.jobs_history (LIKE {schema}.jobs INCLUDING DEFAULTS)
    PARTITION BY LIST (status);

CREATE TABLE {schema}.jobs_history_done PARTITION OF {schema}.jobs_history
    FOR VALUES IN ('done') PARTITION BY RANGE (finished_at);

CREATE TABLE {schema}.jobs_history_failed PARTITION OF {schema}.jobs_history
    FOR VALUES IN ('failed', 'cancelled') PARTITION BY RANGE (finished_at);

CREATE TABLE {schema}.jobs_history_done_default PARTITION OF {schema}.jobs_history_done
    DEFAULT;

CREATE TABLE {schema}.jobs_history_failed_default PARTITION OF {schema}.jobs_history_failed
    DEFAULT;

-- Indexes of the (still empty) partitioned table, created on every partition.
CREATE INDEX jobs_history_id_idx ON {schema}.jobs_history (id);

CREATE INDEX jobs_history_finished_idx ON {schema}.jobs_history (finished_at);

CREATE INDEX jobs_history_workflow_idx ON {schema}.jobs_history (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- The keyed jobs of a partition, for pruning job_keys in step with it.
CREATE INDEX jobs_history_keyed_idx ON {schema}.jobs_history (id)
    WHERE idempotency_key IS NOT NULL OR unique_window IS NOT NULL;

CREATE TABLE {schema}.job_keys (
    job_id          bigint PRIMARY KEY,
    idempotency_key text,
    unique_key      text,
    unique_window   tstzrange
);

CREATE UNIQUE INDEX job_keys_idempotency_key ON {schema}.job_keys (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE UNIQUE INDEX job_keys_unique_window ON {schema}.job_keys (unique_key, unique_window)
    WHERE unique_window IS NOT NULL;

-- Register the key of a job inserted into jobs. Enqueues answer a key registered here
-- before they insert; a key registered meanwhile by another job (one that finished while
-- this insert waited for it to leave jobs’ own unique index) is a unique violation named
-- as jobs’ index would name it (a one-job enqueue of its own tries once more and is then
-- answered with that job; in a caller’s transaction the error stands, and nothing is
-- duplicated). A job moved back by jobs_restore finds its own row.
CREATE FUNCTION {schema}.register_job_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.job_keys (job_id, idempotency_key, unique_key, unique_window)
    VALUES (NEW.id, NEW.idempotency_key, NEW.unique_key, NEW.unique_window)
    ON CONFLICT DO NOTHING;
    IF FOUND OR EXISTS (SELECT 1 FROM {schema}.job_keys WHERE job_id = NEW.id) THEN
        RETURN NULL;
    END IF;
    IF NEW.idempotency_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM {schema}.job_keys WHERE idempotency_key = NEW.idempotency_key
    ) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "jobs_idempotency_key_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_idempotency_key_key',
                  DETAIL = format('Key (idempotency_key)=(%s) belongs to a job that finished.',
                                  NEW.idempotency_key);
    END IF;
    RAISE EXCEPTION 'duplicate key value violates unique constraint "jobs_unique_window_idx"'
        USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_unique_window_idx',
              DETAIL = format('Key (unique_key, unique_window)=(%s, %s) belongs to a job'
                              ' that finished.', NEW.unique_key, NEW.unique_window);
END;
$$;

CREATE TRIGGER jobs_register_key
    AFTER INSERT ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.idempotency_key IS NOT NULL OR NEW.unique_window IS NOT NULL)
    EXECUTE FUNCTION {schema}.register_job_key();

-- Forget the key of a job deleted outright (by hand, or by the pruner of an earlier
-- release): a key is taken as long as its job exists. pgtasks’ own statements that move
-- jobs between the two tables (the key stays) or delete them with their keys set
-- pgtasks.keys_handled, so no event is queued for their rows. Deferred to the commit: a
-- job deleted by another statement but moved in the same transaction is found where it
-- went, and keeps its key.
CREATE FUNCTION {schema}.forget_job_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE id = OLD.id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_history WHERE id = OLD.id) THEN
        DELETE FROM {schema}.job_keys WHERE job_id = OLD.id;
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER jobs_forget_key
    AFTER DELETE ON {schema}.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.idempotency_key IS NOT NULL OR OLD.unique_window IS NOT NULL)
          AND current_setting('pgtasks.keys_handled', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.forget_job_key();

CREATE CONSTRAINT TRIGGER jobs_history_forget_key
    AFTER DELETE ON {schema}.jobs_history
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.idempotency_key IS NOT NULL OR OLD.unique_window IS NOT NULL)
          AND current_setting('pgtasks.keys_handled', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.forget_job_key();

-- pgtasks:step batched table=jobs size=10000
-- Keyed jobs already in jobs, a batch of ids at a time (jobs inserted since the step
-- above registered their own keys; a key copied twice is kept once). Finished ones among
-- them keep their key until they are pruned.
INSERT INTO {schema}.job_keys (job_id, idempotency_key, unique_key, unique_window)
SELECT id, idempotency_key, unique_key, unique_window
FROM {schema}.jobs
WHERE id >= %(start)s AND id < %(stop)s
  AND (idempotency_key IS NOT NULL OR unique_window IS NOT NULL)
ON CONFLICT DO NOTHING;

-- pgtasks:step transaction
-- The view over both tables, and the functions of jobs_history's day partitions.
CREATE VIEW {schema}.all_jobs AS
    SELECT * FROM {schema}.jobs
    UNION ALL
    SELECT * FROM {schema}.jobs_history;

-- The jobs of one workflow wherever they are: jobs, and only the days of jobs_history
-- that can hold them. A step finishes after its workflow was created (both times are the
-- server's clock), so the days before p_since (the workflow's created_at; an hour less,
-- for a clock stepped back) are pruned without a probe: a read of a workflow touches the
-- days it ran in and the default partitions, not every day kept. A plain SQL function:
-- the planner inlines it, and a caller's filters and parameters prune as in its own query.
CREATE FUNCTION {schema}.workflow_jobs(p_workflow_id bigint, p_since timestamptz)
RETURNS SETOF {schema}.jobs
LANGUAGE sql STABLE AS $$
    SELECT * FROM {schema}.jobs WHERE jobs.workflow_id = p_workflow_id
    UNION ALL
    SELECT * FROM {schema}.jobs_history AS history
    WHERE history.workflow_id = p_workflow_id
      AND history.finished_at >= p_since - interval '1 hour'
$$;

-- The first missing day partition of jobs_history from the day of ``first_day`` to
-- ``days`` days after it (done, then failed); rows of its day held by the default
-- partition move into it. A partition is attached (SHARE UPDATE EXCLUSIVE on the class’s
-- table: finishes go on; ACCESS EXCLUSIVE on its default partition while it is checked).
-- Returns the partition created (no row: none was missing).
CREATE FUNCTION {schema}.jobs_history_create_days(first_day timestamptz, days integer)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    class text;
    the_day date;
    name text;
    lower_bound timestamptz;
    upper_bound timestamptz;
    keys_handled text;
BEGIN
    FOREACH class IN ARRAY ARRAY['done', 'failed'] LOOP
        FOR offset_days IN 0 .. days LOOP
            the_day := (first_day AT TIME ZONE 'UTC')::date + offset_days;
            name := format('jobs_history_%s_p%s', class, to_char(the_day, 'YYYYMMDD'));
            CONTINUE WHEN to_regclass('{schema}.' || quote_ident(name)) IS NOT NULL;
            lower_bound := the_day::timestamp AT TIME ZONE 'UTC';
            upper_bound := (the_day + 1)::timestamp AT TIME ZONE 'UTC';
            EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.jobs_history'
                           ' INCLUDING DEFAULTS)', name);
            -- The constraint the partition bound implies: ATTACH then skips its scan.
            EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (finished_at'
                           ' IS NOT NULL AND finished_at >= %L AND finished_at < %L)',
                           name, name || '_bound', lower_bound, upper_bound);
            keys_handled := coalesce(current_setting('pgtasks.keys_handled', true), 'off');
            PERFORM set_config('pgtasks.keys_handled', 'on', true);
            EXECUTE format('WITH moved AS (DELETE FROM {schema}.%I WHERE finished_at >= %L'
                           ' AND finished_at < %L RETURNING *) INSERT INTO {schema}.%I'
                           ' SELECT * FROM moved',
                           'jobs_history_' || class || '_default', lower_bound, upper_bound,
                           name);
            PERFORM set_config('pgtasks.keys_handled', keys_handled, true);
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I'
                           ' FOR VALUES FROM (%L) TO (%L)',
                           'jobs_history_' || class, name, lower_bound, upper_bound);
            EXECUTE format('ALTER TABLE {schema}.%I DROP CONSTRAINT %I',
                           name, name || '_bound');
            RETURN NEXT name;
            -- One partition a transaction: the caller holds one default partition’s
            -- ACCESS EXCLUSIVE lock at a time (and so never waits in a cycle).
            RETURN;
        END LOOP;
    END LOOP;
END;
$$;

-- The day partitions of ``class`` whose whole day ended before ``cutoff``, oldest first:
-- the ones the pruner drops.
CREATE FUNCTION {schema}.jobs_history_expired_days(class text, cutoff timestamptz)
RETURNS TABLE (partition_name text, partition_day date)
LANGUAGE sql STABLE AS $$
    SELECT partitions.relname::text,
           to_date(right(partitions.relname, 8), 'YYYYMMDD')
    FROM pg_inherits
    JOIN pg_class AS partitions ON partitions.oid = pg_inherits.inhrelid
    WHERE pg_inherits.inhparent = to_regclass('{schema}.' || quote_ident('jobs_history_' || class))
      AND partitions.relname ~ '_p[0-9]+$'
      AND (to_date(right(partitions.relname, 8), 'YYYYMMDD') + 1)::timestamp
          AT TIME ZONE 'UTC' <= cutoff
    ORDER BY 2;
$$;

-- The workflow triggers of jobs_history: they fire as a job enters it (from migration
-- jobs_history_moves on, every job that ends does; nothing enters it before),
-- except for the rows the pruner moves there from jobs (pgtasks.archiving): those ended
-- before, and their workflows moved on then.
CREATE TRIGGER jobs_history_workflow_job_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.workflow_job_ended();

CREATE TRIGGER jobs_history_workflow_jobs_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.workflow_jobs_ended();

CREATE STATISTICS {schema}.jobs_history_queue_status_stats (mcv) ON queue, status
    FROM {schema}.jobs_history;

-- Drop the day partition ``partition_name`` of ``class`` (expired: the pruner checked).
-- Rows of workflows that still have unfinished jobs stay (a chord’s callback reads its
-- members’ results): they move to the class’s default partition, pruned row by row
-- later. Run by the pruner in a short transaction of its own under lock_timeout: the
-- detach takes ACCESS EXCLUSIVE on the class’s table for a catalog change. The keys the
-- dropped rows held were deleted before (jobs_history_forget_day_keys).
CREATE FUNCTION {schema}.jobs_history_drop_day(class text, partition_name text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    kept bigint;
BEGIN
    EXECUTE format('ALTER TABLE {schema}.%I DETACH PARTITION {schema}.%I',
                   'jobs_history_' || class, partition_name);
    PERFORM set_config('pgtasks.archiving', 'on', true);
    EXECUTE format('INSERT INTO {schema}.%I SELECT * FROM {schema}.%I AS day'
                   ' WHERE day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                   ' FROM {schema}.jobs AS other WHERE other.workflow_id = day.workflow_id'
                   ' AND other.status IN (''waiting'', ''pending'', ''running''))',
                   'jobs_history_' || class, partition_name);
    GET DIAGNOSTICS kept = ROW_COUNT;
    PERFORM set_config('pgtasks.archiving', 'off', true);
    EXECUTE format('DROP TABLE {schema}.%I', partition_name);
    RETURN kept;
END;
$$;

-- Before a day partition is dropped: its jobs by status and the keys they held deleted
-- (through jobs_history_keyed_idx), but for the rows of unfinished workflows (kept).
CREATE FUNCTION {schema}.jobs_history_forget_day_keys(partition_name text)
RETURNS TABLE (status text, jobs bigint)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM {schema}.job_keys AS keys USING {schema}.%I AS day'
                   ' WHERE keys.job_id = day.id'
                   ' AND (day.idempotency_key IS NOT NULL OR day.unique_window IS NOT NULL)'
                   ' AND NOT (day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                   ' FROM {schema}.jobs AS other WHERE other.workflow_id = day.workflow_id'
                   ' AND other.status IN (''waiting'', ''pending'', ''running'')))',
                   partition_name);
    RETURN QUERY EXECUTE format('SELECT day.status, count(*) FROM {schema}.%I AS day'
                                ' WHERE NOT (day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                                ' FROM {schema}.jobs AS other'
                                ' WHERE other.workflow_id = day.workflow_id AND other.status'
                                ' IN (''waiting'', ''pending'', ''running'')))'
                                ' GROUP BY day.status', partition_name);
END;
$$;
