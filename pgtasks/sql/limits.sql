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

-- name: upsert_limits :one
-- Store the limit definitions of a worker's app (a changed definition replaces the stored
-- one; rate tokens are kept, capped at the new burst). A limit an operator changed
-- (migration runtime_controls: overridden_at set) keeps what applies: only what the app
-- declares is recorded, for `pgtasks limits reset`. Returns how many are stored in all.
WITH input AS (
    SELECT *
    FROM unnest(%(name)s::text[], %(concurrency)s::int[], %(rate_count)s::int[],
                %(rate_period)s::float8[], %(burst)s::float8[])
         AS t(name, concurrency, rate_count, rate_period, burst)
), upserted AS (
    INSERT INTO {schema}.limits AS limits
        (name, concurrency, rate_count, rate_period, burst, tokens, declared,
         declared_concurrency, declared_rate_count, declared_rate_period, declared_burst)
    SELECT name, concurrency, rate_count, rate_period, burst, burst, true,
           concurrency, rate_count, rate_period, burst
    FROM input
    ON CONFLICT (name) DO UPDATE
    SET concurrency = CASE WHEN limits.overridden_at IS NULL THEN EXCLUDED.concurrency
                           ELSE limits.concurrency END,
        rate_count = CASE WHEN limits.overridden_at IS NULL THEN EXCLUDED.rate_count
                          ELSE limits.rate_count END,
        rate_period = CASE WHEN limits.overridden_at IS NULL THEN EXCLUDED.rate_period
                           ELSE limits.rate_period END,
        burst = CASE WHEN limits.overridden_at IS NULL THEN EXCLUDED.burst
                     ELSE limits.burst END,
        tokens = CASE WHEN limits.overridden_at IS NULL
                      THEN least(limits.tokens, EXCLUDED.burst) ELSE limits.tokens END,
        declared = true,
        declared_concurrency = EXCLUDED.concurrency,
        declared_rate_count = EXCLUDED.rate_count,
        declared_rate_period = EXCLUDED.rate_period,
        declared_burst = EXCLUDED.burst,
        updated_at = CASE WHEN limits.overridden_at IS NULL THEN now()
                          ELSE limits.updated_at END
    WHERE (limits.declared, limits.declared_concurrency, limits.declared_rate_count,
           limits.declared_rate_period, limits.declared_burst)
          IS DISTINCT FROM (true, EXCLUDED.concurrency, EXCLUDED.rate_count,
                            EXCLUDED.rate_period, EXCLUDED.burst)
       OR (limits.overridden_at IS NULL
           AND (limits.concurrency, limits.rate_count, limits.rate_period, limits.burst)
               IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_count,
                                 EXCLUDED.rate_period, EXCLUDED.burst))
    RETURNING limits.name
)
SELECT (SELECT count(*) FROM {schema}.limits)
       + (SELECT count(*) FROM input WHERE name NOT IN (SELECT name FROM {schema}.limits))
       AS stored;

-- name: get_limits :many
-- Every stored limit definition with its tokens now and the seconds until its next whole
-- token (values clamped as the claim clamps them: a row written by hand reads, never raises).
WITH clamped AS (
    SELECT name, concurrency, rate_count, rate_period,
           CASE WHEN rate_count > 0 AND rate_period > 0 THEN
               least(greatest(rate_count::double precision / rate_period, 1e-9), 1e9)
           END AS per_sec,
           least(greatest(burst, 1), 1e9) AS burst,
           least(greatest(tokens, 0), 1e9) AS tokens,
           CASE WHEN isfinite(refilled_at)
                THEN greatest(0, least(1e9, extract(epoch FROM clock_timestamp() - refilled_at)))
                ELSE 1e9 END AS elapsed,
           CASE WHEN isfinite(updated_at) THEN updated_at END AS updated_at,
           declared, declared_concurrency, declared_rate_count, declared_rate_period,
           overridden_by, overridden_at, paused
    FROM {schema}.limits
), state AS (
    SELECT *, CASE WHEN per_sec IS NOT NULL
                   THEN least(burst, tokens + elapsed * per_sec) END AS tokens_now
    FROM clamped
)
SELECT name, concurrency, rate_count, rate_period,
       CASE WHEN per_sec IS NOT NULL THEN burst END AS burst,
       tokens_now AS tokens,
       CASE WHEN tokens_now IS NOT NULL
            THEN greatest(0, 1 - tokens_now) / per_sec END AS next_token_in,
       updated_at, declared, declared_concurrency, declared_rate_count,
       declared_rate_period, overridden_by, overridden_at, paused
FROM state
ORDER BY name;

-- name: get_limit_usage :many
-- Per stored or referenced limit (per-key limits summed over their keys): the running,
-- pending and due jobs under it, the due ones it holds back now (no room, or no whole
-- token), and how many keys have jobs. Read without SKIP LOCKED. A pending job under
-- more than 8 instances is left out (no claim takes it; `pgtasks doctor` names it):
-- counted, a row written by hand with 100,000 instances would be 100,000 jobs.
WITH instances AS (
    SELECT inst,
           count(*) FILTER (WHERE jobs.status = 'running') AS running,
           count(*) FILTER (WHERE jobs.status = 'pending') AS pending,
           count(*) FILTER (WHERE jobs.status = 'pending' AND jobs.run_at <= now()) AS due
    FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
    WHERE jobs.status IN ('pending', 'running') AND jobs.limit_groups IS NOT NULL
      AND (jobs.status = 'running' OR cardinality(jobs.limit_groups) <= 8)
      AND inst IS NOT NULL
    GROUP BY inst
), held AS (
    SELECT split_part(i.inst, chr(31), 1) AS name,
           strpos(i.inst, chr(31)) > 0 AS keyed,
           i.running, i.pending, i.due,
           -- Room: free slots (none stored: no limit on them; greatest() would read a
           -- NULL concurrency as 0), and whole tokens.
           greatest(0, i.due - least(
               CASE WHEN d.concurrency IS NOT NULL
                    THEN greatest(0, d.concurrency - i.running) ELSE i.due END,
               CASE WHEN d.rate_count > 0 AND d.rate_period > 0 AND d.name = i.inst
                    THEN floor(least(greatest(d.burst, 1), 1e9, least(greatest(d.tokens, 0), 1e9)
                         + CASE WHEN isfinite(d.refilled_at)
                                THEN greatest(0, least(1e9, extract(epoch FROM
                                     clock_timestamp() - d.refilled_at)))
                                ELSE 1e9 END
                           * least(greatest(d.rate_count::double precision / d.rate_period,
                                            1e-9), 1e9)))::bigint
                    ELSE i.due END)) AS held
    FROM instances AS i
    LEFT JOIN {schema}.limits AS d ON d.name = split_part(i.inst, chr(31), 1)
)
SELECT name, sum(running)::bigint AS running, sum(pending)::bigint AS pending,
       sum(due)::bigint AS due, sum(held)::bigint AS held,
       count(*) FILTER (WHERE keyed) AS keys
FROM held
GROUP BY name
ORDER BY name;

-- name: get_limit_top_keys :many
-- The keys of per-key limits with the most running, then pending, jobs: at most
-- %(per_limit)s per limit, with their due jobs and the due ones held back (pending jobs
-- under more than 8 instances left out, as in get_limit_usage).
WITH instances AS (
    SELECT inst,
           count(*) FILTER (WHERE jobs.status = 'running') AS running,
           count(*) FILTER (WHERE jobs.status = 'pending') AS pending,
           count(*) FILTER (WHERE jobs.status = 'pending' AND jobs.run_at <= now()) AS due
    FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
    WHERE jobs.status IN ('pending', 'running') AND jobs.limit_groups IS NOT NULL
      AND (jobs.status = 'running' OR cardinality(jobs.limit_groups) <= 8)
      AND strpos(inst, chr(31)) > 0
    GROUP BY inst
), ranked AS (
    SELECT split_part(i.inst, chr(31), 1) AS name,
           substr(i.inst, strpos(i.inst, chr(31)) + 1) AS key,
           i.running, i.pending, i.due,
           greatest(0, i.due - CASE WHEN d.concurrency IS NOT NULL
                                    THEN greatest(0, d.concurrency - i.running)
                                    ELSE i.due END) AS held,
           row_number() OVER (PARTITION BY split_part(i.inst, chr(31), 1)
                              ORDER BY i.running DESC, i.pending DESC, i.inst) AS rank
    FROM instances AS i
    LEFT JOIN {schema}.limits AS d ON d.name = split_part(i.inst, chr(31), 1)
)
SELECT name, key, running, pending, due, held
FROM ranked
WHERE rank <= %(per_limit)s
ORDER BY name, rank;

-- name: get_limit_bad_values :one
-- The stored limits whose values break the table's checks (written by hand past them;
-- the claim and get_limits clamp them), by name: what a limits page marks.
SELECT coalesce(array_agg(name ORDER BY name), ARRAY[]::text[]) AS names
FROM {schema}.limits
WHERE NOT coalesce(concurrency >= 0, true)
   OR NOT coalesce(rate_count >= 1, true)
   OR NOT (rate_period IS NULL OR (rate_period >= 0.001 AND rate_period <= 1e10))
   OR NOT (burst >= 1 AND burst <= 1e9)
   OR NOT (tokens >= 0 AND tokens <= 1e9)
   OR NOT isfinite(refilled_at) OR NOT isfinite(updated_at)
   OR refilled_at > now() + interval '1 minute';
