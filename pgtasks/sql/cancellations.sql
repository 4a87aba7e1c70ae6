-- Cancelling a job (app.cancel(), which `pgtasks jobs cancel` and the dashboard use too)
-- and the requests a worker reads for the jobs it runs. Headers, placeholders and
-- parameters as in queries.sql.

-- name: cancel_job :one
-- Cancel a job: pending becomes cancelled; running is flagged and its worker notified;
-- a finished job (in jobs_history) is left as it is. Returns the status before and after;
-- no row when the job does not exist, or when it finished while this statement waited
-- for its row lock (the caller reads it again: the next statement sees it finished).
-- %(terminate)s: a running job's attempt is to be killed, not only flagged; the request
-- (meta key "pgtasks.terminate") names the attempt and the lease owner of this moment, so
-- a worker acts on it only for that attempt under its own lease (a job rescued to another
-- worker meanwhile is flagged cancelled there, never killed).
WITH target AS (
    SELECT id, status, attempts, locked_by FROM {schema}.jobs WHERE id = %(id)s FOR UPDATE
),
known AS (
    SELECT id, status FROM target
    UNION ALL
    SELECT id, status FROM {schema}.jobs_history WHERE id = %(id)s
),
cancelled AS (
    -- A waiting workflow step (migration 0011) is cancelled like a pending job.
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN target.status IN ('pending', 'waiting') THEN 'cancelled'
                      ELSE jobs.status END,
        cancel_requested = true,
        finished_at = CASE WHEN target.status IN ('pending', 'waiting') THEN now()
                           ELSE jobs.finished_at END,
        meta = CASE WHEN %(terminate)s AND target.status = 'running'
                    THEN jobs.meta || jsonb_build_object('pgtasks.terminate', jsonb_build_object(
                        'attempt', target.attempts, 'worker_id', target.locked_by,
                        'requested_at', now()))
                    ELSE jobs.meta END,
        updated_at = now()
    FROM target
    WHERE jobs.id = target.id AND target.status IN ('pending', 'waiting', 'running')
    RETURNING jobs.id, jobs.status
)
SELECT known.status AS previous_status,
       coalesce(cancelled.status, known.status) AS status,
       CASE WHEN cancelled.status = 'running' THEN pg_notify({cancel_channel}, known.id::text)
            WHEN cancelled.status = 'cancelled' THEN pg_notify({done_channel}, known.id::text)
       END IS NULL AS notified
FROM known LEFT JOIN cancelled ON cancelled.id = known.id;

-- name: get_cancel_requests :many
-- Jobs running under a worker whose cancellation was requested; terminate_attempt: the
-- attempt a termination was requested for, when it was requested under this lease owner.
SELECT id,
       CASE WHEN meta -> 'pgtasks.terminate' ->> 'worker_id' = %(worker_id)s::text
            THEN meta -> 'pgtasks.terminate' ->> 'attempt' END AS terminate_attempt
FROM {schema}.jobs
WHERE status = 'running' AND locked_by = %(worker_id)s AND cancel_requested;

-- name: expire_jobs :many
-- End pending jobs past their start deadline (expires=: the reserved meta key
-- "pgtasks.expires", seconds since the epoch) cancelled, with the reason; the claims
-- never start them. A deadline that is not a number (written by hand) compares below any
-- number: expired too. Waiters hear of them; the workflow triggers treat them as
-- cancelled steps; the "expired" counter (migration 0014's counters) counts them in this
-- statement's transaction. Reads the pending jobs that have a deadline through
-- jobs_expiry_idx (migration 0020), not every due pending job.
WITH due AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND meta ? 'pgtasks.expires' AND run_at <= now()
      AND meta -> 'pgtasks.expires' <= to_jsonb(extract(epoch FROM now()))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
expired AS (
    UPDATE {schema}.jobs AS jobs
    SET status = 'cancelled',
        cancel_requested = true,
        last_error = 'JobExpired: expired: not started before its deadline (expires=)',
        finished_at = now(),
        updated_at = now()
    FROM due
    WHERE jobs.id = due.id
    RETURNING jobs.id
),
counted AS (
    INSERT INTO {schema}.counters (name, value)
    SELECT 'expired', count(*) FROM expired HAVING count(*) > 0
)
SELECT id, pg_notify({done_channel}, id::text) IS NULL AS notified FROM expired;
