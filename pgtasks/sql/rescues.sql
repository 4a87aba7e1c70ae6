-- A worker's jobs handed back before they end: released by a stopping worker or as
-- orphans, rescued from workers whose lease expired, and those workers' registrations
-- removed. Headers, placeholders and parameters as in queries.sql. A job that ends here
-- (cancelled, failed) leaves jobs for jobs_history by the jobs_move_finished trigger
-- (migration jobs_history); a limited job frees its slots (limits channel). The batch
-- service's orphans are released here too (its claims are claim_jobs, claims.sql).

-- name: release_jobs :many
-- Put the unfinished jobs of a stopping worker back to pending without using up an attempt.
WITH released AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN jobs.cancel_requested THEN 'cancelled' ELSE 'pending' END,
        attempts = jobs.attempts - 1,
        run_at = now(),
        finished_at = CASE WHEN jobs.cancel_requested THEN now() END,
        updated_at = now()
    FROM unnest(%(id)s::bigint[], %(attempt)s::int[]) AS lease(id, attempt)
    WHERE jobs.id = lease.id
      AND jobs.status = 'running'
      AND jobs.locked_by = %(worker_id)s
      AND jobs.attempts = lease.attempt
    RETURNING jobs.id, jobs.queue, jobs.limit_groups
),
freed AS (
    -- Their slots of limits are free (migration flow_control): wake the workers waiting for one.
    SELECT pg_notify({limits_channel}, left(%(worker_id)s::text || ':'
                     || string_agg(DISTINCT split_part(inst, chr(31), 1), ','), 7900))
    FROM released, unnest(released.limit_groups) AS inst
    WHERE released.limit_groups IS NOT NULL AND inst IS NOT NULL
    HAVING count(*) > 0
)
SELECT released.id, pg_notify({channel}, released.queue) IS NULL AS notified
FROM released
LEFT JOIN (SELECT count(*) AS sent FROM freed) AS limits ON true;

-- name: release_orphaned_jobs :many
-- Release jobs running under this worker that it does not know it holds (a claim whose
-- reply was lost with the connection); they never started, so the attempt is returned.
WITH released AS (
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending',
        attempts = jobs.attempts - 1,
        run_at = now(),
        updated_at = now()
    WHERE jobs.status = 'running'
      AND jobs.locked_by = %(worker_id)s
      AND jobs.id <> ALL(%(known_ids)s::bigint[])
    RETURNING jobs.id, jobs.limit_groups
), freed AS (
    -- Their slots of limits are free (migration flow_control): wake the workers waiting for one.
    SELECT pg_notify({limits_channel}, left(%(worker_id)s::text || ':'
                     || string_agg(DISTINCT split_part(inst, chr(31), 1), ','), 7900))
    FROM released, unnest(released.limit_groups) AS inst
    WHERE released.limit_groups IS NOT NULL AND inst IS NOT NULL
    HAVING count(*) > 0
)
SELECT released.id
FROM released
LEFT JOIN (SELECT count(*) AS sent FROM freed) AS limits ON true;

-- name: rescue_jobs :many
-- Jobs running under a worker that is gone or silent past the lease: back to pending,
-- or failed when out of attempts. The long jobs of live workers are never touched. The slots
-- of limits they held are free: the workers waiting for one are notified.
WITH lost AS (
    SELECT jobs.id
    FROM {schema}.jobs AS jobs
    LEFT JOIN {schema}.workers AS workers ON workers.id = jobs.locked_by
    WHERE jobs.status = 'running'
      AND (workers.id IS NULL
           OR workers.heartbeat_at < now() - make_interval(secs => %(lease_timeout)s))
    FOR UPDATE OF jobs SKIP LOCKED
), rescued AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN jobs.cancel_requested THEN 'cancelled'
                      WHEN jobs.attempts >= jobs.max_attempts THEN 'failed'
                      ELSE 'pending' END,
        last_error = format('WorkerLostError: worker %%s was lost (no heartbeat within %%s s)'
                            ' during attempt %%s', jobs.locked_by, %(lease_timeout)s,
                            jobs.attempts),
        run_at = now(),
        finished_at = CASE WHEN jobs.cancel_requested OR jobs.attempts >= jobs.max_attempts
                           THEN now() END,
        attempt_errors = coalesce(jobs.attempt_errors, '[]'::jsonb) || jsonb_build_array(
            jsonb_build_object(
                'attempt', jobs.attempts,
                'worker_id', jobs.locked_by,
                'error', format('WorkerLostError: worker %%s was lost (no heartbeat within'
                                ' %%s s) during attempt %%s', jobs.locked_by,
                                %(lease_timeout)s, jobs.attempts),
                'exception_type', 'pgtasks.WorkerLostError',
                'finished_at', now())),
        updated_at = now()
    FROM lost
    WHERE jobs.id = lost.id
    RETURNING jobs.id, jobs.status, jobs.locked_by, jobs.attempts, jobs.queue, jobs.limit_groups
), counted AS (
    -- The rescued counter (migration 0014), in the rescue's own transaction: exact
    -- even if this worker dies right after.
    INSERT INTO {schema}.counters (name, value)
    SELECT 'rescued', count(*) FROM rescued HAVING count(*) > 0
), freed AS (
    -- Rescued limited jobs free their slots (migration flow_control): workers waiting
    -- for them claim at once.
    SELECT pg_notify({limits_channel}, left('0:'
                     || string_agg(DISTINCT split_part(inst, chr(31), 1), ','), 7900))
    FROM rescued, unnest(rescued.limit_groups) AS inst
    WHERE rescued.limit_groups IS NOT NULL AND inst IS NOT NULL
    HAVING count(*) > 0
)
SELECT rescued.id, rescued.status, rescued.locked_by, rescued.attempts, rescued.queue
FROM rescued
LEFT JOIN (SELECT count(*) AS sent FROM freed) AS limits ON true;

-- name: delete_dead_workers :many
-- Remove registrations silent past the lease (their jobs are rescued first).
DELETE FROM {schema}.workers
WHERE heartbeat_at < now() - make_interval(secs => %(lease_timeout)s)
RETURNING id, hostname, pid;

-- name: release_orphaned_batch_jobs :many
-- After a batch claim failed with the connection: jobs of these (batch) tasks running
-- under this worker that its batch service does not hold (the claim committed, its reply
-- was lost) go back to pending with their attempt returned; they never started. The
-- claim loop never holds a batch task's job, so nothing of it is touched.
UPDATE {schema}.jobs AS jobs
SET status = 'pending',
    attempts = jobs.attempts - 1,
    run_at = now(),
    updated_at = now()
WHERE jobs.status = 'running'
  AND jobs.locked_by = %(worker_id)s
  AND jobs.task_name = ANY(%(task_names)s::text[])
  AND jobs.id <> ALL(%(known_ids)s::bigint[])
RETURNING jobs.id;
