-- pgtasks migration parked_jobs_index (numbered by its file name): the jobs parked by a
-- durable sleep, a wait for an event or a snooze (migration durable) are counted through
-- an index of their own.
-- Placeholders: {schema} (quoted identifier).
--
-- count_parked_jobs (pgtasks stats, the dashboard, the Prometheus gauges
-- pgtasks_queue_parked_jobs) reads the parked jobs only: a partial index over the pending
-- rows whose meta holds 'pgtasks.parked', by queue and kind. A job that is not parked
-- has no entry (claims, enqueues and finishes of plain jobs never touch it).
--
-- Online: built concurrently (reads, writes and claims go on while it reads the table);
-- then one function (job_steps_of_meta), created in a transaction that locks no table.

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_parked_idx
    ON {schema}.jobs (queue, ((meta -> 'pgtasks.parked') ->> 'kind'))
    WHERE status = 'pending' AND meta ? 'pgtasks.parked';

-- pgtasks:step transaction
-- The checkpoints a durable job's meta holds ('pgtasks.steps': written when it entered
-- jobs_history, see migration durable), as rows of job_steps' columns; none when the
-- key is missing or not an array. Read by get_job_steps, copy_job_steps (a fork) and
-- restore_job_steps (a retry that keeps its checkpoints).
CREATE OR REPLACE FUNCTION {schema}.job_steps_of_meta(p_meta jsonb)
RETURNS TABLE ("position" integer, name text, occurrence integer, status text, result jsonb,
               error text, attempt integer, worker_id bigint, started_at timestamptz,
               finished_at timestamptz)
LANGUAGE sql IMMUTABLE AS $$
    SELECT steps.position, steps.name, steps.occurrence, steps.status, steps.result,
           steps.error, steps.attempt, steps.worker_id, steps.started_at, steps.finished_at
    FROM jsonb_to_recordset(CASE WHEN jsonb_typeof(p_meta -> 'pgtasks.steps') = 'array'
                                 THEN p_meta -> 'pgtasks.steps' ELSE '[]'::jsonb END)
         AS steps(position integer, name text, occurrence integer, status text,
                  result jsonb, error text, attempt integer, worker_id bigint,
                  started_at timestamptz, finished_at timestamptz);
$$;
