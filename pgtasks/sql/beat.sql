-- Beat (`pgtasks beat`, migration 0002): its session, the leader lock of a schema and the
-- stored state of periodic schedules in `periodic` (`pgtasks schedules`). Headers,
-- placeholders and parameters as in queries.sql.

-- name: configure_beat_session :exec
-- Beat: bound waits on its connection; the server drops a vanished beat host's session.
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       -- Server-side keepalives (ignored on Unix sockets): a partitioned leader's session
       -- and its lock end after about idle + interval * count seconds.
       set_config('tcp_keepalives_idle', %(keepalives_idle)s, false),
       set_config('tcp_keepalives_interval', %(keepalives_interval)s, false),
       set_config('tcp_keepalives_count', %(keepalives_count)s, false);

-- name: lock_beat :one
-- Try to become the schema's active beat (a session lock, held until disconnect).
SELECT pg_try_advisory_lock(%(lock_class)s, hashtext(%(schema)s)) AS locked;

-- name: unlock_beat :one
-- Step down as the active beat (a standby takes over at its next attempt).
SELECT pg_advisory_unlock(%(lock_class)s, hashtext(%(schema)s)) AS unlocked;

-- name: load_periodic :many
-- The stored state of the given schedules; a new schedule's row starts at now().
WITH input AS (
    SELECT DISTINCT name FROM unnest(%(name)s::text[]) AS input(name)
), created AS (
    -- A schedule seen for the first time has handled everything up to now: a first
    -- start enqueues nothing for the past. A row another beat is creating at this
    -- moment is missing from both halves below; it is read on the next pass.
    INSERT INTO {schema}.periodic AS periodic (name, processed_until)
    SELECT name, now() FROM input
    ON CONFLICT (name) DO NOTHING
    RETURNING periodic.name, periodic.processed_until, periodic.last_tick,
              periodic.last_job_id
)
SELECT name, processed_until, last_tick, last_job_id, now() AS now
FROM created
UNION ALL
-- The statement's snapshot does not see the rows created above: no duplicates.
SELECT periodic.name, periodic.processed_until, periodic.last_tick, periodic.last_job_id,
       now() AS now
FROM {schema}.periodic AS periodic
JOIN input ON input.name = periodic.name;

-- name: advance_periodic :exec
-- Record schedules as handled up to processed_until, and their latest enqueued tick.
UPDATE {schema}.periodic AS periodic
-- Never backwards: a lagging beat process cannot undo a newer one's progress.
SET processed_until = greatest(periodic.processed_until, input.processed_until),
    last_job_id = CASE
        WHEN input.last_tick IS NOT NULL
             AND (periodic.last_tick IS NULL OR input.last_tick >= periodic.last_tick)
        THEN input.last_job_id
        ELSE periodic.last_job_id END,
    last_tick = greatest(periodic.last_tick, input.last_tick),
    updated_at = now()
FROM unnest(
    %(name)s::text[], %(processed_until)s::timestamptz[], %(last_tick)s::timestamptz[],
    %(last_job_id)s::bigint[]
) AS input(name, processed_until, last_tick, last_job_id)
WHERE periodic.name = input.name;

-- name: list_periodic :many
-- Every stored schedule state, including schedules no longer declared in code.
SELECT name, processed_until, last_tick, last_job_id, created_at, updated_at
FROM {schema}.periodic
ORDER BY name;

-- name: get_database_time :one
-- The database's clock, which beat and `pgtasks schedules` use as "now".
SELECT clock_timestamp() AS now;
