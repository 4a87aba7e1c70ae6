-- The dashboard (`pgtasks web`): reads that stay fast with millions of jobs, and the
-- filtered writes of its bulk actions. Headers, placeholders and parameters as in
-- queries.sql. Reads never use SKIP LOCKED: a row a worker holds is still counted.
--
-- The job filter (list_jobs_page, retry_filtered_jobs, cancel_filtered_jobs): every
-- parameter NULL means "any"; %(args)s is a JSON document the job's args contain (@>).

-- name: get_unfinished_stats :many
-- Per queue: pending, due, running and the oldest due job's wait, from indexes only:
-- jobs_pending_queue_idx (migration 0006; an index-only scan) and jobs_running_idx.
-- Finished rows are never read.
WITH pending AS (
    SELECT queue,
           count(*) AS pending,
           count(*) FILTER (WHERE run_at <= now()) AS due,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
    FROM {schema}.jobs
    -- attempts >= 0 is always true (jobs_attempts_check): it names the index predicate.
    WHERE status = 'pending' AND attempts >= 0
    GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running
    FROM {schema}.jobs
    WHERE status = 'running'
    GROUP BY queue
), waiting AS (
    -- Workflow steps waiting for earlier steps (migration 0011), through jobs_waiting_idx.
    SELECT queue, count(*) AS waiting
    FROM {schema}.jobs
    WHERE status = 'waiting'
    GROUP BY queue
)
SELECT queue,
       coalesce(waiting.waiting, 0) AS waiting,
       coalesce(pending.pending, 0) AS pending,
       coalesce(pending.due, 0) AS due,
       coalesce(running.running, 0) AS running,
       extract(epoch FROM now() - pending.oldest_due)::float8 AS oldest_due_age
FROM pending
FULL JOIN running USING (queue)
FULL JOIN waiting USING (queue)
ORDER BY queue;

-- name: get_jobs_table_size :one
-- The planner's row count of the jobs table (-1: never analyzed or vacuumed).
SELECT coalesce(
           (SELECT reltuples FROM pg_class
            WHERE oid = to_regclass(quote_ident(%(schema)s::text) || '.jobs')),
           -1)::float8 AS reltuples;

-- name: get_finished_counts :many
-- Exact finished jobs per queue and status (small tables only: it reads every one).
SELECT queue, status, count(*)::bigint AS jobs
FROM {schema}.jobs
WHERE status IN ('done', 'failed', 'cancelled')
GROUP BY queue, status;

-- name: get_finished_estimates :many
-- Finished jobs per queue and status estimated from ANALYZE's statistics: the (queue,
-- status) most-common-values list of jobs_queue_status_stats (migration 0006) times
-- the table's row count. No row of the table is read.
SELECT stats.most_common_vals[item][1] AS queue,
       stats.most_common_vals[item][2] AS status,
       round(stats.most_common_freqs[item] * greatest(class.reltuples, 0))::bigint AS jobs
FROM pg_stats_ext AS stats
CROSS JOIN LATERAL generate_subscripts(stats.most_common_freqs, 1) AS item
JOIN pg_class AS class ON class.oid = to_regclass(quote_ident(%(schema)s::text) || '.jobs')
WHERE stats.schemaname = %(schema)s::text
  AND stats.tablename = 'jobs'
  AND stats.statistics_name = 'jobs_queue_status_stats'
  AND stats.most_common_vals[item][2] IN ('done', 'failed', 'cancelled');

-- name: get_finished_per_minute :many
-- Jobs finished in each minute of the last hour (minutes without any are absent), from
-- jobs_finished_idx alone.
SELECT date_trunc('minute', finished_at) AS minute, count(*)::int AS finished
FROM {schema}.jobs
WHERE status IN ('done', 'failed', 'cancelled')
  AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
GROUP BY 1
ORDER BY 1;

-- name: list_jobs_page :many
-- One page of jobs matching the filter, newest first, older than the %(before)s id
-- (keyset paging: no OFFSET). Asks for one row more than a page to tell if one follows.
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, now() AS now
FROM {schema}.jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
  AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: delete_finished_job :one
-- Delete one done, failed or cancelled job; the row's status tells a missing job (no
-- row) from one that is not finished (deleted false). A job of a workflow that has
-- unfinished jobs stays (workflow_unfinished): its later steps read its result.
WITH target AS (
    SELECT id, status, workflow_id, workflow_step,
           workflow_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM {schema}.jobs AS other
               WHERE other.workflow_id = jobs.workflow_id
                 AND other.status IN ('waiting', 'pending', 'running')) AS workflow_unfinished
    FROM {schema}.jobs AS jobs WHERE id = %(id)s::bigint FOR UPDATE
), deleted AS (
    DELETE FROM {schema}.jobs AS jobs
    USING target
    WHERE jobs.id = target.id
      AND target.status IN ('done', 'failed', 'cancelled')
      AND NOT target.workflow_unfinished
    RETURNING jobs.id
)
SELECT target.status, deleted.id IS NOT NULL AS deleted, target.workflow_id,
       target.workflow_step, target.workflow_unfinished
FROM target
LEFT JOIN deleted ON deleted.id = target.id;

-- name: retry_filtered_jobs :many
-- Up to %(limit)s failed or cancelled jobs matching the filter back to pending, due now
-- (the rule of retry_job); rows ``id, queue``.
WITH picked AS (
    SELECT id
    FROM {schema}.jobs AS jobs
    WHERE status IN ('failed', 'cancelled')
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      -- A workflow step that never received its input: retry_filtered_steps.
      AND NOT coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                       AND cardinality(prev_ids) > 0, false)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
      AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
      AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
      -- A job unique while active (migration 0010) whose key an active job holds
      -- stays as it is: retrying it would make a second active job of the key.
      AND (unique_key IS NULL OR unique_window IS NOT NULL OR NOT EXISTS (
          SELECT FROM {schema}.jobs AS holder
          WHERE holder.unique_key = jobs.unique_key AND holder.unique_window IS NULL
            AND holder.status IN ('pending', 'running')))
    ORDER BY id
    LIMIT %(limit)s::int
    -- A row another session holds is left for the next pass, not waited for.
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS jobs
SET status = 'pending',
    run_at = now(),
    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
    locked_by = NULL,
    locked_at = NULL,
    result = NULL,
    finished_at = NULL,
    cancel_requested = false,
    updated_at = now()
FROM picked
WHERE jobs.id = picked.id
RETURNING jobs.id, jobs.queue;

-- name: retry_filtered_steps :many
-- Up to %(limit)s cancelled workflow steps that never received their input, matching
-- the filter, with ids above %(after)s, retried in id order by workflow_retry_step (each
-- sees the earlier ones: a chain's steps retried together wait for each other); rows
-- ``id, outcome, detail, queue``.
SELECT picked.id, retried.outcome, retried.detail, retried.queue
FROM (
    SELECT id
    FROM {schema}.jobs AS jobs
    WHERE status = 'cancelled'
      AND coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                   AND cardinality(prev_ids) > 0, false)
      AND id > %(after)s::bigint
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
      AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
      AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
    ORDER BY id
    LIMIT %(limit)s::int
) AS picked
CROSS JOIN LATERAL {schema}.workflow_retry_step(picked.id) AS retried
ORDER BY picked.id;

-- name: cancel_filtered_jobs :many
-- Up to %(limit)s pending jobs, and running jobs not yet asked to stop, matching the
-- filter: pending ones become cancelled, running ones are flagged and their workers told
-- (as cancel_job does); rows ``id, status`` after the change.
WITH picked AS (
    SELECT id, status
    FROM {schema}.jobs
    WHERE (status IN ('pending', 'waiting') OR (status = 'running' AND NOT cancel_requested))
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
      AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
      AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
    ORDER BY id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN picked.status IN ('pending', 'waiting') THEN 'cancelled'
                      ELSE jobs.status END,
        cancel_requested = true,
        finished_at = CASE WHEN picked.status IN ('pending', 'waiting') THEN now()
                           ELSE jobs.finished_at END,
        updated_at = now()
    FROM picked
    WHERE jobs.id = picked.id
    RETURNING jobs.id, jobs.status
)
SELECT id, status,
       CASE WHEN status = 'running' THEN pg_notify({cancel_channel}, id::text)
            ELSE pg_notify({done_channel}, id::text)
       END IS NULL AS notified
FROM cancelled;
