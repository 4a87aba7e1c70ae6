-- Enqueueing: one job, many jobs (INSERT of arrays, or COPY with ids reserved first),
-- new jobs only, a batch's jobs (_store/inserts.py). Headers, placeholders and
-- parameters as in queries.sql.

-- name: insert_jobs :many
-- Insert a batch of jobs in order; a job whose idempotency key exists returns that row.
-- Columns come as arrays, but args and kwargs as one JSON array each (the texts joined
-- by the client: cheaper to send than an array of texts); ROWS FROM zips them by position.
-- A key whose job finished (migration jobs_history: the job left jobs and its unique
-- index) answers from job_keys, where every key lives until its job is pruned.
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]), unnest(%(priority)s::int[]),
        jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb),
        unnest(%(max_attempts)s::int[]), unnest(%(run_at)s::timestamptz[]),
        unnest(%(delay)s::float8[]), unnest(%(idempotency_key)s::text[]),
        -- NULL when no job has meta: no elements, and ROWS FROM pads the column with NULL.
        jsonb_array_elements(%(meta)s::jsonb)
    ) WITH ORDINALITY AS t(task_name, queue, priority, args, kwargs, max_attempts,
                           run_at, delay, idempotency_key, meta, ord)
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
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key, meta)
    SELECT task_name, queue, priority, args, kwargs, max_attempts,
           -- Relative delays use the server's clock, never the caller's.
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           idempotency_key, coalesce(meta, jsonb_build_object())
    FROM input
    WHERE input.ord NOT IN (SELECT ord FROM known)
    ORDER BY ord
    -- The no-op update makes RETURNING yield the existing row (one round trip, no error
    -- to parse); xmax is non-zero only for a row that was updated rather than inserted.
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

-- name: insert_new_jobs :many
-- Insert a batch of jobs that carry no idempotency key (no conflict arbitration needed);
-- parameters as in insert_jobs.
INSERT INTO {schema}.jobs AS jobs
    (task_name, queue, priority, args, kwargs, max_attempts, run_at, meta)
SELECT task_name, queue, priority, args, kwargs, max_attempts,
       coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
       coalesce(meta, jsonb_build_object())
FROM ROWS FROM (
    unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]), unnest(%(priority)s::int[]),
    jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb),
    unnest(%(max_attempts)s::int[]), unnest(%(run_at)s::timestamptz[]),
    unnest(%(delay)s::float8[]), jsonb_array_elements(%(meta)s::jsonb)
) WITH ORDINALITY AS t(task_name, queue, priority, args, kwargs, max_attempts, run_at, delay,
                       meta, ord)
ORDER BY ord
RETURNING jobs.id, false AS existed;

-- name: insert_batch_jobs :many
-- Insert delay_many's jobs, alike in every field but their arguments: the shared fields
-- once, args and kwargs as one JSON array each (the client joins the texts; nothing per
-- job is adapted). Due at the database's now(); ids come back in order.
INSERT INTO {schema}.jobs AS jobs
    (task_name, queue, priority, args, kwargs, max_attempts, meta)
SELECT %(task_name)s, %(queue)s, %(priority)s, args, kwargs, %(max_attempts)s,
       coalesce(%(meta)s::jsonb, jsonb_build_object())
FROM ROWS FROM (
    jsonb_array_elements(%(args)s::jsonb), jsonb_array_elements(%(kwargs)s::jsonb)
) WITH ORDINALITY AS t(args, kwargs, ord)
ORDER BY ord
RETURNING jobs.id;

-- name: next_job_ids :many
-- %(count)s new ids of the jobs' identity sequence (increasing), for rows that copy_jobs
-- writes (COPY returns nothing); the sequence is looked up once, not once per id.
WITH sequence AS MATERIALIZED (
    SELECT pg_get_serial_sequence(%(jobs_table)s, 'id')::regclass AS id
)
SELECT nextval(sequence.id) AS id
FROM sequence, generate_series(1, %(count)s::int)
ORDER BY 1;

-- name: copy_jobs :exec
-- Plain jobs (no key, limits or time to run at) with their ids from next_job_ids, in
-- COPY's text format (params.copy_text): for a large batch the server parses and the
-- client builds far less than insert_new_jobs' arrays. Run at the database's now(); the
-- notify trigger wakes the workers at commit, as for every insert.
COPY {schema}.jobs (id, args, kwargs, meta, task_name, queue, priority, max_attempts)
FROM STDIN;

-- name: insert_job :one
-- Insert one job; when its idempotency key exists, return that job instead.
-- A key whose job finished (migration jobs_history: the job left jobs and its unique
-- index) answers from job_keys, where every key lives until its job is pruned.
WITH known AS (
    SELECT job_id FROM {schema}.job_keys WHERE idempotency_key = %(idempotency_key)s
), counted AS (
    INSERT INTO {schema}.counters (name, value)
    SELECT 'enqueues_deduplicated', count(*) FROM known HAVING count(*) > 0
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, idempotency_key, meta)
    SELECT
        %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
        %(max_attempts)s,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
        %(idempotency_key)s, coalesce(%(meta)s::jsonb, jsonb_build_object())
    WHERE NOT EXISTS (SELECT FROM known)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
    DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
    RETURNING jobs.id, (jobs.xmax::text <> '0') AS existed
)
SELECT id, existed FROM inserted
UNION ALL
SELECT job_id, true FROM known;

-- name: insert_and_notify_job :one
-- Insert one job without an idempotency key, as a transaction of its own (autocommit
-- only: see migration 0005). The statement wakes the workers of a due job itself, and
-- the transaction-local setting tells the notify trigger to skip it: pg_notify is cheaper
-- than the trigger's transition table. The notification is sent at commit, as ever.
-- Its relative deadline (meta "pgtasks.expires_in") is made absolute here too, and the
-- second setting tells the deadlines trigger to skip it (migration lighter_inserts).
WITH self_notified AS (
    SELECT set_config('pgtasks.self_notified', 'on', true),
           set_config('pgtasks.deadlines_stamped', 'on', true)
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, meta)
    -- Selecting from self_notified sets the flag before the row (and the trigger's check).
    SELECT %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
           %(max_attempts)s,
           coalesce(%(run_at)s::timestamptz,
                    now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
           CASE WHEN %(meta)s::jsonb ? 'pgtasks.expires_in'
                THEN {schema}.with_absolute_deadline(%(meta)s::jsonb)
                ELSE coalesce(%(meta)s::jsonb, jsonb_build_object()) END
    FROM self_notified
    RETURNING jobs.id, jobs.queue, jobs.run_at <= now() AS due
)
-- What the trigger sends: the queue name, for a job that is due now; nothing when the
-- store's enqueues do not notify (notify="off": idle workers poll), nor, with a gate
-- (notify="auto": its spacing in seconds), when a transaction notified the queue within
-- it (migration shared_notify_gate). CASE keeps the order: the gate is asked last.
SELECT id,
       CASE WHEN NOT (due AND %(notify)s) THEN NULL
            WHEN %(gate)s::float8 IS NULL
                 OR {schema}.notify_gate_open(queue, %(gate)s::float8)
            THEN pg_notify({channel}, queue)::text END AS notified
FROM inserted;

-- name: insert_new_job :one
-- Insert one job without an idempotency key inside a longer transaction (no conflict
-- arbitration; the notify trigger wakes the workers at commit).
INSERT INTO {schema}.jobs AS jobs
    (task_name, queue, priority, args, kwargs, max_attempts, run_at, meta)
VALUES (
    %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
    %(max_attempts)s,
    coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
    coalesce(%(meta)s::jsonb, jsonb_build_object())
)
RETURNING jobs.id;
