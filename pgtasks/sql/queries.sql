-- Every statement pgtasks runs at run time. Each starts with a header
--   -- name: <name> :<one|many|exec|execrows>
-- and a one-line description. Placeholders: {schema} (identifier), {channel} (literal).
-- Parameters are named (%(name)s); time comes from the server (now()).

-- name: create_migrations_table :exec
-- Create the schema, the migration version table and the table of the steps done of an
-- unfinished migration, if they are missing.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.migration_steps (
    version    integer     NOT NULL,
    step       integer     NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (version, step)
);

-- name: lock_migrations :exec
-- Serialise migrators of one schema until the end of the transaction.
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(schema)s));

-- name: get_applied_migrations :many
-- Versions applied so far.
SELECT version FROM {schema}.migrations ORDER BY version;

-- name: record_migration :exec
-- Record a version, in the transaction of its last step (or of the whole migration).
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: begin_read_committed_block :exec
-- A transaction block READ COMMITTED whatever the server's default: a worker's round trip
-- through a transaction pooler begins with it and ends with commit_block, in one pipeline
-- (Database.pin_isolation).
BEGIN ISOLATION LEVEL READ COMMITTED;

-- name: commit_block :exec
-- Ends the transaction block begin_read_committed_block began.
COMMIT;

-- name: get_schema_version :one
-- The highest applied migration version.
SELECT coalesce(max(version), 0) AS version FROM {schema}.migrations;

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
WITH self_notified AS (
    SELECT set_config('pgtasks.self_notified', 'on', true)
), inserted AS (
    INSERT INTO {schema}.jobs AS jobs
        (task_name, queue, priority, args, kwargs, max_attempts, run_at, meta)
    -- Selecting from self_notified sets the flag before the row (and the trigger's check).
    SELECT %(task_name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
           %(max_attempts)s,
           coalesce(%(run_at)s::timestamptz,
                    now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
           coalesce(%(meta)s::jsonb, jsonb_build_object())
    FROM self_notified
    RETURNING jobs.id, jobs.queue, jobs.run_at <= now() AS due
)
-- What the trigger sends: the queue name, for a job that is due now; nothing when the
-- store's enqueues do not notify (notify_enqueues=False: idle workers poll).
SELECT id, CASE WHEN due AND %(notify)s THEN pg_notify({channel}, queue)::text END AS notified
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

-- name: get_job :one
-- One job by id.
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, meta, started_at, attempt_errors,
       -- A uniqueness scope's key and window (migration 0010), the window as its bounds.
       unique_key, lower(unique_window) AS unique_window_start,
       upper(unique_window) AS unique_window_end
-- Finished jobs are in jobs_history (migration jobs_history): both, by their id indexes.
FROM {schema}.all_jobs
WHERE id = %(id)s;

-- name: get_jobs :many
-- Jobs by id (missing ids are absent from the result).
SELECT id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
       run_at, locked_at, locked_by, last_error, result, idempotency_key,
       created_at, updated_at, finished_at, meta, started_at, attempt_errors,
       unique_key, lower(unique_window) AS unique_window_start,
       upper(unique_window) AS unique_window_end
FROM {schema}.all_jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id;

-- name: update_job_meta :one
-- Merge a patch into a running job's meta, fenced by its lease; no row: the lease is lost.
-- The dashboard hears of it (payload: the job id).
WITH updated AS (
UPDATE {schema}.jobs AS jobs
-- A progress report's updated_at is the server's clock, as every time pgtasks stores.
SET meta = jobs.meta || CASE
        WHEN %(patch)s::jsonb -> 'pgtasks.progress' IS NOT NULL
        THEN jsonb_set(%(patch)s::jsonb, ARRAY['pgtasks.progress', 'updated_at'], to_jsonb(now()))
        ELSE %(patch)s::jsonb END,
    updated_at = now()
WHERE jobs.id = %(id)s
  AND jobs.status = 'running'
  AND jobs.locked_by = %(worker_id)s
  AND jobs.attempts = %(attempt)s
RETURNING jobs.id
)
SELECT id, pg_notify({activity_channel}, id::text) IS NULL AS notified FROM updated;

-- name: get_job_id_by_key :one
-- The job an idempotency key names: unfinished in jobs, finished in job_keys.
SELECT id FROM {schema}.jobs WHERE idempotency_key = %(key)s
UNION ALL
SELECT job_id AS id FROM {schema}.job_keys WHERE idempotency_key = %(key)s
LIMIT 1;

-- name: get_job_status :one
-- The status of one job by id.
SELECT status FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: register_worker :one
-- Register a worker; its id is the lease owner written to the jobs it claims. task_names:
-- the tasks it knows and claims (migration flow_control; NULL: any).
INSERT INTO {schema}.workers (hostname, pid, queues, concurrency, task_names)
VALUES (%(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(task_names)s::text[])
RETURNING id;

-- name: heartbeat_worker :one
-- Refresh a worker's heartbeat; no row means the registration was removed as dead.
UPDATE {schema}.workers SET heartbeat_at = now() WHERE id = %(worker_id)s RETURNING id;

-- name: deregister_worker :exec
-- Remove a worker's registration at shutdown.
DELETE FROM {schema}.workers WHERE id = %(worker_id)s;

-- name: claim_jobs :many
-- Claim up to %(limit)s due jobs of the given queues (NULL: all queues) for one worker,
-- leaving out %(excluded_queues)s (paused queues, for a worker of all queues).
WITH RECURSIVE levels AS (
    -- The priorities of pending jobs, one index descent each from a level's end (not its
    -- head of claimed entries). Each level is read with its priority fixed: "run_at <=
    -- now()" ends its scan, so jobs due later are never read (before PG 18 they were).
    (SELECT priority FROM {schema}.jobs WHERE status = 'pending' ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT jobs.priority FROM {schema}.jobs AS jobs
            WHERE jobs.status = 'pending' AND jobs.priority > levels.priority
            ORDER BY jobs.priority LIMIT 1)
    FROM levels WHERE levels.priority IS NOT NULL
), picked AS MATERIALIZED (
    SELECT due.id
    FROM (SELECT priority FROM levels WHERE priority IS NOT NULL ORDER BY priority DESC) AS levels,
    LATERAL (
        -- Due pending jobs of one priority in claim order, read through jobs_claim_idx;
        -- rows another claimer has locked are skipped (claimers never wait for a row).
        SELECT id
        FROM {schema}.jobs
        WHERE status = 'pending'
          AND priority = levels.priority
          AND run_at <= now()
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
          -- Paused queues (migration 0007); a worker claims only the tasks it knows.
          AND (%(excluded_queues)s::text[] IS NULL OR queue <> ALL(%(excluded_queues)s::text[]))
          AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
          -- Jobs that limits apply to (migration 0009) are claimed by claim_limited (migration flow_control).
          AND limit_groups IS NULL
          -- A row whose next attempt number would not fit (by hand) is left pending.
          AND attempts < 2147483647
          -- Past its start deadline (expires=, meta "pgtasks.expires"): never started; the
          -- rescuer ends it cancelled. A hand-written non-number sorts below any number.
          AND (NOT meta ? 'pgtasks.expires'
               OR meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
        ORDER BY run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS due
    -- Levels in order, each locking only the rows pulled from it: the limit stops both.
    LIMIT %(limit)s
)
-- The CTE is a fence: the UPDATE touches exactly the rows locked above. The new
-- lease is (locked_by, attempts); every finishing write is conditional on it.
UPDATE {schema}.jobs AS jobs
SET status = 'running',
    attempts = jobs.attempts + 1,
    -- A pending row out of attempts (an operator's UPDATE … SET status = 'pending') gets
    -- one more, as `pgtasks jobs retry` would give it: it never blocks the claim.
    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
    locked_by = %(worker_id)s,
    locked_at = now(),
    started_at = coalesce(jobs.started_at, now()),
    updated_at = now()
FROM picked
WHERE jobs.id = picked.id
-- run_at and created_at within what Python's datetime holds: '-infinity' (written by
-- hand) is due, and would otherwise make the worker refuse the rows it just claimed.
RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
          jobs.attempts, jobs.max_attempts, jobs.meta,
          greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
          least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
              AS created_at,
          clock_timestamp() AS claimed_at;

-- name: claim_jobs_after :many
-- claim_jobs from a worker's position: the (priority, run_at, id) of the last job its
-- previous claim took. Jobs of that priority sorting before it are not read again, so a
-- claim does not walk the index entries of jobs already claimed (entries that vacuum
-- cannot remove while an old snapshot pins the xmin horizon). Higher priorities are read
-- from their start; lower ones only when this priority has no more due jobs. A job that
-- sorts before the position (run_at in the past, a job released meanwhile) is claimed by
-- the worker's next claim_jobs, at most one poll interval later. Other priorities: level
-- by level, as in claim_jobs.
WITH RECURSIVE higher AS (
    -- The priorities above the position's, lowest first (found from its side of the index).
    (SELECT priority FROM {schema}.jobs
     WHERE status = 'pending' AND priority > %(after_priority)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT jobs.priority FROM {schema}.jobs AS jobs
            WHERE jobs.status = 'pending' AND jobs.priority > higher.priority
            ORDER BY jobs.priority LIMIT 1)
    FROM higher WHERE higher.priority IS NOT NULL
), lower AS (
    -- The priorities below the position's, lowest first.
    (SELECT priority FROM {schema}.jobs
     WHERE status = 'pending' AND priority < %(after_priority)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT jobs.priority FROM {schema}.jobs AS jobs
            WHERE jobs.status = 'pending' AND jobs.priority > lower.priority AND jobs.priority < %(after_priority)s
            ORDER BY jobs.priority LIMIT 1)
    FROM lower WHERE lower.priority IS NOT NULL
), picked AS MATERIALIZED (
    SELECT id FROM (
        SELECT due.id
        FROM (SELECT priority FROM higher WHERE priority IS NOT NULL
              ORDER BY priority DESC) AS levels,
        LATERAL (
            SELECT id
            FROM {schema}.jobs
            WHERE status = 'pending'
              AND priority = levels.priority
              AND run_at <= now() AND limit_groups IS NULL AND attempts < 2147483647
              AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
              AND (%(excluded_queues)s::text[] IS NULL OR queue <> ALL(%(excluded_queues)s::text[]))
              AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
              AND (NOT meta ? 'pgtasks.expires'
                   OR meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            ORDER BY run_at, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS due
    ) AS higher_priority
    UNION ALL
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs
        WHERE status = 'pending'
          AND priority = %(after_priority)s
          AND (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint)
          AND run_at <= now() AND limit_groups IS NULL AND attempts < 2147483647
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
          AND (%(excluded_queues)s::text[] IS NULL OR queue <> ALL(%(excluded_queues)s::text[]))
          AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
          AND (NOT meta ? 'pgtasks.expires'
               OR meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
        ORDER BY run_at, id
        FOR UPDATE SKIP LOCKED
    ) AS same_priority
    UNION ALL
    SELECT id FROM (
        SELECT due.id
        FROM (SELECT priority FROM lower WHERE priority IS NOT NULL
              ORDER BY priority DESC) AS levels,
        LATERAL (
            SELECT id
            FROM {schema}.jobs
            WHERE status = 'pending'
              AND priority = levels.priority
              AND run_at <= now() AND limit_groups IS NULL AND attempts < 2147483647
              AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
              AND (%(excluded_queues)s::text[] IS NULL OR queue <> ALL(%(excluded_queues)s::text[]))
              AND (%(task_names)s::text[] IS NULL OR task_name = ANY(%(task_names)s::text[]))
              AND (NOT meta ? 'pgtasks.expires'
                   OR meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            ORDER BY run_at, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS due
    ) AS lower_priority
    -- The branches run in order and each locks only the rows pulled from it: the limit
    -- stops the scan (and the locking) as soon as it is reached.
    LIMIT %(limit)s
)
UPDATE {schema}.jobs AS jobs
SET status = 'running',
    attempts = jobs.attempts + 1,
    -- A pending row out of attempts (an operator's UPDATE … SET status = 'pending') gets
    -- one more, as `pgtasks jobs retry` would give it: it never blocks the claim.
    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
    locked_by = %(worker_id)s,
    locked_at = now(),
    started_at = coalesce(jobs.started_at, now()),
    updated_at = now()
FROM picked
WHERE jobs.id = picked.id
-- run_at and created_at within what Python's datetime holds: '-infinity' (written by
-- hand) is due, and would otherwise make the worker refuse the rows it just claimed.
RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
          jobs.attempts, jobs.max_attempts, jobs.meta,
          greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
          least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
              AS created_at,
          clock_timestamp() AS claimed_at;

-- name: finish_jobs :many
-- Record a batch of outcomes (done, retry, failed), each fenced by its lease; a job whose
-- cancellation was requested meanwhile ends cancelled. A job that ends leaves jobs in this
-- statement: the fenced DELETE's rows are what the INSERT writes into jobs_history
-- (migration jobs_history), so a lost lease matches nothing and a cancel racing the
-- finish waits for it and then finds no row. Waiters hear of finished jobs.
WITH outcome AS MATERIALIZED (
    -- id, attempt, status, delay and held come as comma-joined text (one string each is
    -- far cheaper to send than an array of one value per job); result and error as arrays.
    SELECT * FROM unnest(
        string_to_array(%(id)s, ',')::bigint[], string_to_array(%(attempt)s, ',')::int[],
        string_to_array(%(status)s, ','), %(result)s::jsonb[], %(error)s::text[],
        string_to_array(%(delay)s, ',')::float8[], string_to_array(%(held)s, ','),
        %(exception_type)s::text[]
    ) AS outcome(id, attempt, status, result, error, delay, held, exception_type)
),
flag AS (
    -- The jobs this statement moves keep their keys (jobs_forget_key leaves their rows
    -- alone); set for the rest of the transaction, the worker's round trip.
    SELECT set_config('pgtasks.keys_handled', 'on', true)
),
ended AS (
    DELETE FROM {schema}.jobs AS jobs
    USING outcome
    WHERE jobs.id = outcome.id
      AND (SELECT count(*) FROM flag) = 1
      -- The fence: still running under the lease this worker took. The expected status
      -- comes with each outcome ('running') rather than as a constant, so the planner
      -- cannot pick jobs_running_idx for this join: it reaches each job by its primary
      -- key. (While an old snapshot pins the xmin horizon, jobs_running_idx keeps an
      -- entry for every job finished since; a scan of it grows with each of them.)
      AND jobs.status = outcome.held
      AND jobs.locked_by = %(worker_id)s
      AND jobs.attempts = outcome.attempt
      AND (outcome.status <> 'pending' OR jobs.cancel_requested)
    RETURNING jobs.*, outcome.status AS outcome_status, outcome.result AS outcome_result,
              outcome.error AS outcome_error, outcome.attempt AS outcome_attempt,
              outcome.exception_type AS outcome_exception_type
),
moved AS (
    -- Every column of jobs, in its order (tests/unit check the list against the schema).
    INSERT INTO {schema}.jobs_history
        (id, task_name, queue, priority, args, kwargs, status, attempts, max_attempts,
         run_at, locked_at, locked_by, last_error, result, idempotency_key, created_at,
         updated_at, finished_at, cancel_requested, meta, started_at, attempt_errors,
         limit_groups, limit_key, unique_key, unique_window, workflow_id, workflow_step,
         next_ids, prev_ids, waiting_for, input_mode)
    SELECT id, task_name, queue, priority, args, kwargs,
           CASE WHEN cancel_requested THEN 'cancelled' ELSE outcome_status END,
           attempts, max_attempts, run_at, locked_at, locked_by,
           coalesce(outcome_error, last_error),
           CASE WHEN cancel_requested THEN NULL ELSE outcome_result END,
           idempotency_key, created_at, now(), now(), cancel_requested,
           -- A durable job's steps go with it (migration durable).
           CASE WHEN meta ? 'pgtasks.durable' THEN {schema}.job_steps_taken(id, meta)
                ELSE meta END,
           started_at,
           -- The attempt history (migration 0008): an entry per attempt ended by an error
           -- only, so a job that succeeds at once never writes one.
           CASE WHEN outcome_error IS NULL OR outcome_status = 'done'
                THEN attempt_errors
                ELSE coalesce(attempt_errors, '[]'::jsonb)
                     || jsonb_build_array(jsonb_build_object(
                            'attempt', outcome_attempt,
                            'worker_id', locked_by,
                            'error', outcome_error,
                            'exception_type', outcome_exception_type,
                            'finished_at', now()))
           END,
           limit_groups, limit_key, unique_key, unique_window, workflow_id, workflow_step,
           next_ids, prev_ids, waiting_for, input_mode
    FROM ended
    RETURNING id, status, limit_groups
),
retried AS (
    UPDATE {schema}.jobs AS jobs
    SET status = outcome.status,
        last_error = coalesce(outcome.error, jobs.last_error),
        run_at = now() + make_interval(secs => outcome.delay),
        finished_at = NULL,
        attempt_errors = CASE WHEN outcome.error IS NULL
                              THEN jobs.attempt_errors
                              ELSE coalesce(jobs.attempt_errors, '[]'::jsonb)
                                   || jsonb_build_array(jsonb_build_object(
                                          'attempt', outcome.attempt,
                                          'worker_id', jobs.locked_by,
                                          'error', outcome.error,
                                          'exception_type', outcome.exception_type,
                                          'finished_at', now()))
                         END,
        updated_at = now()
    FROM outcome
    WHERE jobs.id = outcome.id
      AND outcome.status = 'pending'
      AND jobs.status = outcome.held
      AND jobs.locked_by = %(worker_id)s
      AND jobs.attempts = outcome.attempt
      AND NOT jobs.cancel_requested
    RETURNING jobs.id, jobs.status, jobs.limit_groups
),
finished AS (
    SELECT id, status, limit_groups FROM moved
    UNION ALL
    SELECT id, status, limit_groups FROM retried
),
notified AS (
    -- One notification per 500 finished jobs, payload "id,id,…" (under the 8 kB limit).
    SELECT pg_notify({done_channel}, string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER ()) / 500 AS chunk
          FROM moved) AS ended
    GROUP BY chunk
    UNION ALL
    -- Attempts that will be retried changed their jobs too: one notification for all.
    (SELECT pg_notify({activity_channel}, 'retried') FROM retried LIMIT 1)
),
freed AS (
    -- Limited jobs that left 'running' free a slot of each of their limits (migration
    -- flow_control): one notification "<worker id>:<limit names>" wakes the workers
    -- waiting.
    SELECT pg_notify({limits_channel}, left(%(worker_id)s::text || ':'
                     || string_agg(DISTINCT split_part(inst, chr(31), 1), ','), 7900))
    FROM finished, unnest(finished.limit_groups) AS inst
    WHERE finished.limit_groups IS NOT NULL AND inst IS NOT NULL
    HAVING count(*) > 0
)
-- Selecting "sent" keeps the joins (and so the notifications) from being optimised away.
SELECT finished.id, finished.status, notifications.sent + limits.sent
FROM finished
LEFT JOIN (SELECT count(*) AS sent FROM notified) AS notifications ON true
LEFT JOIN (SELECT count(*) AS sent FROM freed) AS limits ON true;

-- name: get_job_outcome :one
-- What a waiter needs of one job: status, result and last error.
SELECT id, status, result, last_error FROM {schema}.all_jobs WHERE id = %(id)s;

-- name: notify_done :exec
-- Tell result waiters that these jobs ended (payload "id,id,…").
SELECT pg_notify({done_channel}, %(ids)s);

-- name: notify_queue :exec
-- Wake workers of a queue (after releasing or rescuing jobs).
SELECT pg_notify({channel}, %(queue)s);
