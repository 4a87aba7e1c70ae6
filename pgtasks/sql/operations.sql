-- Operations: what `pgtasks stats|jobs|workers|prune` and the Pruner service run.
-- Headers, placeholders and parameters as in queries.sql. Reads here never use
-- SKIP LOCKED: a row a worker holds must still be counted and listed.

-- name: get_queue_stats :many
-- Per queue: jobs by status, the oldest due pending job and jobs finished lately.
SELECT queue,
       count(*) FILTER (WHERE status = 'waiting') AS waiting,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS due,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       -- Seconds the longest-waiting due job has waited since its run_at.
       extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending'
                                                        AND run_at <= now()))::float8
           AS oldest_due_age,
       count(*) FILTER (WHERE finished_at >= now() - interval '1 minute')
           AS finished_last_minute,
       count(*) FILTER (WHERE finished_at >= now() - interval '1 hour') AS finished_last_hour
FROM {schema}.jobs
GROUP BY queue
ORDER BY queue;

-- name: list_jobs :many
-- The newest jobs matching optional status, queue, task and workflow filters (NULL: any).
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, now() AS now
FROM {schema}.jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(workflow_id)s::bigint IS NULL OR workflow_id = %(workflow_id)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: list_workers :many
-- Registered workers, workers removed within %(since)s seconds, and their running jobs.
WITH known AS (
    SELECT id, hostname, pid, queues, concurrency, started_at, heartbeat_at,
           NULL::timestamptz AS removed_at
    FROM {schema}.workers
    UNION ALL
    SELECT worker_id, hostname, pid, queues, concurrency, started_at, heartbeat_at,
           removed_at
    FROM {schema}.worker_history
    WHERE removed_at >= now() - make_interval(secs => %(since)s::float8)
), holding AS (
    -- Running jobs by holder, through jobs_running_idx.
    SELECT locked_by, array_agg(id ORDER BY id) AS job_ids
    FROM {schema}.jobs
    WHERE status = 'running'
    GROUP BY locked_by
)
-- The full join also lists a holder of running jobs that is in neither table.
SELECT coalesce(known.id, holding.locked_by) AS id, known.hostname, known.pid,
       known.queues, known.concurrency, known.started_at, known.heartbeat_at,
       known.removed_at,
       coalesce(holding.job_ids, ARRAY[]::bigint[]) AS running_job_ids,
       extract(epoch FROM now() - known.heartbeat_at)::float8 AS heartbeat_age,
       extract(epoch FROM known.removed_at - known.heartbeat_at)::float8 AS silence,
       now() AS now
FROM known
FULL JOIN holding ON holding.locked_by = known.id
ORDER BY known.removed_at IS NOT NULL, known.hostname IS NULL, 1;

-- name: retry_job :one
-- A failed or cancelled job back to pending, due now, allowed one more attempt; the
-- row's previous status tells a missing job (no row) from one in another state. A
-- workflow step cancelled before it received its input is left as it is (needs_input:
-- retry_workflow_step re-assembles it).
WITH target AS (
    SELECT id, status,
           coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                    AND cardinality(prev_ids) > 0, false) AS needs_input
    FROM {schema}.jobs WHERE id = %(id)s::bigint FOR UPDATE
), retried AS (
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending',
        run_at = now(),
        -- Attempts keep counting; the limit grows when it was used up.
        max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
        locked_by = NULL,
        locked_at = NULL,
        result = NULL,
        finished_at = NULL,
        -- A cancelled job's flag would cancel the new attempt too.
        cancel_requested = false,
        updated_at = now()
    FROM target
    WHERE jobs.id = target.id
      AND target.status IN ('failed', 'cancelled')
      AND NOT target.needs_input
    RETURNING jobs.id, jobs.queue, jobs.attempts, jobs.max_attempts
)
SELECT target.id, target.status AS previous_status, retried.queue, retried.attempts,
       retried.max_attempts, retried.id IS NOT NULL AS retried, target.needs_input
FROM target
LEFT JOIN retried ON retried.id = target.id;

-- name: retry_failed_jobs :many
-- Up to %(limit)s failed jobs (of one task, or any) back to pending, due now.
WITH picked AS (
    SELECT id
    FROM {schema}.jobs AS jobs
    WHERE status = 'failed'
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      -- A workflow step that never received its input is retried by retry_workflow_step.
      AND NOT coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                       AND cardinality(prev_ids) > 0, false)
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

-- name: prune_jobs :many
-- Delete up to %(limit)s finished jobs of %(statuses)s finished over %(older_than)s s ago.
WITH doomed AS (
    -- The first condition is jobs_finished_idx's predicate: the scan reads finished
    -- rows only, oldest first, and never a pending or running one.
    SELECT id
    FROM {schema}.jobs AS jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND status = ANY(%(statuses)s::text[])
      AND finished_at < now() - make_interval(secs => %(older_than)s::float8)
      -- A job of a workflow (migration 0011) stays while the workflow has unfinished
      -- jobs: a chord's callback reads its members' results when it starts.
      AND (workflow_id IS NULL
           OR NOT EXISTS (SELECT 1 FROM {schema}.jobs AS other
                          WHERE other.workflow_id = jobs.workflow_id
                            AND other.status IN ('waiting', 'pending', 'running')))
    ORDER BY finished_at
    LIMIT %(limit)s::int
    -- Rows held elsewhere (a retry, a cancel) are skipped: the batch never waits.
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {schema}.jobs AS jobs
    USING doomed
    WHERE jobs.id = doomed.id
    RETURNING jobs.status
)
SELECT status, count(*)::int AS deleted
FROM deleted
GROUP BY status;

-- name: prune_worker_history :one
-- Forget workers removed more than %(older_than)s seconds ago.
WITH deleted AS (
    DELETE FROM {schema}.worker_history
    WHERE removed_at < now() - make_interval(secs => %(older_than)s::float8)
    RETURNING worker_id
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: lock_pruner :one
-- Try to become the schema's pruner (a session lock, released by unlock_pruner).
SELECT pg_try_advisory_lock(%(lock_class)s::int, hashtext(%(schema)s::text)) AS locked;

-- name: unlock_pruner :one
-- Stop being the schema's pruner.
SELECT pg_advisory_unlock(%(lock_class)s::int, hashtext(%(schema)s::text)) AS unlocked;

-- name: count_purgeable_jobs :one
-- What `pgtasks purge` would delete: pending jobs (of a queue and a task; NULL: any) that
-- are not workflow steps, the newest one's id, and the pending workflow steps it leaves.
SELECT count(*) FILTER (WHERE workflow_id IS NULL) AS jobs,
       max(id) FILTER (WHERE workflow_id IS NULL) AS max_id,
       count(*) FILTER (WHERE workflow_id IS NOT NULL) AS workflow_jobs
FROM {schema}.jobs
WHERE status = 'pending'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text);

-- name: purge_jobs :many
-- Delete up to %(limit)s pending jobs (not workflow steps) with ids up to %(max_id)s, so
-- that a job enqueued after the operator saw the count is kept. A row a worker is
-- claiming is skipped: it is no longer pending.
WITH picked AS (
    SELECT id
    FROM {schema}.jobs
    WHERE status = 'pending' AND workflow_id IS NULL AND id <= %(max_id)s::bigint
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
    ORDER BY id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.jobs AS jobs
USING picked
WHERE jobs.id = picked.id AND jobs.status = 'pending'
RETURNING jobs.id;
