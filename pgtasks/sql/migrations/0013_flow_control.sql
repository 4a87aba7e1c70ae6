-- pgtasks 0013: flow control keeps its promises (docs/howto/flow-control.md).
-- Placeholders: {schema} (quoted identifier).
--
-- * The limits table holds finite values only: the rows the claim arithmetic could not
--   take are repaired, then CHECK constraints keep them so.
-- * claim_limited replaces claim_limited_jobs for the workers of this release (the old
--   function stays, unchanged, for the workers of the previous release during a rolling
--   upgrade). It locks only the candidates it may take, returns the claimed columns only,
--   never raises (any error inside is reported in its last row, and the worker claims
--   plain jobs meanwhile), and says when the next rate token is due and which limits held
--   jobs back, so the worker sleeps until then instead of a poll interval.
-- * A limited job leaving 'running' is notified on the limits channel by the statement
--   that ended it (finish_jobs, rescue_jobs, release_jobs), so the workers waiting for a
--   free slot of that limit claim at once.
-- * A job may count in at most 8 limit instances (pgtasks writes at most 3); more is
--   refused at the write (rows written before are left pending; `pgtasks doctor` names them).
-- * Each worker registers the names of the tasks it knows (workers.task_names): it claims
--   only those, and `pgtasks doctor` / `pgtasks stats` count the pending jobs no live
--   worker knows.

-- Repair, then constrain the limits' values (NaN, infinities, extremes written by hand).
UPDATE {schema}.limits
SET rate_period = CASE WHEN rate_period IS NULL OR (rate_period >= 0.001 AND rate_period <= 1e10)
                       THEN rate_period ELSE 1 END,
    burst = CASE WHEN burst >= 1 AND burst <= 1e9 THEN burst ELSE 1 END,
    tokens = 0,
    refilled_at = now(),
    updated_at = CASE WHEN isfinite(updated_at) THEN updated_at ELSE now() END
WHERE NOT (rate_period IS NULL OR (rate_period >= 0.001 AND rate_period <= 1e10))
   OR NOT (burst >= 1 AND burst <= 1e9)
   OR NOT (tokens >= 0 AND tokens <= 1e9)
   OR NOT isfinite(refilled_at)
   OR NOT isfinite(updated_at);

ALTER TABLE {schema}.limits
    ADD CONSTRAINT limits_rate_period_range_check
        CHECK (rate_period IS NULL OR (rate_period >= 0.001 AND rate_period <= 1e10)),
    ADD CONSTRAINT limits_burst_range_check CHECK (burst >= 1 AND burst <= 1e9),
    ADD CONSTRAINT limits_tokens_check CHECK (tokens >= 0 AND tokens <= 1e9),
    ADD CONSTRAINT limits_refilled_at_check CHECK (isfinite(refilled_at)),
    ADD CONSTRAINT limits_updated_at_check CHECK (isfinite(updated_at));

-- More limit instances than the claim takes are refused at the write (not validated:
-- older rows are left as they are, pending, and reported by `pgtasks doctor`).
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_limit_groups_check
    CHECK (limit_groups IS NULL OR cardinality(limit_groups) <= 8) NOT VALID;

-- The tasks each worker knows (NULL: a worker of an earlier release, which claims any).
ALTER TABLE {schema}.workers ADD COLUMN task_names text[];

-- What claim_limited returns: the claimed jobs (the columns a worker needs), then one
-- report row (id NULL): seconds until the next rate token that held a job back is due
-- (wait), the limits that held jobs back for want of room (blocked), and the error that
-- stopped this claim, if any (error).
CREATE TYPE {schema}.limited_claim AS (
    id           bigint,
    task_name    text,
    queue        text,
    priority     integer,
    args         jsonb,
    kwargs       jsonb,
    attempts     integer,
    max_attempts integer,
    meta         jsonb,
    run_at       timestamptz,
    created_at   timestamptz,
    claimed_at   timestamptz,
    wait         double precision,
    blocked      text[],
    error        text
);

-- Claim up to p_limit due limited jobs for one worker, never past a limit.
--
-- Each limit instance is serialised by a transaction-level advisory lock: a claim waits
-- (at most 200 ms) for the first instance it meets, and takes the others with
-- pg_try_advisory_xact_lock (an instance another claim holds is skipped by this one: no
-- deadlock). Once the locks are held, a new statement (so a new snapshot, which sees
-- every claim committed before the locks were free: the transaction must run READ
-- COMMITTED, which every pgtasks connection pins) counts the instances' running jobs; a
-- job counts as running from its claim until its status changes, so no counter can
-- drift. Rate tokens live on the definition row, written only by the claim that holds
-- its instance's lock. Candidates are read in claim order, locked with SKIP LOCKED, as
-- many as may be taken (more in later rounds when some were held back); an instance
-- found full is left out of the next round's reading, so one busy key does not hide the
-- jobs of other keys behind it. Rows written by hand are hostile input: values are
-- clamped, and any error ends this claim with a report instead of an exception.
CREATE FUNCTION {schema}.claim_limited(
    p_worker_id bigint,
    p_queues text[],
    p_excluded_queues text[],
    p_task_names text[],
    p_limit integer
) RETURNS SETOF {schema}.limited_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_limit     constant integer := least(greatest(coalesce(p_limit, 0), 0), 10000);
    v_batch     integer;
    v_skip      text[] := ARRAY[]::text[];    -- instances this claim adds no job to
    v_held      text[] := ARRAY[]::text[];    -- instances whose lock this claim holds
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
    v_pair_ids  bigint[];
    v_pair_insts text[];
    v_new       text[];
    v_locked    text[];
    v_count     bigint;
    v_index     integer;
    v_start     integer;
    v_end       integer;
    v_at        integer;
    v_ok        boolean;
    v_position  integer;
    v_round     integer := 0;
    v_timeout   text;
    v_wait      double precision;
    v_blocked   text[];
    v_error     text;
    v_claimed   {schema}.limited_claim[];
    r           record;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- The counts below would not see claims committed after this transaction began.
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::integer,
            NULL::jsonb, NULL::jsonb, NULL::integer, NULL::integer, NULL::jsonb,
            NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
            NULL::double precision, NULL::text[],
            format('the limited claim needs READ COMMITTED, this transaction runs %s'
                   ' (pgtasks pins it on its own connections)',
                   upper(current_setting('transaction_isolation')));
        RETURN;
    END IF;
    IF v_limit > 0 THEN
      BEGIN
        v_batch := v_limit;
        LOOP
            v_round := v_round + 1;
            -- Candidates, locked, flattened to (id, instance) pairs in claim order; and
            -- the instances met for the first time, locked unless another claim holds them.
            WITH candidates AS MATERIALIZED (
                SELECT j.id, j.priority, j.run_at, j.limit_groups
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
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT v_batch
                FOR UPDATE OF j SKIP LOCKED
            ), pairs AS MATERIALIZED (
                SELECT c.id, c.priority, c.run_at, i.inst
                FROM candidates AS c LEFT JOIN LATERAL unnest(c.limit_groups) AS i(inst) ON true
            ), tried AS MATERIALIZED (
                SELECT inst, pg_try_advisory_xact_lock(1885828204, hashtext(inst)) AS locked
                FROM (SELECT DISTINCT inst FROM pairs
                      WHERE inst IS NOT NULL AND inst <> ALL(v_held) AND inst <> ALL(v_skip))
                     AS fresh
            )
            SELECT (SELECT array_agg(id ORDER BY priority DESC, run_at, id, inst) FROM pairs),
                   (SELECT array_agg(inst ORDER BY priority DESC, run_at, id, inst) FROM pairs),
                   (SELECT count(*) FROM candidates),
                   (SELECT coalesce(array_agg(inst) FILTER (WHERE locked), ARRAY[]::text[])
                    FROM tried),
                   (SELECT coalesce(array_agg(inst) FILTER (WHERE NOT locked), ARRAY[]::text[])
                    FROM tried)
            INTO v_pair_ids, v_pair_insts, v_count, v_locked, v_new;
            EXIT WHEN v_count = 0;

            IF cardinality(v_locked) = 0 AND cardinality(v_held) = 0
               AND cardinality(v_new) > 0 THEN
                -- Holding no instance, the claim waits for one another claim holds (the
                -- claims of one busy limit take turns instead of skipping each other). No
                -- deadlock: a claim that holds an instance never waits for another. The
                -- wait is bounded (a claimer stopped inside its transaction must not hold
                -- up the others): past it, the instance is skipped like a held one.
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
            IF cardinality(v_locked) > 0 THEN
                -- A new statement, so a new snapshot: it sees every claim committed
                -- before the locks were free. Room = concurrency - running, and whole
                -- rate tokens (values clamped: a row written by hand cannot break this).
                FOR r IN
                    WITH running AS (
                        SELECT inst, count(*) AS n
                        FROM {schema}.jobs AS j, unnest(j.limit_groups) AS inst
                        WHERE j.status = 'running' AND j.limit_groups IS NOT NULL
                          AND j.limit_groups && v_locked
                          AND inst = ANY(v_locked)
                        GROUP BY inst
                    ), state AS (
                        SELECT l.inst, d.concurrency,
                               coalesce(running.n, 0) AS running,
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
                        FROM unnest(v_locked) AS l(inst)
                        LEFT JOIN {schema}.limits AS d ON d.name = split_part(l.inst, chr(31), 1)
                        LEFT JOIN running ON running.inst = l.inst
                    )
                    SELECT inst, clock, per_sec,
                           CASE WHEN per_sec IS NOT NULL
                                THEN least(burst, tokens + elapsed * per_sec) END AS tokens,
                           concurrency, running
                    FROM state
                LOOP
                    v_held := v_held || r.inst;
                    v_room := v_room || greatest(0, least(
                        coalesce(r.concurrency::bigint - r.running, 2147483647),
                        coalesce(floor(r.tokens)::bigint, 2147483647)));
                    v_used := v_used || 0::bigint;
                    v_full := v_full || false;
                    v_per_sec := v_per_sec || r.per_sec;
                    v_tokens := v_tokens || r.tokens;
                    v_clock := v_clock || r.clock;
                    v_rated := v_rated OR r.per_sec IS NOT NULL;
                END LOOP;
            END IF;

            -- Take the candidates in order while every instance of each has room.
            v_index := 1;
            WHILE v_index <= coalesce(array_length(v_pair_ids, 1), 0) LOOP
                v_start := v_index;
                WHILE v_index <= array_length(v_pair_ids, 1)
                      AND v_pair_ids[v_index] = v_pair_ids[v_start] LOOP
                    v_index := v_index + 1;
                END LOOP;
                v_end := v_index - 1;
                CONTINUE WHEN v_taken >= v_limit;
                v_ok := true;
                FOR v_at IN v_start .. v_end LOOP
                    CONTINUE WHEN v_pair_insts[v_at] IS NULL;
                    v_position := array_position(v_held, v_pair_insts[v_at]);
                    IF v_position IS NULL THEN
                        v_ok := false;  -- held by another claim
                    ELSIF v_room[v_position] <= 0 THEN
                        v_ok := false;
                        v_full[v_position] := true;
                    END IF;
                END LOOP;
                IF v_ok THEN
                    v_accepted := v_accepted || v_pair_ids[v_start];
                    v_taken := v_taken + 1;
                    FOR v_at IN v_start .. v_end LOOP
                        CONTINUE WHEN v_pair_insts[v_at] IS NULL;
                        v_position := array_position(v_held, v_pair_insts[v_at]);
                        v_room[v_position] := v_room[v_position] - 1;
                        v_used[v_position] := v_used[v_position] + 1;
                    END LOOP;
                END IF;
            END LOOP;
            EXIT WHEN v_taken >= v_limit OR v_count < v_batch OR v_round >= 4;
            v_seen := v_seen || v_pair_ids;
            -- Instances out of room are left out of the next round's reading.
            FOR v_at IN 1 .. cardinality(v_held) LOOP
                IF v_room[v_at] <= 0 AND v_held[v_at] <> ALL(v_skip) THEN
                    v_skip := v_skip || v_held[v_at];
                END IF;
            END LOOP;
            v_batch := greatest(2 * (v_limit - v_taken), 16);
        END LOOP;

        -- Spend the rate tokens of the held instances (their clocks move on even if unused).
        IF v_rated THEN
            UPDATE {schema}.limits AS d
            SET tokens = least(greatest(h.tokens - h.used, 0), 1e9), refilled_at = h.clock
            FROM unnest(v_held, v_per_sec, v_tokens, v_clock, v_used)
                 AS h(inst, per_sec, tokens, clock, used)
            WHERE h.per_sec IS NOT NULL AND d.name = h.inst;
        END IF;

        IF v_taken > 0 THEN
            -- Kept in a variable until the block ends: rows returned from inside it would
            -- stay returned if a later error rolled the claim back.
            WITH claimed AS (
                UPDATE {schema}.jobs AS jobs
                SET status = 'running',
                    attempts = jobs.attempts + 1,
                    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
                    locked_by = p_worker_id,
                    locked_at = clock_timestamp(),
                    started_at = coalesce(jobs.started_at, now()),
                    updated_at = now()
                WHERE jobs.id = ANY(v_accepted) AND jobs.status = 'pending'
                RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args,
                          jobs.kwargs, jobs.attempts, jobs.max_attempts, jobs.meta,
                          greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
                          least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'),
                                '9000-01-01 00:00:00+00') AS created_at,
                          clock_timestamp() AS claimed_at
            )
            SELECT array_agg(ROW(c.id, c.task_name, c.queue, c.priority, c.args, c.kwargs,
                                 c.attempts, c.max_attempts, c.meta, c.run_at, c.created_at,
                                 c.claimed_at, NULL, NULL, NULL)::{schema}.limited_claim)
            INTO v_claimed
            FROM claimed AS c;
        END IF;
      EXCEPTION WHEN OTHERS THEN
        -- Nothing of this claim is kept: the plain claim goes on, and the worker tries
        -- again later (and logs the error once).
        v_error := SQLSTATE || ': ' || SQLERRM;
        v_taken := 0;
        v_claimed := NULL;
      END;
    END IF;

    IF v_claimed IS NOT NULL THEN
        RETURN QUERY SELECT * FROM unnest(v_claimed);
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
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::integer,
        NULL::jsonb, NULL::jsonb, NULL::integer, NULL::integer, NULL::jsonb,
        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        CASE WHEN v_wait IS NOT NULL THEN greatest(v_wait, 0) END, ARRAY(SELECT DISTINCT b FROM unnest(v_blocked) AS b ORDER BY 1),
        v_error;
END;
$$;
