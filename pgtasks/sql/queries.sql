-- The statements of Queries itself (_store/queries.py and QueriesBase in _store/base.py):
-- reading jobs, the worker registry, result notifications. Each area's statements live in
-- sql/<area>.sql beside _store/<area>.py. Every statement starts with a header
--   -- name: <name> :<one|many|exec|execrows>
-- and a one-line description. Placeholders: {schema} (identifier), {channel} (literal).
-- Parameters are named (%(name)s); time comes from the server (now()).

-- name: lock_migrations :exec
-- Serialise migrators of one schema until the end of the transaction.
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(schema)s));

-- name: get_schema_version :one
-- The highest applied migration version.
SELECT coalesce(max(version), 0) AS version FROM {schema}.migrations;

-- name: get_job :one
-- One job by id.
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, meta, started_at, attempt_errors,
       -- A uniqueness scope's key and window (migration 0010), the window as its bounds.
       unique_key, lower(unique_window) AS unique_window_start,
       upper(unique_window) AS unique_window_end
-- Finished jobs are in jobs_history (migration jobs_history): both, by their id indexes.
FROM {schema}.all_jobs
WHERE id = %(id)s;

-- name: get_jobs :many
-- Jobs by id (missing ids are absent from the result).
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, meta, started_at, attempt_errors,
       unique_key, lower(unique_window) AS unique_window_start,
       upper(unique_window) AS unique_window_end
FROM {schema}.all_jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id;

-- name: update_job_meta :one
-- Merge a patch into a running job's meta, fenced by its lease; no row: the lease is lost.
-- The dashboard hears of it (payload: the job id).
WITH updated AS (
UPDATE {schema}.jobs AS jobs
-- A progress report's updated_at is the server's clock, as every time pgtasks stores.
SET meta = jobs.meta || CASE
        WHEN %(patch)s::jsonb -> 'pgtasks.progress' IS NOT NULL
        THEN jsonb_set(%(patch)s::jsonb, ARRAY['pgtasks.progress', 'updated_at'], to_jsonb(now()))
        ELSE %(patch)s::jsonb END,
    updated_at = now()
WHERE jobs.id = %(id)s
  AND jobs.status = 'running'
  AND jobs.locked_by = %(worker_id)s
  AND jobs.attempts = %(attempt)s
RETURNING jobs.id
)
SELECT id, pg_notify({activity_channel}, id::text) IS NULL AS notified FROM updated;

-- name: get_job_id_by_key :one
-- The job an idempotency key names: unfinished in jobs, finished in job_keys.
SELECT id FROM {schema}.jobs WHERE idempotency_key = %(key)s
UNION ALL
SELECT job_id AS id FROM {schema}.job_keys WHERE idempotency_key = %(key)s
LIMIT 1;

-- name: get_job_status :one
-- The status of one job by id.
SELECT status FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: register_worker :one
-- Register a worker; its id is the lease owner written to the jobs it claims. task_names:
-- the tasks it knows and claims (migration flow_control; NULL: any).
INSERT INTO {schema}.workers (hostname, pid, queues, concurrency, task_names)
VALUES (%(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(task_names)s::text[])
RETURNING id;

-- name: heartbeat_worker :one
-- Refresh a worker's heartbeat; no row means the registration was removed as dead.
UPDATE {schema}.workers SET heartbeat_at = now() WHERE id = %(worker_id)s RETURNING id;

-- name: deregister_worker :exec
-- Remove a worker's registration at shutdown.
DELETE FROM {schema}.workers WHERE id = %(worker_id)s;

-- name: get_job_outcome :one
-- What a waiter needs of one job: status, result and last error.
SELECT id, status, result, last_error FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: notify_done :exec
-- Tell result waiters that these jobs ended (payload "id,id,…").
SELECT pg_notify({done_channel}, %(ids)s);

-- name: notify_queue :exec
-- Wake workers of a queue (after releasing or rescuing jobs).
SELECT pg_notify({channel}, %(queue)s);
