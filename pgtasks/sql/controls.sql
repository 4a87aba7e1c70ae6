-- Operators' runtime controls (migration runtime_controls): limits changed, paused and
-- reset at runtime; actions on pending jobs (run now, snooze, edit arguments); the audit
-- of both. Headers, placeholders and parameters as in queries.sql.

-- name: lock_limit :many
-- The stored limit ``name`` with what the app declares and who changed it, row-locked
-- (a change reads, decides and writes under this lock: two operators never interleave).
SELECT name, concurrency, rate_count, rate_period, burst, declared, declared_concurrency,
       declared_rate_count, declared_rate_period, declared_burst, overridden_by,
       overridden_at, paused, paused_concurrency
FROM {schema}.limits
WHERE name = %(name)s
FOR UPDATE;

-- name: write_limit :one
-- Store what applies to the limit ``name`` (an operator's change: marked overridden; a new
-- row is a limit the app does not declare). Rate tokens are kept, capped at the new burst.
INSERT INTO {schema}.limits AS limits
    (name, concurrency, rate_count, rate_period, burst, tokens, declared, overridden_by,
     overridden_at, paused, paused_concurrency)
VALUES (%(name)s, %(concurrency)s, %(rate_count)s, %(rate_period)s, %(burst)s, %(burst)s,
        false, %(actor)s, now(), %(paused)s, %(paused_concurrency)s)
ON CONFLICT (name) DO UPDATE
SET concurrency = EXCLUDED.concurrency,
    rate_count = EXCLUDED.rate_count,
    rate_period = EXCLUDED.rate_period,
    burst = EXCLUDED.burst,
    tokens = least(limits.tokens, EXCLUDED.burst),
    overridden_by = EXCLUDED.overridden_by,
    overridden_at = now(),
    paused = EXCLUDED.paused,
    paused_concurrency = EXCLUDED.paused_concurrency,
    updated_at = now()
RETURNING limits.name, limits.declared;

-- name: reset_declared_limit :one
-- What the app declares applies again to the limit ``name`` (a declared one).
UPDATE {schema}.limits
SET concurrency = declared_concurrency,
    rate_count = declared_rate_count,
    rate_period = declared_rate_period,
    burst = coalesce(declared_burst, 1),
    tokens = least(tokens, coalesce(declared_burst, 1)),
    overridden_by = NULL, overridden_at = NULL, paused = false, paused_concurrency = NULL,
    updated_at = now()
WHERE name = %(name)s AND declared
RETURNING name;

-- name: delete_runtime_limit :one
-- Remove the limit ``name`` an operator set on a task or queue the app does not declare.
WITH removed AS (
    DELETE FROM {schema}.limits WHERE name = %(name)s AND NOT declared RETURNING name
)
SELECT count(*) AS removed FROM removed;

-- name: stamp_limit_jobs :one
-- The unfinished jobs of a task (``task``) or queue (``queue``) count in the
-- limit ``name`` from now on (a limit the app does not declare: their rows did not name
-- it). Row locks are waited for: a job being claimed is stamped once its claim commits.
WITH stamped AS (
    UPDATE {schema}.jobs AS jobs
    SET limit_groups = ARRAY(
        SELECT DISTINCT g FROM unnest(coalesce(jobs.limit_groups, ARRAY[]::text[])
                                      || ARRAY[%(name)s::text]) AS g ORDER BY 1)
    WHERE jobs.status IN ('waiting', 'pending', 'running')
      AND (jobs.task_name = %(task)s OR jobs.queue = %(queue)s)
      AND NOT coalesce(%(name)s::text = ANY(jobs.limit_groups), false)
      AND coalesce(cardinality(jobs.limit_groups), 0) < 8
    RETURNING jobs.id
)
SELECT count(*) AS stamped FROM stamped;

-- name: unstamp_limit_jobs :one
-- The jobs not started no longer count in the removed limit ``name``.
WITH unstamped AS (
    UPDATE {schema}.jobs AS jobs
    SET limit_groups = CASE WHEN cardinality(array_remove(jobs.limit_groups, %(name)s::text)) > 0
                            THEN array_remove(jobs.limit_groups, %(name)s::text) END
    WHERE jobs.status IN ('waiting', 'pending') AND jobs.limit_groups IS NOT NULL
      AND %(name)s::text = ANY(jobs.limit_groups)
    RETURNING jobs.id
)
SELECT count(*) AS unstamped FROM unstamped;

-- name: count_runtime_limits :one
-- How many stored limits the app does not declare (their trigger is on while any is).
SELECT count(*) AS runtime FROM {schema}.limits WHERE NOT declared;

-- name: lock_runtime_limits :exec
-- Serializes the changes that decide whether the runtime-limits trigger is on (a limit the
-- app does not declare stored or removed, migrate settling the trigger): each one counts
-- the stored limits and reads the trigger after the previous one committed.
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(schema)s));

-- name: get_runtime_limits_trigger :one
-- Whether new jobs are stamped with the limits the app does not declare.
SELECT coalesce(bool_or(t.tgenabled <> 'D'), false) AS enabled
FROM pg_trigger AS t
JOIN pg_class AS c ON c.oid = t.tgrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = 'jobs' AND t.tgname = 'jobs_runtime_limits';

-- name: enable_runtime_limits_trigger :exec
-- Stamp new jobs with the limits the app does not declare (a catalog change on jobs).
ALTER TABLE {schema}.jobs ENABLE TRIGGER jobs_runtime_limits;

-- name: disable_runtime_limits_trigger :exec
-- No limit the app does not declare is stored: enqueues skip the stamping trigger.
ALTER TABLE {schema}.jobs DISABLE TRIGGER jobs_runtime_limits;

-- name: notify_limits_changed :one
-- Every worker claims under the changed limit ``name`` at once (at commit).
SELECT pg_notify({limits_channel}, left('changed:' || %(name)s::text, 7000)) IS NULL
       AS notified;

-- name: count_limits :one
-- How many limits are stored (a worker that stored none learns that one was set).
SELECT count(*) AS stored FROM {schema}.limits;

-- name: insert_audit :one
-- One operator action: who (actor), what (action), on what (target), values before/after.
INSERT INTO {schema}.audit_log (actor, action, target, before, after)
VALUES (%(actor)s, %(action)s, %(target)s, %(before)s::jsonb, %(after)s::jsonb)
RETURNING id;

-- name: get_audit :many
-- The last %(limit)s audit rows, newest first; of the targets in %(targets)s when given
-- (NULL: every target), of targets starting with %(prefix)s when given.
SELECT id, at, actor, action, target, before, after
FROM {schema}.audit_log
WHERE (%(targets)s::text[] IS NULL OR target = ANY(%(targets)s::text[]))
  AND (%(prefix)s::text IS NULL OR starts_with(target, %(prefix)s::text))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: run_jobs_now :many
-- Pending jobs in %(ids)s whose run_at is later become due now (a scheduled job, or one
-- waiting for its retry; no attempt is spent). Row locks are waited for: a job a worker
-- is claiming is re-read once its claim commits, and left out (no longer pending).
WITH old AS (
    SELECT id, run_at FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'pending'
    ORDER BY id
    FOR UPDATE
), changed AS (
    UPDATE {schema}.jobs AS jobs
    SET run_at = now(), updated_at = now()
    FROM old
    WHERE jobs.id = old.id AND jobs.status = 'pending' AND jobs.run_at > now()
    RETURNING jobs.id, old.run_at AS before, jobs.run_at AS after, jobs.queue
), notified AS (
    SELECT pg_notify({channel}, queue) FROM (SELECT DISTINCT queue FROM changed) AS q
)
SELECT id, before, after, (SELECT count(*) FROM notified) AS queues FROM changed;

-- name: snooze_jobs :many
-- Pending jobs in %(ids)s start %(seconds)s seconds later than they would (from now when
-- they are due already); no attempt is spent. Locks as run_jobs_now.
WITH old AS (
    SELECT id, run_at FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'pending'
    ORDER BY id
    FOR UPDATE
)
UPDATE {schema}.jobs AS jobs
SET run_at = greatest(jobs.run_at, now()) + make_interval(secs => %(seconds)s::float8),
    updated_at = now()
FROM old
WHERE jobs.id = old.id AND jobs.status = 'pending'
RETURNING jobs.id, old.run_at AS before, jobs.run_at AS after;

-- name: lock_pending_job :many
-- The job %(id)s with what editing its arguments needs, row-locked (waits for a claim in
-- progress: the status read is the one after it).
SELECT id, status, task_name, queue, args, kwargs, limit_groups, limit_key, workflow_id
FROM {schema}.jobs
WHERE id = %(id)s
FOR UPDATE;

-- name: edit_job_arguments :many
-- New arguments (and their limit instances) of the pending job %(id)s.
UPDATE {schema}.jobs
SET args = %(args)s::jsonb, kwargs = %(kwargs)s::jsonb,
    limit_groups = %(limit_groups)s::text[], limit_key = %(limit_key)s,
    updated_at = now()
WHERE id = %(id)s AND status = 'pending'
RETURNING id;


-- name: set_worker_pool_bounds :exec
-- The bounds of the worker %(id)s's pool (it starts with them; resizes stay within).
UPDATE {schema}.workers
SET concurrency_min = %(min)s, concurrency_max = %(max)s, concurrency_wanted = NULL
WHERE id = %(id)s;

-- name: lock_worker_pool :many
-- The worker %(id)s's pool: its size, bounds and the size asked for, row-locked.
SELECT id, hostname, pid, concurrency, concurrency_min, concurrency_max, concurrency_wanted
FROM {schema}.workers
WHERE id = %(id)s
FOR UPDATE;

-- name: want_worker_pool :exec
-- Ask the worker %(id)s for a pool of %(size)s slots (it applies it at its next heartbeat).
UPDATE {schema}.workers SET concurrency_wanted = %(size)s WHERE id = %(id)s;

-- name: get_worker_pool_wanted :many
-- The pool size asked of the worker %(id)s, if any (read at each heartbeat).
SELECT concurrency_wanted FROM {schema}.workers
WHERE id = %(id)s AND concurrency_wanted IS NOT NULL;

-- name: applied_worker_pool :exec
-- The worker %(id)s runs %(size)s slots now (the request is done).
UPDATE {schema}.workers
SET concurrency = %(size)s,
    concurrency_wanted = CASE WHEN concurrency_wanted = %(size)s THEN NULL
                              ELSE concurrency_wanted END
WHERE id = %(id)s;

-- name: get_filtered_scheduled_ids :many
-- Up to %(limit)s ids above %(after)s of pending jobs scheduled later that match the
-- filter (as cancel_filtered_jobs reads it), by id: what "run now all matching" makes due.
SELECT id
FROM {schema}.jobs
WHERE status = 'pending' AND run_at > now() AND id > %(after)s
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
  AND (%(workflow_id)s::bigint IS NULL OR workflow_id = %(workflow_id)s::bigint)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
  AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
  AND (%(due)s::boolean IS NULL OR %(due)s::boolean = false)
ORDER BY id
LIMIT %(limit)s::int;
