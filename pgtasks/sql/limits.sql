-- Concurrency and rate limits (migration 0009): limited inserts, the limited claim, the
-- definitions and what `pgtasks limits` shows. Headers, placeholders and parameters as in
-- queries.sql. Jobs no limit applies to never run these statements.

-- name: insert_limited_job :one
-- Insert one job that limits apply to (limit_groups, limit_key); an existing idempotency
-- key returns that job (the notify trigger wakes the workers at commit).
-- A key whose job finished (migration jobs_history: the job left jobs and its unique
-- index) answers from job_keys, where every key lives until its job is pruned.
WITH known AS (
    SELECT job_id FROM {schema}.job_keys WHERE idempotency_key = %(idempotency_key)s
), counted AS (
    INSERT INTO {schema}.counters (name, value)
    SELECT 'enqueues_deduplicated', count(*) FROM known HAVING count(*) > 0
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key, meta,
         limit_groups, limit_key)
    SELECT
        %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
        %(max_attempts)s,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
        %(idempotency_key)s, coalesce(%(meta)s::jsonb, jsonb_build_object()),
        %(limit_groups)s::text[], %(limit_key)s
    WHERE NOT EXISTS (SELECT FROM known)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
    DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
    RETURNING jobs.id, (jobs.xmax::text <> '0') AS existed
)
SELECT id, existed FROM inserted
UNION ALL
SELECT job_id, true FROM known;

-- name: insert_limited_jobs :many
-- Insert a batch of jobs some of which limits apply to, in order; as insert_jobs, plus
-- limit_groups (a JSON array with an array of names or null per job) and limit_key.
-- A key whose job finished (migration jobs_history: the job left jobs and its unique
-- index) answers from job_keys, where every key lives until its job is pruned.
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]), unnest(%(priority)s::int[]),
        jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb),
        unnest(%(max_attempts)s::int[]), unnest(%(run_at)s::timestamptz[]),
        unnest(%(delay)s::float8[]), unnest(%(idempotency_key)s::text[]),
        jsonb_array_elements(%(limit_groups)s::jsonb), unnest(%(limit_key)s::text[]),
        -- NULL when no job has meta: no elements, and ROWS FROM pads the column with NULL.
        jsonb_array_elements(%(meta)s::jsonb)
    ) WITH ORDINALITY AS t(task_name, queue, priority, args, kwargs, max_attempts,
                           run_at, delay, idempotency_key, limit_groups, limit_key, meta, ord)
), known AS MATERIALIZED (
    SELECT input.ord, keys.job_id
    FROM input
    JOIN {schema}.job_keys AS keys ON keys.idempotency_key = input.idempotency_key
), counted AS (
    -- Counted as the ON CONFLICT answers are (migration 0014).
    INSERT INTO {schema}.counters (name, value)
    SELECT 'enqueues_deduplicated', count(*) FROM known HAVING count(*) > 0
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key, meta,
         limit_groups, limit_key)
    SELECT task_name, queue, priority, args, kwargs, max_attempts,
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           idempotency_key, coalesce(meta, jsonb_build_object()),
           CASE WHEN jsonb_typeof(limit_groups) = 'array'
                THEN ARRAY(SELECT jsonb_array_elements_text(limit_groups)) END,
           limit_key
    FROM input
    WHERE input.ord NOT IN (SELECT ord FROM known)
    ORDER BY ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
    DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
    RETURNING jobs.id, (jobs.xmax::text <> '0') AS existed
), numbered AS (
    SELECT row_number() OVER () AS n, id, existed FROM inserted
), fresh AS (
    SELECT row_number() OVER (ORDER BY ord) AS n, ord
    FROM input WHERE input.ord NOT IN (SELECT ord FROM known)
)
SELECT coalesce(known.job_id, numbered.id) AS id,
       coalesce(known.job_id IS NOT NULL OR numbered.existed, false) AS existed
FROM input
LEFT JOIN known USING (ord)
LEFT JOIN fresh USING (ord)
LEFT JOIN numbered USING (n)
ORDER BY input.ord;

-- name: claim_limited_jobs :many
-- Claim up to %(limit)s due jobs that limits apply to, never past a limit (see the
-- function in migration 0009); filters as in claim_jobs.
SELECT id, task_name, queue, priority, args, kwargs, attempts, max_attempts, meta,
       greatest(run_at, '0002-01-01 00:00:00+00') AS run_at,
       least(greatest(created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
           AS created_at,
       clock_timestamp() AS claimed_at,
       true AS limited
FROM {schema}.claim_limited_jobs(
    %(worker_id)s, %(queues)s::text[], %(excluded_queues)s::text[], %(task_names)s::text[],
    %(limit)s
);

-- name: upsert_limits :one
-- Store the limit definitions of a worker's app (a changed definition replaces the stored
-- one; rate tokens are kept, capped at the new burst). Returns how many are stored in all.
WITH input AS (
    SELECT *
    FROM unnest(%(name)s::text[], %(concurrency)s::int[], %(rate_count)s::int[],
                %(rate_period)s::float8[], %(burst)s::float8[])
         AS t(name, concurrency, rate_count, rate_period, burst)
), upserted AS (
    INSERT INTO {schema}.limits AS limits
        (name, concurrency, rate_count, rate_period, burst, tokens)
    SELECT name, concurrency, rate_count, rate_period, burst, burst FROM input
    ON CONFLICT (name) DO UPDATE
    SET concurrency = EXCLUDED.concurrency,
        rate_count = EXCLUDED.rate_count,
        rate_period = EXCLUDED.rate_period,
        burst = EXCLUDED.burst,
        tokens = least(limits.tokens, EXCLUDED.burst),
        updated_at = now()
    WHERE (limits.concurrency, limits.rate_count, limits.rate_period, limits.burst)
          IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_count, EXCLUDED.rate_period,
                            EXCLUDED.burst)
    RETURNING limits.name
)
SELECT (SELECT count(*) FROM {schema}.limits)
       + (SELECT count(*) FROM input WHERE name NOT IN (SELECT name FROM {schema}.limits))
       AS stored;

-- name: get_limits :many
-- Every stored limit definition with its tokens now.
SELECT name, concurrency, rate_count, rate_period, burst,
       CASE WHEN rate_count IS NOT NULL THEN
           least(burst, tokens + greatest(0, extract(epoch FROM clock_timestamp() - refilled_at))
                 * rate_count / rate_period)
       END AS tokens,
       updated_at
FROM {schema}.limits
ORDER BY name;

-- name: get_limit_usage :many
-- Running and pending jobs per limit instance (a 'key:' name with its key), read without
-- SKIP LOCKED.
SELECT split_part(inst, chr(31), 1) AS name,
       CASE WHEN strpos(inst, chr(31)) > 0 THEN substr(inst, strpos(inst, chr(31)) + 1) END
           AS key,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'pending') AS pending
FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
WHERE jobs.status IN ('pending', 'running') AND jobs.limit_groups IS NOT NULL
  AND inst IS NOT NULL
GROUP BY inst
ORDER BY inst
LIMIT %(limit)s;
