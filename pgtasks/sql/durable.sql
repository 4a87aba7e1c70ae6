-- Durable steps, sleeps and waits for events (migration durable, docs/howto/durable.md).
-- Every write of a running attempt is fenced: the job's row is locked under the lease
-- condition of the worker's finish (running, locked_by, attempts); no row: the lease is
-- lost and nothing is written.

-- name: load_job_steps :many
-- A job's checkpoints in the order its code reached them.
SELECT position, name, occurrence, status, result, error
FROM {schema}.job_steps
WHERE job_id = %(job_id)s
ORDER BY position;

-- name: hold_job :one
-- Lock a running job's row under its lease (no row: the lease is lost).
SELECT id, cancel_requested
FROM {schema}.jobs
WHERE id = %(job_id)s AND status = 'running'
  AND locked_by = %(worker_id)s AND attempts = %(attempt)s
FOR NO KEY UPDATE;

-- name: record_job_step :one
-- Write one checkpoint under the lease; a job's first marks its meta 'pgtasks.durable'
-- (its steps follow it into jobs_history). written: false when the fence refused it, or
-- a checkpoint of that step was there already.
WITH held AS (
    SELECT id, meta ? 'pgtasks.durable' AS marked
    FROM {schema}.jobs
    WHERE id = %(job_id)s AND status = 'running'
      AND locked_by = %(worker_id)s AND attempts = %(attempt)s
    FOR NO KEY UPDATE
),
marked AS (
    UPDATE {schema}.jobs AS jobs
    SET meta = jobs.meta || jsonb_build_object('pgtasks.durable', true)
    FROM held
    WHERE jobs.id = held.id AND NOT held.marked
    RETURNING jobs.id
),
written AS (
    INSERT INTO {schema}.job_steps
        (job_id, name, occurrence, position, status, result, error, attempt, worker_id,
         started_at, finished_at)
    SELECT held.id, %(name)s, %(occurrence)s, %(position)s, %(status)s, %(result)s::jsonb,
           %(error)s, %(attempt)s, %(worker_id)s,
           clock_timestamp() - make_interval(secs => %(seconds)s), clock_timestamp()
    FROM held
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
SELECT (SELECT count(*) FROM held) > 0 AS held,
       (SELECT count(*) FROM written) > 0 AS written,
       (SELECT count(*) FROM marked) AS marked;

-- name: park_job :one
-- End a running attempt without using it up (a durable sleep, a wait, a snooze): the job
-- goes back to pending until %(until)s (or %(delay)s seconds from now), its attempt given
-- back, its meta marked 'pgtasks.parked' (what it waits for); with %(name)s, the sleep's
-- checkpoint (its wake time) is written in the same statement. Fenced; a job whose
-- cancellation was requested is not parked (cancel_requested: the attempt ends, and its
-- finish records the cancel).
WITH held AS (
    SELECT id, cancel_requested, meta ? 'pgtasks.durable' AS marked
    FROM {schema}.jobs
    WHERE id = %(job_id)s AND status = 'running'
      AND locked_by = %(worker_id)s AND attempts = %(attempt)s
    FOR NO KEY UPDATE
),
wake AS (
    SELECT coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(delay)s)) AS at
),
parked AS (
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending',
        run_at = wake.at,
        attempts = greatest(jobs.attempts - 1, 0),
        meta = jobs.meta || jsonb_build_object('pgtasks.parked', %(marker)s::jsonb
                   || jsonb_build_object('until', wake.at, 'since', now()))
             || CASE WHEN %(name)s::text IS NULL OR held.marked THEN jsonb_build_object()
                     ELSE jsonb_build_object('pgtasks.durable', true) END,
        updated_at = now()
    FROM held, wake
    WHERE jobs.id = held.id AND NOT held.cancel_requested
    RETURNING jobs.id, jobs.queue
),
written AS (
    INSERT INTO {schema}.job_steps
        (job_id, name, occurrence, position, status, result, error, attempt, worker_id,
         started_at, finished_at)
    SELECT parked.id, %(name)s, %(occurrence)s, %(position)s, 'sleep',
           jsonb_build_object('until', wake.at), NULL, %(attempt)s, %(worker_id)s, now(), now()
    FROM parked, wake
    WHERE %(name)s::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
SELECT (SELECT count(*) FROM held) > 0 AS held,
       coalesce((SELECT bool_or(cancel_requested) FROM held), false) AS cancel_requested,
       (SELECT count(*) FROM parked) > 0 AS parked,
       (SELECT at FROM wake) AS until,
       (SELECT CASE WHEN isfinite(at) THEN greatest(extract(epoch FROM at - now()), 0)
                    ELSE 1e9 END FROM wake)::float8 AS seconds,
       (SELECT count(*) FROM written) AS written,
       (SELECT pg_notify({activity_channel}, 'parked') FROM parked) IS NULL AS notified;

-- name: unpark_job :exec
-- A parked job running again: its 'pgtasks.parked' mark goes (fenced).
UPDATE {schema}.jobs
SET meta = meta - 'pgtasks.parked'
WHERE id = %(job_id)s AND status = 'running'
  AND locked_by = %(worker_id)s AND attempts = %(attempt)s
  AND meta ? 'pgtasks.parked';

-- name: lock_event_key :exec
-- Serialise the emits and waits of one event key (to the end of the transaction): a wait
-- sees an event committed before it, or the emit sees the wait and wakes its job.
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(key)s));

-- name: find_event :one
-- The first event of a key after an event id.
SELECT id, payload FROM {schema}.job_events
WHERE key = %(key)s AND id > %(after_id)s
ORDER BY id
LIMIT 1;

-- name: start_wait :one
-- Register a job's wait for an event of a key (kept if it is there: a woken job that
-- waits again keeps its first deadline); its deadline and whether it passed.
WITH started AS (
    INSERT INTO {schema}.job_waits (job_id, key, after_id, deadline)
    VALUES (%(job_id)s, %(key)s, %(after_id)s,
            now() + make_interval(secs => %(timeout)s))
    ON CONFLICT (job_id) DO UPDATE
    SET key = excluded.key, after_id = excluded.after_id,
        deadline = CASE WHEN job_waits.key = excluded.key THEN job_waits.deadline
                        ELSE excluded.deadline END
    RETURNING deadline
)
SELECT coalesce(deadline, 'infinity'::timestamptz) AS deadline,
       coalesce(deadline <= now(), false) AS passed
FROM started;

-- name: end_wait :exec
-- A job's wait ended (an event came, or its timeout passed).
DELETE FROM {schema}.job_waits WHERE job_id = %(job_id)s;

-- name: emit_event :one
-- Record an event (in the caller's transaction) and wake the jobs waiting for its key
-- (due now; their queues notified).
WITH event AS (
    INSERT INTO {schema}.job_events (key, payload)
    VALUES (%(key)s, %(payload)s::jsonb)
    RETURNING id
),
woken AS (
    UPDATE {schema}.jobs AS jobs
    SET run_at = now(), updated_at = now()
    WHERE jobs.id = ANY(ARRAY(SELECT waits.job_id FROM {schema}.job_waits AS waits
                              WHERE waits.key = %(key)s))
      AND jobs.status = 'pending' AND jobs.run_at > now()
    RETURNING jobs.queue
),
notified AS (
    SELECT pg_notify({channel}, queue) FROM (SELECT DISTINCT queue FROM woken) AS queues
)
SELECT (SELECT id FROM event) AS id, (SELECT count(*) FROM woken) AS woken,
       (SELECT count(*) FROM notified) AS notified;

-- name: wake_event_waiters :many
-- The poll fallback of emit_event's wake-up: jobs parked for a key that has an event
-- they have not seen are made due (their queues returned, to notify).
-- Driven by job_waits (the jobs reached by their primary key): with no job waiting, the
-- pass reads nothing of jobs (the rescuer runs it every rescue interval).
UPDATE {schema}.jobs AS jobs
SET run_at = now(), updated_at = now()
WHERE jobs.id = ANY(ARRAY(
        SELECT waits.job_id FROM {schema}.job_waits AS waits
        WHERE EXISTS (SELECT 1 FROM {schema}.job_events AS events
                      WHERE events.key = waits.key AND events.id > waits.after_id)))
  AND jobs.status = 'pending' AND jobs.run_at > now()
RETURNING jobs.id, jobs.queue;

-- name: prune_job_events :one
-- Delete the events older than %(older_than)s seconds (a batch), and the waits of jobs
-- that no longer wait (cancelled or deleted while parked).
WITH events AS (
    DELETE FROM {schema}.job_events
    WHERE id IN (SELECT id FROM {schema}.job_events
                 WHERE created_at < now() - make_interval(secs => %(older_than)s)
                 ORDER BY created_at LIMIT %(limit)s)
    RETURNING id
),
waits AS (
    DELETE FROM {schema}.job_waits AS waits
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE jobs.id = waits.job_id)
    RETURNING job_id
)
SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM waits) AS waits;

-- name: get_job_steps :many
-- A job's steps: its checkpoints while it waits or runs, those kept in its history row's
-- meta once it ended.
SELECT position, name, occurrence, status, result, error, attempt, worker_id,
       started_at, finished_at
FROM {schema}.job_steps
WHERE job_id = %(job_id)s
UNION ALL
SELECT steps.*
FROM {schema}.jobs_history AS jobs, {schema}.job_steps_of_meta(jobs.meta) AS steps
WHERE jobs.id = %(job_id)s
ORDER BY position;

-- name: copy_job_steps :one
-- A fork's checkpoints: those of job %(source_id)s before position %(before)s (NULL:
-- all) and before its first failed step (that one runs again), copied to the new job
-- %(job_id)s (pending, not yet claimed), its meta marked durable.
WITH source AS (
    SELECT position, name, occurrence, status, result, error, attempt, worker_id,
           started_at, finished_at
    FROM {schema}.job_steps WHERE job_id = %(source_id)s
    UNION ALL
    SELECT steps.*
    FROM {schema}.jobs_history AS jobs, {schema}.job_steps_of_meta(jobs.meta) AS steps
    WHERE jobs.id = %(source_id)s
),
copied AS (
    INSERT INTO {schema}.job_steps
        (job_id, name, occurrence, position, status, result, error, attempt, worker_id,
         started_at, finished_at)
    SELECT %(job_id)s, name, occurrence, position, status, result, error, 0, worker_id,
           started_at, finished_at
    FROM source
    WHERE (%(before)s::integer IS NULL OR position < %(before)s::integer)
      AND position < coalesce((SELECT min(position) FROM source WHERE status = 'failed'),
                              2147483647)
    ON CONFLICT DO NOTHING
    RETURNING position
),
marked AS (
    UPDATE {schema}.jobs SET meta = meta || jsonb_build_object('pgtasks.durable', true)
    WHERE id = %(job_id)s
    RETURNING id
)
SELECT (SELECT count(*) FROM copied) AS copied, (SELECT count(*) FROM marked) AS marked;

-- name: restore_job_steps :one
-- A retried job (pending again, back from jobs_history) keeps its checkpoints: those
-- its meta holds ('pgtasks.steps') before its first failed step (that one runs again)
-- go back into job_steps, as a fork's would.
WITH source AS (
    SELECT steps.*
    FROM {schema}.jobs AS jobs, {schema}.job_steps_of_meta(jobs.meta) AS steps
    WHERE jobs.id = %(job_id)s AND jobs.status = 'pending'
),
copied AS (
    INSERT INTO {schema}.job_steps
        (job_id, name, occurrence, position, status, result, error, attempt, worker_id,
         started_at, finished_at)
    SELECT %(job_id)s, name, occurrence, position, status, result, error, attempt,
           worker_id, started_at, finished_at
    FROM source
    WHERE position < coalesce((SELECT min(position) FROM source WHERE status = 'failed'),
                              2147483647)
    ON CONFLICT DO NOTHING
    RETURNING position
)
SELECT count(*) AS copied FROM copied;

-- name: count_parked_jobs :many
-- Jobs parked by a durable sleep or a wait for an event, by queue and kind.
SELECT queue, meta -> 'pgtasks.parked' ->> 'kind' AS kind, count(*) AS jobs
FROM {schema}.jobs
WHERE status = 'pending' AND meta ? 'pgtasks.parked'
GROUP BY queue, kind
ORDER BY queue, kind;
