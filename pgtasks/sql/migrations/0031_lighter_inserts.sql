-- pgtasks migration lighter_inserts (numbered by its file name): what an insert into jobs
-- pays, made smaller without changing what any feature guarantees.
-- Placeholders: {schema} (quoted identifier).
--
-- * The claim index carries the queue (INCLUDE), so the per-queue counts of pending jobs
--   (get_unfinished_stats: the dashboard, `pgtasks stats`) are an index-only scan of it,
--   and the dashboard's own index jobs_pending_queue_idx (migration 0006), which every
--   plain job entered, goes. The claim's key columns and predicate are unchanged.
-- * jobs_workflow_unfinished_idx (migration 0013) stays, though it indexes the same rows
--   as jobs_workflow_idx now that finished jobs leave jobs: without it a workflow's state
--   probe becomes a bitmap scan of all the workflow's entries of jobs_workflow_idx, and
--   the running workflows' skip scan a sequential scan on a small table; a plain job
--   enters neither index (both are partial on workflow_id IS NOT NULL).
-- * The two BEFORE ROW triggers (relative start deadlines, the runtime-limits stamp) become
--   AFTER INSERT statement triggers that rewrite the rows they concern (as
--   keyed_job_inserted does): PostgreSQL batches a COPY's rows only into a table without
--   BEFORE ROW triggers, even disabled ones. The rows are not visible to any other
--   transaction before the statement ends, so no claim sees them half-made.
--
-- Online: the index is built concurrently, the old ones dropped concurrently; then one
-- transaction of catalog changes on jobs (a rename, functions and triggers).

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_claim_queue_idx
    ON {schema}.jobs (priority DESC, run_at, id) INCLUDE (queue)
    WHERE status = 'pending';

-- pgtasks:step concurrently
DROP INDEX CONCURRENTLY IF EXISTS {schema}.jobs_claim_idx;

-- pgtasks:step concurrently
DROP INDEX CONCURRENTLY IF EXISTS {schema}.jobs_pending_queue_idx;

-- pgtasks:step transaction
ALTER INDEX {schema}.jobs_claim_queue_idx RENAME TO jobs_claim_idx;

-- A relative deadline (meta "pgtasks.expires_in", seconds) as an absolute one on the
-- database's clock (migration 0020's rule): a value that is not a number within +-1e9
-- seconds is dropped and the enqueuer's estimate kept. The one-job enqueue calls it in
-- its INSERT; the trigger below does it for every other insert.
CREATE FUNCTION {schema}.with_absolute_deadline(p_meta jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE AS $$
    SELECT CASE
        WHEN NOT p_meta ? 'pgtasks.expires_in' THEN p_meta
        WHEN jsonb_typeof(p_meta -> 'pgtasks.expires_in') = 'number'
             AND p_meta -> 'pgtasks.expires_in' >= to_jsonb(-1e9)
             AND p_meta -> 'pgtasks.expires_in' <= to_jsonb(1e9)
        THEN jsonb_set(p_meta - 'pgtasks.expires_in', ARRAY['pgtasks.expires'],
                       to_jsonb(round(extract(epoch FROM clock_timestamp())
                                      + (p_meta -> 'pgtasks.expires_in')::numeric, 6)))
        ELSE p_meta - 'pgtasks.expires_in'
    END
$$;

CREATE FUNCTION {schema}.relative_deadlines_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {schema}.jobs AS jobs
    SET meta = {schema}.with_absolute_deadline(jobs.meta)
    WHERE jobs.id IN (SELECT inserted_jobs.id FROM inserted_jobs
                      WHERE inserted_jobs.meta ? 'pgtasks.expires_in')
      AND jobs.meta ? 'pgtasks.expires_in';
    RETURN NULL;
END;
$$;

DROP TRIGGER jobs_relative_deadline ON {schema}.jobs;
-- The one-job enqueue converts its deadline in its INSERT and says so (a transaction-local
-- setting, as pgtasks.self_notified for the notify trigger): the trigger is skipped.
CREATE TRIGGER jobs_relative_deadlines
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    WHEN (current_setting('pgtasks.deadlines_stamped', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.relative_deadlines_inserted();

DROP FUNCTION {schema}.relative_deadline();

-- New jobs of a task or queue under a limit the app does not declare carry it (migration
-- 0022's rule, per statement). Enabled only while such a limit is stored, as before; the
-- early return keeps a trigger left enabled cheap (migrate disables it when none is).
CREATE FUNCTION {schema}.runtime_limits_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM {schema}.limits WHERE NOT declared) THEN
        RETURN NULL;
    END IF;
    UPDATE {schema}.jobs AS jobs
    SET limit_groups = ARRAY(
        SELECT DISTINCT g
        FROM unnest(coalesce(jobs.limit_groups, ARRAY[]::text[]) || stamp.names) AS g
        ORDER BY 1)
    FROM (
        SELECT inserted_jobs.id, array_agg(limits.name) AS names
        FROM inserted_jobs
        JOIN {schema}.limits AS limits
          ON NOT limits.declared
         AND limits.name IN ('task:' || inserted_jobs.task_name,
                             'queue:' || inserted_jobs.queue)
        GROUP BY inserted_jobs.id
    ) AS stamp
    WHERE jobs.id = stamp.id
      AND NOT coalesce(jobs.limit_groups, ARRAY[]::text[]) @> stamp.names;
    RETURN NULL;
END;
$$;

DROP TRIGGER jobs_runtime_limits ON {schema}.jobs;
CREATE TRIGGER jobs_runtime_limits
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.runtime_limits_inserted();

DROP FUNCTION {schema}.stamp_runtime_limits();
