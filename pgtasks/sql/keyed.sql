-- Fair queuing and sequences (migration 0023): the rescuer's pass over sequences, the
-- release of a held one, and what `pgtasks limits`, `pgtasks stats`, the metrics, doctor
-- and the dashboard show of them. Headers, placeholders and parameters as in queries.sql.

-- name: sequence_sweep :one
-- Move on every sequence whose turn a contended lock missed (the rescuer's pass): one
-- index entry read per key, never a backlog.
SELECT {schema}.sequence_sweep() AS moved;

-- name: release_sequence_hold :one
-- Forget the failed job holding sequence %(key)s (its next job may start).
WITH released AS (
    DELETE FROM {schema}.sequence_holds WHERE sequence_key = %(key)s RETURNING job_id
)
SELECT (SELECT job_id FROM released) AS job_id;

-- name: advance_sequence :one
-- Start the next waiting job of sequence %(key)s when nothing runs or holds it.
SELECT {schema}.sequence_advance(%(key)s) AS started;

-- name: get_sequences :many
-- The sequences with unfinished jobs or a hold, longest first (at most %(limit)s): the
-- head (the pending or running job), how many jobs wait behind it, and the failed job
-- that holds it. An operator's read: it counts the sequences' unfinished jobs.
WITH live AS (
    SELECT {schema}.sequence_key(j.meta) AS key,
           count(*) FILTER (WHERE j.status = 'waiting') AS waiting,
           min(j.id) FILTER (WHERE j.status IN ('pending', 'running')) AS head_id,
           min(j.status) FILTER (WHERE j.status IN ('pending', 'running')) AS head_status,
           min(j.task_name) AS task_name
    FROM {schema}.jobs AS j
    WHERE j.meta ? 'pgtasks.sequence' AND j.status IN ('waiting', 'pending', 'running')
    GROUP BY 1
)
SELECT coalesce(live.key, holds.sequence_key) AS key,
       coalesce(live.waiting, 0) AS waiting,
       live.head_id, live.head_status, live.task_name,
       holds.job_id AS held_by, holds.held_at
FROM live
FULL JOIN {schema}.sequence_holds AS holds ON holds.sequence_key = live.key
WHERE coalesce(live.key, holds.sequence_key) IS NOT NULL
ORDER BY holds.job_id IS NULL, coalesce(live.waiting, 0) DESC, 1
LIMIT %(limit)s;

-- name: get_sequence_holds :many
-- The sequences held by a failed job (doctor's check): key, job, since when.
SELECT sequence_key AS key, job_id, held_at FROM {schema}.sequence_holds
ORDER BY held_at LIMIT %(limit)s;

-- name: get_fair_keys :many
-- Fair keys with pending or running jobs (an operator's read): the busiest (most pending)
-- and the starved (due the longest without a start), at most %(limit)s of each; kind
-- says which list a row belongs to.
WITH keys AS (
    SELECT j.meta ->> 'pgtasks.fair_key' AS key,
           count(*) FILTER (WHERE j.status = 'pending') AS pending,
           count(*) FILTER (WHERE j.status = 'running') AS running,
           min(j.run_at) FILTER (WHERE j.status = 'pending' AND j.run_at <= now()) AS oldest_due
    FROM {schema}.jobs AS j
    WHERE j.meta ? 'pgtasks.fair_key' AND j.status IN ('pending', 'running')
    GROUP BY 1
)
(SELECT 'busiest' AS kind, key, pending, running,
        extract(epoch FROM now() - oldest_due)::float8 AS waited
 FROM keys ORDER BY pending DESC, key LIMIT %(limit)s)
UNION ALL
(SELECT 'starved' AS kind, key, pending, running,
        extract(epoch FROM now() - oldest_due)::float8 AS waited
 FROM keys WHERE oldest_due IS NOT NULL ORDER BY oldest_due, key LIMIT %(limit)s);

-- name: count_keyed :one
-- How many fair keys have pending or running jobs, how many sequences have unfinished
-- jobs, how many sequence jobs wait for their turn, and how many sequences a failed job
-- holds (`pgtasks stats`, the metrics); through the indexes of migration 0023.
SELECT (SELECT count(DISTINCT j.meta ->> 'pgtasks.fair_key') FROM {schema}.jobs AS j
        WHERE j.meta ? 'pgtasks.fair_key' AND j.status IN ('pending', 'running'))
           AS fair_keys,
       (SELECT count(DISTINCT {schema}.sequence_key(j.meta)) FROM {schema}.jobs AS j
        WHERE j.meta ? 'pgtasks.sequence' AND j.status IN ('waiting', 'pending', 'running'))
           AS sequences,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.meta ? 'pgtasks.sequence' AND j.status = 'waiting') AS sequence_jobs_waiting,
       (SELECT count(*) FROM {schema}.sequence_holds) AS sequences_held;
