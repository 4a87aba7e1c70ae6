-- pgtasks 0020: start deadlines that hold on every claim path (docs/howto/enqueue.md,
-- docs/howto/flow-control.md).
-- Placeholders: {schema} (quoted identifier).
--
-- A job's start deadline (expires=) is its meta key "pgtasks.expires" (seconds since
-- the epoch, database clock). This migration:
--
-- * makes claim_limited leave out a limited job past its deadline, as the plain claims
--   do: a job waiting behind a concurrency or rate limit never starts after its deadline
--   (the function is that of migration flow_control with one more condition on its
--   candidates);
-- * computes a relative deadline on the database's clock as the row is inserted: an
--   enqueue with expires= in seconds or a timedelta writes the meta key
--   "pgtasks.expires_in" (the seconds) beside "pgtasks.expires" (the enqueuer's
--   estimate, kept for a schema without this trigger); the trigger replaces the
--   estimate with clock_timestamp() + seconds and drops "pgtasks.expires_in". Rows
--   without the key cost the trigger's WHEN test only;
-- * gives a workflow's on_error job the input mode 'request': the failed job's Celery
--   request, exception and traceback in JSON form as its first three arguments (the
--   error callbacks of pgtasks.celery: link_error=), instead of the failure dict;
-- * lets `pgtasks jobs retry` (jobs_retry) run an expired job: the retry drops its
--   passed deadline;
-- * indexes the pending jobs that have a deadline (jobs_expiry_idx, partial), so the
--   worker's expiry pass reads those alone rather than every due pending job. Rows
--   enqueued before the migration carry the same meta key: the index holds them too,
--   nothing is rewritten or backfilled.
--
-- Online: one transaction of catalog changes (a function replaced, a trigger added
-- under lock_timeout, retried), then the index built concurrently (reads, writes and
-- claims go on).

-- pgtasks:step transaction
CREATE OR REPLACE FUNCTION {schema}.claim_limited(
    p_worker_id bigint,
    p_queues text[],
    p_excluded_queues text[],
    p_task_names text[],
    p_limit integer
) RETURNS SETOF {schema}.limited_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_limit     constant integer := least(greatest(coalesce(p_limit, 0), 0), 10000);
    v_batch     integer := v_limit;
    v_skip      text[] := ARRAY[]::text[];      -- instances this claim adds no job to
    v_held      text[] := ARRAY[]::text[];      -- instances whose lock this claim holds
    v_room      bigint[] := ARRAY[]::bigint[];  -- jobs each held instance may still take
    v_used      bigint[] := ARRAY[]::bigint[];  -- jobs this claim took per held instance
    v_full      boolean[] := ARRAY[]::boolean[]; -- a candidate found it without room
    v_per_sec   double precision[] := ARRAY[]::double precision[]; -- its rate, or NULL
    v_tokens    double precision[] := ARRAY[]::double precision[];
    v_clock     timestamptz[] := ARRAY[]::timestamptz[];
    v_seen      bigint[] := ARRAY[]::bigint[];
    v_accepted  bigint[] := ARRAY[]::bigint[];
    v_taken     integer := 0;
    v_contended boolean := false;  -- an instance another claim held kept a job back
    v_rated     boolean := false;  -- some held instance has a rate
    v_ids       bigint[];          -- this round's candidates, in claim order
    v_counts    integer[];         -- how many instances each names
    v_insts     text[];            -- their instances, flattened in the same order
    v_new       text[];
    v_locked    text[];
    v_count     integer;
    v_job       integer;
    v_at        integer;
    v_pos       integer;
    v_n         integer;
    v_ok        boolean;
    v_place     integer;
    v_round     integer := 0;
    v_timeout   text;
    v_wait      double precision;
    v_blocked   text[];
    v_error     text;
    v_fits      boolean;                  -- this round's candidates all fit
    v_new_held  text[];
    v_new_room  bigint[];
    v_new_per_sec double precision[];
    v_new_tokens double precision[];
    v_new_clock timestamptz[];
    v_new_rated boolean;
    v_demand    bigint[];
    v_report    {schema}.limited_claim;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- The counts below would not see claims committed after this transaction began.
        v_error := format('the limited claim needs READ COMMITTED, this transaction runs %s'
                          ' (pgtasks pins it on its own connections)',
                          upper(current_setting('transaction_isolation')));
        v_batch := 0;
    END IF;
    WHILE v_batch > 0 LOOP
        v_round := v_round + 1;
        -- Candidates, row-locked, in claim order (the CTE keeps that order for both
        -- reads); the instances met for the first time, locked unless another claim
        -- holds them.
        WITH candidates AS MATERIALIZED (
            SELECT j.id, j.limit_groups
            FROM {schema}.jobs AS j
            WHERE j.status = 'pending'
              AND j.limit_groups IS NOT NULL
              AND j.run_at <= now()
              AND (p_queues IS NULL OR j.queue = ANY(p_queues))
              AND (p_excluded_queues IS NULL OR j.queue <> ALL(p_excluded_queues))
              AND (p_task_names IS NULL OR j.task_name = ANY(p_task_names))
              AND j.id <> ALL(v_seen)
              AND NOT (j.limit_groups && v_skip)
              -- pgtasks writes at most three instances (a CHECK refuses more than 8);
              -- an older row with more is left pending rather than slow every claim.
              AND cardinality(j.limit_groups) <= 8
              -- a row whose next attempt number would not fit is left pending too
              AND j.attempts < 2147483647
              -- Past its start deadline (expires=): never started, however long it
              -- waited behind a limit; the worker's expiry pass ends it cancelled.
              AND (NOT j.meta ? 'pgtasks.expires'
                   OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_batch
            FOR UPDATE OF j SKIP LOCKED
        ), pairs AS MATERIALIZED (
            SELECT g.inst FROM candidates AS c, unnest(c.limit_groups) AS g(inst)
        ), tried AS MATERIALIZED (
            SELECT inst, pg_try_advisory_xact_lock(1885828204, hashtext(inst)) AS locked
            FROM (SELECT DISTINCT inst FROM pairs
                  WHERE inst IS NOT NULL AND inst <> ALL(v_held) AND inst <> ALL(v_skip))
                 AS fresh
        )
        SELECT (SELECT array_agg(id) FROM candidates),
               (SELECT array_agg(cardinality(limit_groups)) FROM candidates),
               (SELECT array_agg(inst) FROM pairs),
               (SELECT coalesce(array_agg(inst) FILTER (WHERE locked), ARRAY[]::text[])
                FROM tried),
               (SELECT coalesce(array_agg(inst) FILTER (WHERE NOT locked), ARRAY[]::text[])
                FROM tried)
        INTO v_ids, v_counts, v_insts, v_locked, v_new;
        v_count := coalesce(cardinality(v_ids), 0);
        EXIT WHEN v_count = 0;

        BEGIN
            IF cardinality(v_locked) = 0 AND cardinality(v_held) = 0
               AND cardinality(v_new) > 0 THEN
                -- Holding no instance, wait for one another claim holds (bounded: a
                -- claimer stopped inside its transaction must not hold up the others;
                -- past it, the instance is skipped like a held one).
                v_timeout := current_setting('lock_timeout');
                PERFORM set_config('lock_timeout', '200ms', true);
                BEGIN
                    PERFORM pg_advisory_xact_lock(1885828204, hashtext(v_new[1]));
                    v_locked := ARRAY[v_new[1]];
                    v_new := v_new[2:];
                EXCEPTION WHEN lock_not_available THEN
                    NULL;
                END;
                PERFORM set_config('lock_timeout', v_timeout, true);
            END IF;
            IF cardinality(v_new) > 0 THEN
                v_skip := v_skip || v_new;
                v_contended := true;
            END IF;
            v_fits := false;
            IF cardinality(v_locked) > 0 THEN
                -- A new statement, so a new snapshot: it sees every claim committed
                -- before the locks were free. Room = concurrency - running, and whole
                -- rate tokens (values clamped: a row written by hand cannot break this);
                -- and whether this round's candidates all fit (their demand per instance).
                WITH locked AS MATERIALIZED (
                    SELECT inst, split_part(inst, chr(31), 1) AS name
                    FROM unnest(v_locked) AS inst
                ), running AS (
                    SELECT l.inst, count(*) AS n
                    FROM {schema}.jobs AS j
                    CROSS JOIN LATERAL unnest(j.limit_groups) AS g(inst)
                    JOIN locked AS l ON l.inst = g.inst
                    WHERE j.status = 'running' AND j.limit_groups IS NOT NULL
                    GROUP BY l.inst
                ), definitions AS MATERIALIZED (
                    SELECT d.name, d.concurrency, d.rate_count, d.rate_period, d.burst,
                           d.tokens, d.refilled_at
                    FROM {schema}.limits AS d
                    WHERE d.name = ANY(ARRAY(SELECT DISTINCT name FROM locked))
                ), demand AS (
                    SELECT inst, count(*) AS n FROM unnest(v_insts) AS inst
                    WHERE inst IS NOT NULL GROUP BY inst
                ), state AS (
                    SELECT l.inst, d.concurrency,
                           coalesce(running.n, 0) AS running,
                           coalesce(demand.n, 0) AS demand,
                           clock_timestamp() AS clock,
                           CASE WHEN d.rate_count > 0 AND d.rate_period > 0
                                     AND d.name = l.inst THEN
                               least(greatest(d.rate_count::double precision
                                              / d.rate_period, 1e-9), 1e9)
                           END AS per_sec,
                           least(greatest(d.burst, 1), 1e9) AS burst,
                           least(greatest(d.tokens, 0), 1e9) AS tokens,
                           CASE WHEN isfinite(d.refilled_at)
                                THEN greatest(0, least(1e9, extract(epoch FROM
                                     clock_timestamp() - d.refilled_at)))
                                ELSE 1e9 END AS elapsed
                    FROM locked AS l
                    LEFT JOIN definitions AS d ON d.name = l.name
                    LEFT JOIN running ON running.inst = l.inst
                    LEFT JOIN demand ON demand.inst = l.inst
                ), rooms AS (
                    SELECT inst, clock, per_sec, demand, tokens_now,
                           greatest(0, least(
                               coalesce(concurrency::bigint - running, 2147483647),
                               coalesce(floor(tokens_now)::bigint, 2147483647))) AS room
                    FROM (SELECT *, CASE WHEN per_sec IS NOT NULL
                                         THEN least(burst, tokens + elapsed * per_sec)
                                    END AS tokens_now
                          FROM state) AS computed
                )
                SELECT array_agg(inst), array_agg(room), array_agg(per_sec),
                       array_agg(tokens_now), array_agg(clock), array_agg(demand),
                       bool_and(demand <= room), bool_or(per_sec IS NOT NULL)
                INTO v_new_held, v_new_room, v_new_per_sec, v_new_tokens, v_new_clock,
                     v_demand, v_fits, v_new_rated
                FROM rooms;
                v_n := cardinality(v_new_held);
                v_held := v_held || v_new_held;
                v_room := v_room || v_new_room;
                v_used := v_used || array_fill(0::bigint, ARRAY[v_n]);
                v_full := v_full || array_fill(false, ARRAY[v_n]);
                v_per_sec := v_per_sec || v_new_per_sec;
                v_tokens := v_tokens || v_new_tokens;
                v_clock := v_clock || v_new_clock;
                v_rated := v_rated OR v_new_rated;
            END IF;

            IF v_round = 1 AND v_fits AND cardinality(v_new) = 0 THEN
                -- Every candidate fits in its instances' room (the common case): take them
                -- all, without walking them one by one. (Round 1: the held instances are
                -- those just locked, in the order of v_demand.)
                v_accepted := v_ids;
                v_taken := v_count;
                v_used := v_demand;
            ELSE
            -- Take the candidates in order while every instance of each has room.
            v_pos := 1;
            FOR v_job IN 1 .. v_count LOOP
                v_n := v_counts[v_job];
                IF v_taken < v_limit THEN
                    v_ok := true;
                    FOR v_at IN v_pos .. v_pos + v_n - 1 LOOP
                        CONTINUE WHEN v_insts[v_at] IS NULL;
                        v_place := array_position(v_held, v_insts[v_at]);
                        IF v_place IS NULL THEN
                            v_ok := false;  -- another claim holds it
                        ELSIF v_room[v_place] <= 0 THEN
                            v_ok := false;
                            v_full[v_place] := true;
                        END IF;
                    END LOOP;
                    IF v_ok THEN
                        v_accepted := v_accepted || v_ids[v_job];
                        v_taken := v_taken + 1;
                        FOR v_at IN v_pos .. v_pos + v_n - 1 LOOP
                            CONTINUE WHEN v_insts[v_at] IS NULL;
                            v_place := array_position(v_held, v_insts[v_at]);
                            v_room[v_place] := v_room[v_place] - 1;
                            v_used[v_place] := v_used[v_place] + 1;
                        END LOOP;
                    END IF;
                END IF;
                v_pos := v_pos + v_n;
            END LOOP;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            -- Nothing of this claim is kept: the plain claim goes on, and the worker
            -- tries again later (and logs the error once).
            v_error := SQLSTATE || ': ' || SQLERRM;
        END;
        EXIT WHEN v_error IS NOT NULL OR v_taken >= v_limit OR v_count < v_batch
                  OR v_round >= 4;
        -- Instances out of room are left out of the next round's reading.
        v_seen := v_seen || v_ids;
        FOR v_at IN 1 .. cardinality(v_held) LOOP
            IF v_room[v_at] <= 0 AND v_held[v_at] <> ALL(v_skip) THEN
                v_skip := v_skip || v_held[v_at];
            END IF;
        END LOOP;
        v_batch := greatest(2 * (v_limit - v_taken), 16);
    END LOOP;

    IF v_error IS NULL AND v_rated THEN
        -- Spend the rate tokens of the held instances (their clocks move on even if unused).
        BEGIN
            UPDATE {schema}.limits AS d
            SET tokens = least(greatest(h.tokens - h.used, 0), 1e9), refilled_at = h.clock
            FROM unnest(v_held, v_per_sec, v_tokens, v_clock, v_used)
                 AS h(inst, per_sec, tokens, clock, used)
            WHERE h.per_sec IS NOT NULL AND d.name = h.inst;
        EXCEPTION WHEN OTHERS THEN
            v_error := SQLSTATE || ': ' || SQLERRM;
        END;
    END IF;

    IF v_error IS NULL AND v_taken > 0 THEN
        RETURN QUERY
        UPDATE {schema}.jobs AS jobs
        SET status = 'running',
            attempts = jobs.attempts + 1,
            max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
            locked_by = p_worker_id,
            locked_at = clock_timestamp(),
            started_at = coalesce(jobs.started_at, now()),
            updated_at = now()
        WHERE jobs.id = ANY(v_accepted) AND jobs.status = 'pending'
        -- run_at and created_at within what Python's datetime holds (as claim_jobs).
        RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args,
                  jobs.kwargs, jobs.attempts, jobs.max_attempts, jobs.meta,
                  greatest(jobs.run_at, '0002-01-01 00:00:00+00'),
                  least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'),
                        '9000-01-01 00:00:00+00'),
                  clock_timestamp(), NULL::double precision, NULL::text[], NULL::text;
    END IF;

    IF v_error IS NULL AND v_taken < v_limit THEN
        -- Why this claim came back short: the limits that held jobs back, and when the
        -- first rate token they wait for is due.
        FOR v_at IN 1 .. cardinality(v_held) LOOP
            CONTINUE WHEN NOT v_full[v_at];
            v_blocked := array_append(v_blocked, split_part(v_held[v_at], chr(31), 1));
            IF v_per_sec[v_at] IS NOT NULL AND v_tokens[v_at] - v_used[v_at] < 1 THEN
                v_wait := least(coalesce(v_wait, 1e9),
                                (1 - (v_tokens[v_at] - v_used[v_at])) / v_per_sec[v_at]);
            END IF;
        END LOOP;
        IF v_contended THEN
            -- Another claim held a limit this one needed: look again soon.
            v_wait := least(coalesce(v_wait, 0.05), 0.05);
        END IF;
    END IF;
    v_report.wait := CASE WHEN v_wait IS NOT NULL THEN least(greatest(v_wait, 0), 1e9) END;
    v_report.blocked := CASE WHEN v_blocked IS NULL THEN ARRAY[]::text[]
                             ELSE ARRAY(SELECT DISTINCT b FROM unnest(v_blocked) AS b ORDER BY 1)
                        END;
    v_report.error := v_error;
    RETURN NEXT v_report;
END;
$$;

-- A relative deadline (meta "pgtasks.expires_in", seconds) becomes an absolute one on
-- the database's clock when the row is inserted. A value that is not a number within
-- +-1e9 seconds (written by hand) is dropped and the enqueuer's estimate kept.
CREATE FUNCTION {schema}.relative_deadline() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_seconds jsonb := NEW.meta -> 'pgtasks.expires_in';
BEGIN
    IF jsonb_typeof(v_seconds) = 'number'
       AND v_seconds >= to_jsonb(-1e9) AND v_seconds <= to_jsonb(1e9) THEN
        NEW.meta := jsonb_set(
            NEW.meta - 'pgtasks.expires_in', ARRAY['pgtasks.expires'],
            to_jsonb(round(extract(epoch FROM clock_timestamp()) + v_seconds::numeric,
                           6)));
    ELSE
        NEW.meta := NEW.meta - 'pgtasks.expires_in';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_relative_deadline
    BEFORE INSERT ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.expires_in')
    EXECUTE FUNCTION {schema}.relative_deadline();

-- The workflow's on_error job, once per workflow, after ``failed_id`` failed for good
-- (migration jobs_history_moves' function, with the input mode 'request').
CREATE OR REPLACE FUNCTION {schema}.workflow_start_on_error(failed_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    failed record;
    spec jsonb;
    error_job bigint;
BEGIN
    SELECT jobs.id, jobs.workflow_id, jobs.workflow_step, jobs.task_name, jobs.status,
           jobs.last_error, jobs.args, jobs.kwargs, jobs.attempts, jobs.queue, jobs.priority,
           jobs.locked_by
    INTO failed
    FROM {schema}.all_jobs AS jobs WHERE jobs.id = failed_id;
    -- Once per workflow: error_job_id is set (0 while the insert below runs) under the
    -- row lock taken in workflow_lock_targets.
    UPDATE {schema}.workflows AS workflows
    SET error_job_id = 0
    WHERE workflows.id = failed.workflow_id
      AND workflows.on_error IS NOT NULL
      AND workflows.error_job_id IS NULL
    RETURNING workflows.on_error INTO spec;
    IF spec IS NULL THEN
        RETURN;
    END IF;
    -- A block of its own: a hand-edited on_error leaves the cancellations in place.
    BEGIN
        INSERT INTO {schema}.jobs
            (task_name, queue, priority, args, kwargs, max_attempts, workflow_id,
             workflow_step, meta)
        VALUES (
            spec->>'task_name', spec->>'queue', (spec->>'priority')::int,
            CASE WHEN spec->>'input_mode' IS NULL THEN spec->'args'
                 WHEN spec->>'input_mode' = 'request' THEN
                     -- Celery's (request, exc, traceback), in JSON form: the failed
                     -- job's request, "Type: message" (the error's last line) and the
                     -- error's text.
                     jsonb_build_array(
                         jsonb_build_object(
                             'id', failed.id::text, 'task', failed.task_name,
                             'args', failed.args, 'kwargs', failed.kwargs,
                             'retries', greatest(failed.attempts - 1, 0),
                             'delivery_info', jsonb_build_object(
                                 'routing_key', failed.queue, 'queue', failed.queue,
                                 'priority', failed.priority),
                             'hostname', (SELECT 'pgtasks@' || workers.hostname
                                          FROM {schema}.workers AS workers
                                          WHERE workers.id = failed.locked_by),
                             'is_eager', false,
                             'workflow_id', failed.workflow_id),
                         regexp_replace(btrim(coalesce(failed.last_error, ''), E' \n'),
                                        '^.*\n', ''),
                         coalesce(failed.last_error, ''))
                     || (spec->'args')
                 ELSE jsonb_build_array(jsonb_build_object(
                          'workflow_id', failed.workflow_id, 'job_id', failed.id,
                          'task_name', failed.task_name, 'step', failed.workflow_step,
                          'status', failed.status, 'error', failed.last_error))
                      || (spec->'args') END,
            spec->'kwargs', (spec->>'max_attempts')::int, failed.workflow_id, 'on_error',
            -- The front that runs it knows its first three arguments are those.
            CASE WHEN spec->>'input_mode' = 'request'
                 THEN jsonb_build_object('pgtasks.error_input', 'request')
                 ELSE jsonb_build_object() END)
        RETURNING id INTO error_job;
        UPDATE {schema}.workflows SET error_job_id = error_job WHERE id = failed.workflow_id;
    EXCEPTION
        WHEN data_exception OR integrity_constraint_violation OR cardinality_violation
             OR program_limit_exceeded THEN
            PERFORM {schema}.workflow_incident(
                'tolerated', failed_id,
                format('workflow %s could not start its on_error job after job %s failed: %s',
                       failed.workflow_id, failed_id, SQLERRM),
                SQLSTATE);
    END;
END;
$$;

-- Put failed or cancelled jobs back to pending (migration jobs_history_moves' function),
-- without the start deadline an expired job carries.
CREATE OR REPLACE FUNCTION {schema}.jobs_retry(ids bigint[])
RETURNS TABLE (id bigint, queue text, attempts integer, max_attempts integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM {schema}.jobs_restore(ids);
    RETURN QUERY
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending',
        run_at = now(),
        -- Attempts keep counting; the limit grows when it was used up.
        max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
        locked_by = NULL,
        locked_at = NULL,
        result = NULL,
        finished_at = NULL,
        -- A cancelled job's flag would cancel the new attempt too.
        cancel_requested = false,
        -- A retry is an operator's "run it now": a start deadline (expires=) that
        -- passed would only end the job cancelled again.
        meta = jobs.meta - 'pgtasks.expires',
        updated_at = now()
    WHERE jobs.id = ANY(ids) AND jobs.status IN ('failed', 'cancelled')
    RETURNING jobs.id, jobs.queue, jobs.attempts, jobs.max_attempts;
END;
$$;

-- pgtasks:step concurrently
-- The pending jobs that have a start deadline, for the expiry pass (expire_jobs).
CREATE INDEX CONCURRENTLY jobs_expiry_idx ON {schema}.jobs (run_at)
    WHERE status = 'pending' AND meta ? 'pgtasks.expires';
