-- A worker's claims and finishes: the plain claim, the claim after a finish, the aged
-- claim (App(priority_aging=), app.queue(name, priority_aging=);
-- docs/howto/flow-control.md), the limited claim (sql/limits.sql holds the limits
-- themselves), the finish, the next jobs of sequences a finish hands to its worker, an
-- attempt's log lines, and the transaction block a round trip through a pooler runs them
-- in (_store/claims.py). Headers, placeholders and parameters as in queries.sql.

-- name: begin_read_committed_block :exec
-- A transaction block READ COMMITTED whatever the server's default: a worker's round trip
-- through a transaction pooler begins with it and ends with commit_block, in one pipeline
-- (Database.pin_isolation).
BEGIN ISOLATION LEVEL READ COMMITTED;

-- name: commit_block :exec
-- Ends the transaction block begin_read_committed_block began.
COMMIT;

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

-- name: claim_jobs_aged :many
-- claim_jobs where a due job's priority rises by one level per interval it has waited
-- since it was due: %(aging)s seconds (NULL: no aging), or its queue's own interval
-- (%(aged_queues)s, %(aged_seconds)s; NULL: none for that queue). It claims by effective
-- priority (then run_at, id), so a low-priority job's wait is bounded under any stream
-- of higher-priority work. Within one stored priority and one interval the oldest due
-- job has the highest effective priority, so each level of each interval is read in
-- claim order through jobs_claim_idx, at most %(limit)s rows (the levels found by a skip
-- scan of that index, at most 100 of them, highest first), and the rows of every level
-- are merged by effective priority. Rows read but not taken stay locked by this
-- transaction only until it ends (other claimers skip them).
WITH RECURSIVE levels(priority) AS (
    (SELECT j.priority FROM {schema}.jobs AS j
     WHERE j.status = 'pending'
     ORDER BY j.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {schema}.jobs AS j
            WHERE j.status = 'pending' AND j.priority < levels.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM levels
    WHERE levels.priority IS NOT NULL
), classes(seconds, queues) AS (
    -- Queues by their own interval; the last class (queues NULL) is every other queue.
    SELECT q.seconds, array_agg(q.queue)
    FROM unnest(%(aged_queues)s::text[], %(aged_seconds)s::float8[]) AS q(queue, seconds)
    WHERE q.queue IS NOT NULL
    GROUP BY q.seconds
    UNION ALL
    SELECT %(aging)s::float8, NULL::text[]
), candidates AS (
    SELECT due.id, due.run_at,
           -- Seconds waited from the job's due time; a run_at written by hand as
           -- '-infinity' counts as very long, never as an error.
           least(level.priority + coalesce(floor(greatest(
               extract(epoch FROM now()) - extract(epoch FROM due.run_at), 0)
               / class.seconds), 0), 1e9) AS effective
    FROM (SELECT priority FROM levels WHERE priority IS NOT NULL LIMIT 100) AS level
    CROSS JOIN classes AS class
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending'
          AND j.priority = level.priority
          AND CASE WHEN class.queues IS NULL
                   THEN j.queue <> ALL(coalesce(%(aged_queues)s::text[], ARRAY[]::text[]))
                   ELSE j.queue = ANY(class.queues) END
          AND j.run_at <= now()
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]))
          AND (%(excluded_queues)s::text[] IS NULL
               OR j.queue <> ALL(%(excluded_queues)s::text[]))
          AND (%(task_names)s::text[] IS NULL OR j.task_name = ANY(%(task_names)s::text[]))
          AND j.limit_groups IS NULL
          AND j.attempts < 2147483647
          AND (NOT j.meta ? 'pgtasks.expires'
               OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS due
), picked AS (
    SELECT id FROM candidates ORDER BY effective DESC, run_at, id LIMIT %(limit)s
)
UPDATE {schema}.jobs AS jobs
SET status = 'running',
    attempts = jobs.attempts + 1,
    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
    locked_by = %(worker_id)s,
    locked_at = now(),
    started_at = coalesce(jobs.started_at, now()),
    updated_at = now()
FROM picked
WHERE jobs.id = picked.id
RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
          jobs.attempts, jobs.max_attempts, jobs.meta,
          greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
          least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
              AS created_at,
          clock_timestamp() AS claimed_at;

-- name: claim_limited :many
-- Claim up to %(limit)s due jobs that limits apply to, never past a limit (the function of
-- migration flow_control); filters as in claim_jobs. The claimed jobs have the columns of
-- claim_jobs; the last row is a report (id NULL) whose meta holds the seconds until the
-- next rate token that held a job back (wait), the limits that held jobs back (blocked)
-- and the error that ended the claim (error; nothing was claimed then). Priority aging
-- (migration 0026): parameters as in claim_jobs_aged.
SELECT id, task_name, queue, priority, args, kwargs, attempts, max_attempts,
       CASE WHEN id IS NULL
            THEN jsonb_build_object('wait', wait, 'blocked', blocked, 'error', error)
            ELSE meta END AS meta,
       run_at, created_at, claimed_at, true AS limited
FROM {schema}.claim_limited(
    %(worker_id)s, %(queues)s::text[], %(excluded_queues)s::text[], %(task_names)s::text[],
    %(limit)s, %(aging)s::float8, %(aged_queues)s::text[], %(aged_seconds)s::float8[]
);

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
    -- alone); set for the rest of the transaction, the worker's round trip. And the
    -- sequences' taker (migration sequence_handover): %(taker)s, JSON of the worker and
    -- its claim filter when the round trip ends sequence jobs and claims ('' otherwise),
    -- read by the turn handover at the end of this statement.
    SELECT set_config('pgtasks.keys_handled', 'on', true),
           set_config('pgtasks.sequence_taker', %(taker)s, true)
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
              outcome.error AS outcome_error,
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
                            -- The fence made the row's attempts the outcome's attempt.
                            'attempt', attempts,
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

-- name: sequence_handed :many
-- The jobs the round trip's finish handed to this worker (running under its lease), as a
-- claim returns them; after the finish, in its transaction.
SELECT jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
       jobs.attempts, jobs.max_attempts, jobs.meta,
       greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
       least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
           AS created_at,
       clock_timestamp() AS claimed_at
FROM {schema}.jobs AS jobs
WHERE jobs.id = ANY(string_to_array(
          nullif(current_setting('pgtasks.sequence_handed', true), ''), ',')::bigint[])
  AND jobs.status = 'running' AND jobs.locked_by = %(worker_id)s
ORDER BY jobs.id;

-- name: update_job_logs :many
-- The log lines of running attempts, each fenced by its lease; meta key "pgtasks.logs"
-- under the attempt number (see pgtasks/_execution/joblogs.py). The heartbeat writes the
-- lines so far; the round trip that writes outcomes writes an attempt's lines just before
-- its finish_jobs, in its transaction (only for attempts that logged: finish_jobs itself
-- is unchanged). The dashboard hears of them (payload: job ids).
WITH flushed AS (
    SELECT * FROM unnest(%(id)s::bigint[], %(attempt)s::int[], %(logs)s::jsonb[])
        AS flushed(id, attempt, logs)
),
updated AS (
    UPDATE {schema}.jobs AS jobs
    SET meta = jobs.meta || jsonb_build_object('pgtasks.logs',
            CASE WHEN jsonb_typeof(jobs.meta -> 'pgtasks.logs') = 'object'
                 THEN jobs.meta -> 'pgtasks.logs' ELSE jsonb_build_object() END
            || jsonb_build_object(flushed.attempt::text, flushed.logs))
    FROM flushed
    WHERE jobs.id = flushed.id
      AND jobs.status = 'running'
      AND jobs.locked_by = %(worker_id)s
      AND jobs.attempts = flushed.attempt
    RETURNING jobs.id
)
SELECT pg_notify({activity_channel}, string_agg(id::text, ',')) IS NULL AS notified
FROM updated HAVING count(*) > 0;
