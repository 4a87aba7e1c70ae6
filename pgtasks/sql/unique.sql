-- Enqueues of jobs with a uniqueness scope (migration 0010; docs/howto/flow-control.md,
-- "Uniqueness"). Headers, placeholders and parameters as in queries.sql; the columns
-- are those of insert_jobs plus the scope's. Each statement arbitrates on one partial
-- unique index, whose predicate its ON CONFLICT clause repeats exactly; a batch holds
-- each scoped key once (the client sends duplicates once).

-- name: insert_active_jobs :many
-- Insert jobs unique while active: a key held by a pending or running job returns that job.
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]), unnest(%(priority)s::int[]),
        jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb),
        unnest(%(max_attempts)s::int[]), unnest(%(run_at)s::timestamptz[]),
        unnest(%(delay)s::float8[]), unnest(%(idempotency_key)s::text[]),
        unnest(%(unique_key)s::text[]),
        -- NULL when no job has meta (or limits): no elements, and ROWS FROM pads the
        -- column with NULL.
        jsonb_array_elements(%(meta)s::jsonb),
        jsonb_array_elements(%(limit_groups)s::jsonb), unnest(%(limit_key)s::text[])
    ) WITH ORDINALITY AS t(task_name, queue, priority, args, kwargs, max_attempts,
                           run_at, delay, idempotency_key, unique_key, meta,
                           limit_groups, limit_key, ord)
)
INSERT INTO {schema}.jobs AS jobs
    (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key,
     unique_key, meta, limit_groups, limit_key)
SELECT task_name, queue, priority, args, kwargs, max_attempts,
       coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
       idempotency_key, unique_key, coalesce(meta, jsonb_build_object()),
       -- Concurrency and rate limits (migration 0009), as insert_limited_jobs writes them.
       CASE WHEN jsonb_typeof(limit_groups) = 'array'
            THEN ARRAY(SELECT jsonb_array_elements_text(limit_groups)) END,
       limit_key
FROM input
ORDER BY ord
-- A holder that finishes while this statement waits for it leaves the index: the
-- insert is then retried by the server and succeeds (the key is free).
ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL AND unique_window IS NULL AND status IN ('pending', 'running')
    DO UPDATE SET unique_key = EXCLUDED.unique_key
RETURNING jobs.id, (jobs.xmax::text <> '0') AS existed;

-- name: insert_period_jobs :many
-- Insert jobs unique for a period: a key enqueued in the same window returns that job.
-- The window is [date_bin(period, now(), epoch), + period): fixed windows of the
-- database's clock (the transaction's start), aligned to 1970-01-01 00:00 UTC. A window
-- whose job finished (migration jobs_history) answers from job_keys.
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]), unnest(%(priority)s::int[]),
        jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb),
        unnest(%(max_attempts)s::int[]), unnest(%(run_at)s::timestamptz[]),
        unnest(%(delay)s::float8[]), unnest(%(idempotency_key)s::text[]),
        unnest(%(unique_key)s::text[]), unnest(%(unique_for)s::interval[]),
        jsonb_array_elements(%(meta)s::jsonb),
        jsonb_array_elements(%(limit_groups)s::jsonb), unnest(%(limit_key)s::text[])
    ) WITH ORDINALITY AS t(task_name, queue, priority, args, kwargs, max_attempts,
                           run_at, delay, idempotency_key, unique_key, unique_for, meta,
                           limit_groups, limit_key, ord)
), windowed AS (
    SELECT input.*, date_bin(unique_for, now(), timestamptz 'epoch') AS window_start
    FROM input
), known AS MATERIALIZED (
    SELECT windowed.ord, keys.job_id
    FROM windowed
    JOIN {schema}.job_keys AS keys
      ON keys.unique_key = windowed.unique_key
     AND keys.unique_window = tstzrange(windowed.window_start,
                                        windowed.window_start + windowed.unique_for)
), counted AS (
    INSERT INTO {schema}.counters (name, value)
    SELECT 'enqueues_deduplicated', count(*) FROM known HAVING count(*) > 0
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key,
         unique_key, unique_window, meta, limit_groups, limit_key)
    SELECT task_name, queue, priority, args, kwargs, max_attempts,
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           idempotency_key, unique_key,
           tstzrange(window_start, window_start + unique_for),
           coalesce(meta, jsonb_build_object()),
           CASE WHEN jsonb_typeof(limit_groups) = 'array'
                THEN ARRAY(SELECT jsonb_array_elements_text(limit_groups)) END,
           limit_key
    FROM windowed
    WHERE windowed.ord NOT IN (SELECT ord FROM known)
    ORDER BY ord
    ON CONFLICT (unique_key, unique_window) WHERE unique_window IS NOT NULL
        DO UPDATE SET unique_key = EXCLUDED.unique_key
    RETURNING jobs.id, (jobs.xmax::text <> '0') AS existed
), numbered AS (
    SELECT row_number() OVER () AS n, id, existed FROM inserted
), fresh AS (
    SELECT row_number() OVER (ORDER BY ord) AS n, ord
    FROM windowed WHERE windowed.ord NOT IN (SELECT ord FROM known)
)
SELECT coalesce(known.job_id, numbered.id) AS id,
       coalesce(known.job_id IS NOT NULL OR numbered.existed, false) AS existed
FROM windowed
LEFT JOIN known USING (ord)
LEFT JOIN fresh USING (ord)
LEFT JOIN numbered USING (n)
ORDER BY windowed.ord;

-- name: get_active_key_holder :one
-- The pending or running job that holds the key of job %(id)s, unique while active.
SELECT holder.id, holder.status, holder.unique_key
FROM {schema}.all_jobs AS job
JOIN {schema}.jobs AS holder
  ON holder.unique_key = job.unique_key
 AND holder.unique_window IS NULL
 AND holder.status IN ('pending', 'running')
 AND holder.id <> job.id
WHERE job.id = %(id)s::bigint AND job.unique_window IS NULL;
