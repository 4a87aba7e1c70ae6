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
FROM {schema}.all_jobs
GROUP BY queue
ORDER BY queue;

-- name: list_jobs :many
-- The newest jobs matching optional status, queue, task and workflow filters (NULL: any).
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, now() AS now,
       -- A parked job's mark (migration durable): jobs list shows it sleeping or waiting.
       CASE WHEN meta ? 'pgtasks.parked'
            THEN jsonb_build_object('pgtasks.parked', meta -> 'pgtasks.parked')
            ELSE jsonb_build_object() END AS meta
FROM {schema}.all_jobs
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

-- name: list_running_jobs :many
-- What runs where: up to %(limit)s running jobs (through jobs_running_idx), each with its
-- args and kwargs as JSON text cut at %(chars)s characters (and their full length), its
-- attempt, how long this attempt has run, and its holder's host and pid.
SELECT jobs.id, jobs.task_name, jobs.queue, jobs.locked_by, jobs.attempts, jobs.max_attempts,
       left(jobs.args::text, %(chars)s::int) AS args_text,
       length(jobs.args::text) AS args_length,
       left(jobs.kwargs::text, %(chars)s::int) AS kwargs_text,
       length(jobs.kwargs::text) AS kwargs_length,
       jobs.locked_at, extract(epoch FROM now() - jobs.locked_at)::float8 AS runtime,
       jobs.cancel_requested, workers.hostname, workers.pid
FROM {schema}.jobs AS jobs
LEFT JOIN {schema}.workers AS workers ON workers.id = jobs.locked_by
WHERE jobs.status = 'running'
ORDER BY jobs.locked_by, jobs.locked_at, jobs.id
LIMIT %(limit)s::int;

-- name: list_recent_worker_jobs :many
-- The last %(per_worker)s jobs each of the workers %(worker_ids)s ran to their end, newest
-- first: per worker, one probe of jobs_history_worker_idx (locked_by, finished_at;
-- migration 0027) in each partition, so the read is exact and costs the same at any
-- history size.
SELECT last.id, last.task_name, last.status, last.attempts, last.locked_by,
       last.finished_at, last.took
FROM unnest(%(worker_ids)s::bigint[]) AS worker(id)
CROSS JOIN LATERAL (
    SELECT id, task_name, status, attempts, locked_by, finished_at,
           extract(epoch FROM finished_at - locked_at)::float8 AS took
    FROM {schema}.jobs_history
    WHERE locked_by = worker.id
    ORDER BY finished_at DESC
    LIMIT %(per_worker)s::int
) AS last
ORDER BY last.locked_by, last.finished_at DESC, last.id DESC;

-- name: retry_job :one
-- A failed or cancelled job back to pending, due now, allowed one more attempt (moved
-- back from jobs_history by jobs_retry, migration jobs_history); the row's previous
-- status tells a missing job (no row) from one in another state. A workflow step
-- cancelled before it received its input is left as it is (needs_input:
-- retry_workflow_step re-assembles it).
WITH target AS (
    SELECT id, status,
           coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                    AND cardinality(prev_ids) > 0, false) AS needs_input
    FROM {schema}.all_jobs WHERE id = %(id)s::bigint
), retried AS (
    SELECT retried.*
    FROM target
    CROSS JOIN LATERAL {schema}.jobs_retry(ARRAY[target.id]) AS retried
    WHERE target.status IN ('failed', 'cancelled') AND NOT target.needs_input
)
SELECT target.id, target.status AS previous_status, retried.queue, retried.attempts,
       retried.max_attempts, retried.id IS NOT NULL AS retried, target.needs_input
FROM target
LEFT JOIN retried ON retried.id = target.id;

-- name: retry_failed_jobs :many
-- Up to %(limit)s failed jobs (of one task, or any) back to pending, due now.
WITH picked AS (
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs_history AS jobs
        WHERE status = 'failed'
          AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
          -- A workflow step that never received its input: retry_workflow_step.
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
    ) AS history
    UNION ALL
    -- Failed jobs that finished before migration jobs_history, until the pruner moves them.
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs AS jobs
        WHERE status = 'failed'
          AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
          AND NOT coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                           AND cardinality(prev_ids) > 0, false)
          AND (unique_key IS NULL OR unique_window IS NOT NULL OR NOT EXISTS (
              SELECT FROM {schema}.jobs AS holder
              WHERE holder.unique_key = jobs.unique_key AND holder.unique_window IS NULL
                AND holder.status IN ('pending', 'running')))
        ORDER BY id
        LIMIT %(limit)s::int
        FOR UPDATE SKIP LOCKED
    ) AS legacy
    LIMIT %(limit)s::int
)
SELECT id, queue FROM {schema}.jobs_retry(ARRAY(SELECT id FROM picked ORDER BY id));

-- name: prune_jobs :many
-- Delete up to %(limit)s finished jobs of %(statuses)s finished over %(older_than)s s ago
-- from every partition of jobs_history (a retention under a day: the pruner drops whole
-- days only once they are past it), with the keys they hold (jobs_delete_finished).
WITH doomed AS (
    SELECT id
    FROM {schema}.jobs_history AS jobs
    WHERE status = ANY(%(statuses)s::text[])
      AND (finished_at IS NULL
           OR finished_at < now() - make_interval(secs => %(older_than)s::float8))
      -- A job of a workflow (migration 0011) stays while the workflow has unfinished
      -- jobs: a chord's callback reads its members' results when it starts.
      AND (workflow_id IS NULL
           OR NOT EXISTS (SELECT 1 FROM {schema}.jobs AS other
                          WHERE other.workflow_id = jobs.workflow_id
                            AND other.status IN ('waiting', 'pending', 'running')))
    ORDER BY finished_at
    LIMIT %(limit)s::int
    -- Rows held elsewhere (a retry) are skipped: the batch never waits.
    FOR UPDATE SKIP LOCKED
)
SELECT status, count(*)::int AS deleted
FROM {schema}.jobs_delete_finished(ARRAY(SELECT id FROM doomed))
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
), flag AS (
    -- This statement deletes the keys itself (jobs_forget_key leaves its rows alone).
    SELECT set_config('pgtasks.keys_handled', 'on', true)
), purged AS (
    DELETE FROM {schema}.jobs AS jobs
    USING picked
    WHERE jobs.id = picked.id AND jobs.status = 'pending'
      AND (SELECT count(*) FROM flag) = 1
    RETURNING jobs.id
), keys AS (
    -- The keys the purged jobs held (migration jobs_history) are free again.
    DELETE FROM {schema}.job_keys AS keys
    WHERE keys.job_id IN (SELECT id FROM purged)
)
SELECT id FROM purged;
