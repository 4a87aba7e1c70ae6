-- Statements of metrics and test helpers (loaded with queries.sql; same header rules).

-- name: limit_statement_time :exec
-- A statement_timeout for the rest of this transaction (the queue-depth sample: it works
-- through a transaction pooler, where a session setting would not stay).
SELECT set_config('statement_timeout', %(statement_timeout)s, true);

-- name: get_queue_depths :many
-- Per queue: pending jobs that are due now, running jobs, workflow steps waiting for
-- earlier steps (no SKIP LOCKED: held rows count), and the seconds the oldest due job has
-- waited since its run_at (NULL: none due).
WITH depths AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'pending') AS pending,
           count(*) FILTER (WHERE status = 'running') AS running,
           min(run_at) FILTER (WHERE status = 'pending') AS oldest_due
    FROM {schema}.jobs
    -- Both branches are served by the partial indexes jobs_claim_idx and jobs_running_idx.
    WHERE ((status = 'pending' AND run_at <= now()) OR status = 'running')
      AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
    GROUP BY queue
), waiting AS (
    -- Through jobs_waiting_idx (migration 0011): no entry unless a workflow waits.
    SELECT queue, count(*) AS waiting
    FROM {schema}.jobs
    WHERE status = 'waiting'
      AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
    GROUP BY queue
)
SELECT queue,
       coalesce(depths.pending, 0) AS pending,
       coalesce(depths.running, 0) AS running,
       coalesce(waiting.waiting, 0) AS waiting,
       extract(epoch FROM now() - depths.oldest_due)::float8 AS oldest_due_age
FROM depths
FULL JOIN waiting USING (queue)
ORDER BY queue;

-- name: count_workers :one
-- Registered workers: live (a heartbeat within the lease) and silent (not yet removed by
-- a rescuer). The workers table holds one row per running worker.
SELECT count(*) FILTER (WHERE heartbeat_at >= now() - make_interval(secs => %(lease)s::float8))
           AS live,
       count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => %(lease)s::float8))
           AS silent
FROM {schema}.workers;

-- name: count_scheduled_jobs :one
-- Pending jobs not due yet (scheduled, or retries waiting for their backoff).
SELECT count(*) AS scheduled
FROM {schema}.jobs
WHERE status = 'pending' AND run_at > now()
  AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]));

-- name: drop_schema :exec
-- Drop the schema and all it holds (used only for pgtasks.testing's throwaway schemas).
DROP SCHEMA IF EXISTS {schema} CASCADE;
