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
-- The paused queues (what each worker leaves out of its claims); for a worker of host
-- %(hostname)s (NULL: not a worker), also a row of queue '' when its host is paused
-- (pause_host): no queue has an empty name, and the worker claims nothing then.
SELECT queue, paused_at FROM {schema}.queue_pauses WHERE left(queue, 1) <> chr(31)
UNION ALL
SELECT '', paused_at FROM {schema}.queue_pauses
WHERE queue = chr(31) || 'host:' || %(hostname)s::text
ORDER BY queue;

-- name: pause_host :one
-- Pause every worker of a host (none claims; running jobs finish): a row of queue_pauses
-- named chr(31) || 'host:' || the host (no queue name holds a control character);
-- paused is false when it was paused already.
WITH paused AS (
    INSERT INTO {schema}.queue_pauses (queue) VALUES (chr(31) || 'host:' || %(hostname)s)
    ON CONFLICT (queue) DO NOTHING
    RETURNING queue
)
SELECT count(*) > 0 AS paused FROM paused;

-- name: resume_host :one
-- Resume the workers of a paused host; resumed is false when it was not paused.
WITH resumed AS (
    DELETE FROM {schema}.queue_pauses WHERE queue = chr(31) || 'host:' || %(hostname)s
    RETURNING queue
)
SELECT count(*) > 0 AS resumed FROM resumed;

-- name: get_paused_hosts :many
-- The hosts whose workers are paused (pause_host).
SELECT substr(queue, 7) AS hostname, paused_at FROM {schema}.queue_pauses
WHERE left(queue, 6) = chr(31) || 'host:'
ORDER BY 1;
