-- Paused queues (migration 0007): `pgtasks queues pause|resume|list`, app.pause_queue().
-- Headers, placeholders and parameters as in queries.sql.

-- name: pause_queue :one
-- Pause a queue (no worker claims its jobs); paused is false when it was paused already.
WITH paused AS (
    INSERT INTO {schema}.queue_pauses (queue) VALUES (%(queue)s)
    ON CONFLICT (queue) DO NOTHING
    RETURNING queue
)
SELECT count(*) > 0 AS paused FROM paused;

-- name: resume_queue :one
-- Resume a paused queue and wake its workers; resumed is false when it was not paused.
WITH resumed AS (
    DELETE FROM {schema}.queue_pauses WHERE queue = %(queue)s
    RETURNING queue
)
-- The enqueue channel carries the queue name: a worker of the queue claims at once.
SELECT count(*) > 0 AS resumed, max(pg_notify({channel}, queue)::text) IS NULL AS notified
FROM resumed;

-- name: get_paused_queues :many
-- The paused queues (what each worker leaves out of its claims).
SELECT queue, paused_at FROM {schema}.queue_pauses ORDER BY queue;
