-- Debounced enqueues (migration debounce; docs/howto/flow-control.md, "Debounce").
-- Placeholders: {schema} (quoted identifier).

-- name: lock_debounce_key :exec
-- Serialise the enqueues of one task's debounce key to the end of the transaction: the
-- next one's lookup (a statement of its own, with a snapshot taken after this lock) sees
-- the job the previous one wrote or replaced.
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(lock_key)s));

-- name: debounce_job :one
-- The task's pending, never started job of this key gets the new arguments, its run_at
-- pushed to now + debounce (never past "until": first enqueue + debounce_max) and one
-- more "replaced"; with no such job, a new one runs at now + debounce. A claim that holds
-- the row meanwhile makes it running: FOR UPDATE waits for it, the row no longer
-- matches, and a new job is made (a started job is never touched).
WITH found AS (
    SELECT id
    FROM {schema}.jobs
    WHERE task_name = %(task_name)s
      AND meta -> 'pgtasks.debounce' ->> 'key' = %(debounce_key)s
      AND status = 'pending' AND attempts = 0 AND meta ? 'pgtasks.debounce'
    -- One such row per key (the lock serialises its writers). No ORDER BY: ordered by
    -- id, the planner may walk jobs_pkey over every job instead of this index.
    LIMIT 1
    FOR UPDATE
), replaced AS (
    UPDATE {schema}.jobs AS jobs
    SET args = %(args)s::jsonb,
        kwargs = %(kwargs)s::jsonb,
        run_at = least(
            now() + make_interval(secs => %(debounce)s::float8),
            CASE WHEN jsonb_typeof(jobs.meta -> 'pgtasks.debounce' -> 'until') = 'number'
                 THEN to_timestamp((jobs.meta -> 'pgtasks.debounce' ->> 'until')::float8)
                 ELSE 'infinity'::timestamptz END),
        meta = jsonb_set(
            jobs.meta, ARRAY['pgtasks.debounce', 'replaced'],
            to_jsonb(CASE WHEN jsonb_typeof(jobs.meta -> 'pgtasks.debounce' -> 'replaced') = 'number'
                          THEN (jobs.meta -> 'pgtasks.debounce' ->> 'replaced')::numeric
                          ELSE 0 END + 1)),
        updated_at = now()
    FROM found
    WHERE jobs.id = found.id AND jobs.status = 'pending' AND jobs.attempts = 0
    RETURNING jobs.id
), counted AS (
    INSERT INTO {schema}.counters (name, value)
    SELECT 'enqueues_debounced', count(*) FROM replaced HAVING count(*) > 0
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, meta)
    SELECT %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
           %(max_attempts)s,
           now() + make_interval(secs => %(debounce)s::float8),
           coalesce(%(meta)s::jsonb, jsonb_build_object()) || jsonb_build_object(
               'pgtasks.debounce', jsonb_build_object(
                   'key', %(debounce_key)s::text,
                   'first', extract(epoch FROM now()),
                   'until', extract(epoch FROM now()) + %(debounce_max)s::float8,
                   'replaced', 0))
    WHERE NOT EXISTS (SELECT FROM replaced)
    RETURNING jobs.id
)
SELECT id, true AS existed FROM replaced
UNION ALL
SELECT id, false AS existed FROM inserted;

-- name: debounce_stats :many
-- Pending debounced jobs per task (read through jobs_debounce_idx): how many, and how
-- many enqueues they absorbed in all and at most.
SELECT task_name, count(*) AS jobs,
       coalesce(sum(CASE WHEN jsonb_typeof(meta -> 'pgtasks.debounce' -> 'replaced') = 'number'
                         THEN (meta -> 'pgtasks.debounce' ->> 'replaced')::numeric END), 0)::bigint
           AS replaced,
       coalesce(max(CASE WHEN jsonb_typeof(meta -> 'pgtasks.debounce' -> 'replaced') = 'number'
                         THEN (meta -> 'pgtasks.debounce' ->> 'replaced')::numeric END), 0)::bigint
           AS most_replaced
FROM {schema}.jobs
WHERE status = 'pending' AND attempts = 0 AND meta ? 'pgtasks.debounce'
GROUP BY task_name
ORDER BY task_name;
