-- pgtasks 0036: a fair job without a cap or a rate no longer enters the index of running
-- limited jobs (docs/howto/flow-control.md, docs/performance.md).
-- Placeholders: {schema} (quoted identifier), {channel} (literal).
--
-- jobs_limited_running_idx (migration 0009) held every running job whose limit_groups is
-- not NULL. Fair jobs (fair_key=, migration 0023) without a per-key cap or a rate carry an
-- empty limit_groups (it routes them to the limited claim), so each of their claims wrote
-- an entry into it that nothing reads: the limited claim counts running jobs per instance
-- it holds (a job without instances adds no row), the dashboard’s limits page likewise.
-- The index is built again on the running jobs that name an instance, under its old name;
-- claim_limited (migration 0033) is redefined with the same arguments, results and claim
-- order, its count of running jobs per instance reading the new index: its predicate,
-- limit_groups <> ARRAY[]::text[], is what the planner matches, and estimates from the
-- column’s statistics (an empty array is a common value where fair jobs are; a predicate
-- on cardinality() has none, and its default estimate made the planner read
-- jobs_running_idx, every running job, instead).
--
-- Online: the new index is built concurrently before the function changes (one
-- transaction, no lock on jobs), the old one dropped concurrently after, then the rename
-- (a catalog change).

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_capped_running_idx ON {schema}.jobs (id)
    WHERE status = 'running' AND limit_groups <> ARRAY[]::text[];

-- pgtasks:step transaction
CREATE OR REPLACE FUNCTION {schema}.claim_limited(
    p_worker_id bigint,
    p_queues text[],
    p_excluded_queues text[],
    p_task_names text[],
    p_limit integer,
    p_aging double precision DEFAULT NULL,
    p_aged_queues text[] DEFAULT NULL,
    p_aged_seconds double precision[] DEFAULT NULL
) RETURNS SETOF {schema}.limited_claim
LANGUAGE plpgsql
-- The candidates are read in the claim index’s order whatever the statistics (migration
-- 0028); no statement of this function is compiled by JIT; each is planned once per
-- session (migration 0033).
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
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
    v_ids       bigint[];          -- this round’s candidates, in claim order
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
    v_fits      boolean;                  -- this round’s candidates all fit
    v_new_held  text[];
    v_new_room  bigint[];
    v_new_per_sec double precision[];
    v_new_tokens double precision[];
    v_new_clock timestamptz[];
    v_new_rated boolean;
    v_demand    bigint[];
    v_report    {schema}.limited_claim;
    v_free      boolean;          -- no candidate of the first read names an instance
    -- Priority aging: an interval for every queue or for some (migration 0026).
    v_aged      constant boolean := p_aging IS NOT NULL
                                    OR coalesce(cardinality(p_aged_queues), 0) > 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- The counts below would not see claims committed after this transaction began.
        v_error := format('the limited claim needs READ COMMITTED, this transaction runs %s'
                          ' (pgtasks pins it on its own connections)',
                          upper(current_setting('transaction_isolation')));
        v_batch := 0;
    END IF;
    IF v_batch > 0 AND NOT v_aged THEN
        -- Fair jobs without caps or rates (migration 0033): the candidates alone, in claim
        -- order, as the first round below reads them. When none names an instance (an
        -- empty limit_groups), every one fits: all are taken without the rounds.
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.rank NULLS FIRST, c.run_at, c.id),
               bool_and(cardinality(c.limit_groups) = 0)
        INTO v_ids, v_free
        FROM (
            SELECT j.id, j.limit_groups, j.priority, {schema}.fair_rank(j.meta) AS rank,
                   j.run_at
            FROM {schema}.jobs AS j
            WHERE j.status = 'pending'
              AND j.limit_groups IS NOT NULL
              AND j.run_at <= now()
              AND (p_queues IS NULL OR j.queue = ANY(p_queues))
              AND (p_excluded_queues IS NULL OR j.queue <> ALL(p_excluded_queues))
              AND (p_task_names IS NULL OR j.task_name = ANY(p_task_names))
              AND cardinality(j.limit_groups) <= 8
              AND j.attempts < 2147483647
              AND (NOT j.meta ? 'pgtasks.expires'
                   OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            ORDER BY j.priority DESC, {schema}.fair_rank(j.meta) NULLS FIRST, j.run_at, j.id
            LIMIT v_batch
            FOR UPDATE OF j SKIP LOCKED
        ) AS c;
        IF v_ids IS NULL THEN
            v_batch := 0;  -- nothing due: the rounds would read nothing either
        ELSIF v_free THEN
            v_accepted := v_ids;
            v_taken := cardinality(v_ids);
            v_batch := 0;
        END IF;
    END IF;
    WHILE v_batch > 0 LOOP
        v_round := v_round + 1;
        -- Candidates, row-locked, in claim order (the CTE keeps that order for both
        -- reads); the instances met for the first time, locked unless another claim
        -- holds them.
        WITH RECURSIVE levels(priority) AS (
            -- Priority aging only (migration 0026): the stored priorities of the pending
            -- limited jobs, highest first, by a skip scan of the claim index.
            (SELECT j.priority FROM {schema}.jobs AS j
             WHERE j.status = 'pending' AND j.limit_groups IS NOT NULL
             ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM {schema}.jobs AS j
                    WHERE j.status = 'pending' AND j.limit_groups IS NOT NULL
                      AND j.priority < levels.priority
                    ORDER BY j.priority DESC LIMIT 1)
            FROM levels
            WHERE levels.priority IS NOT NULL
        ), classes(seconds, queues) AS (
            -- Queues by their aging interval (NULL: no aging); the last class, queues
            -- NULL, is every other queue, at the default interval.
            SELECT q.seconds, array_agg(q.queue)
            FROM unnest(p_aged_queues, p_aged_seconds) AS q(queue, seconds)
            WHERE q.queue IS NOT NULL
            GROUP BY q.seconds
            UNION ALL
            SELECT p_aging, NULL::text[]
        ), stored_order AS MATERIALIZED (
            SELECT j.id, j.limit_groups, j.priority::double precision AS effective,
                   {schema}.fair_rank(j.meta) AS rank, j.run_at
            FROM {schema}.jobs AS j
            WHERE NOT v_aged
              AND j.status = 'pending'
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
              -- waited behind a limit; the worker’s expiry pass ends it cancelled.
              AND (NOT j.meta ? 'pgtasks.expires'
                   OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            -- Fair jobs (migration 0023) take turns by rank within a priority; other
            -- limited jobs (rank NULL) come first, in their order as before.
            ORDER BY j.priority DESC, {schema}.fair_rank(j.meta) NULLS FIRST, j.run_at, j.id
            LIMIT v_batch
            FOR UPDATE OF j SKIP LOCKED
        ), aged_order AS MATERIALIZED (
            -- With priority aging: a due job’s priority rises one level per interval of
            -- its queue waited since it was due. Each stored priority (at most 100
            -- levels) of each interval is read in claim order through the claim index,
            -- at most v_batch rows, and the rows are merged by effective priority, then
            -- in claim order: the head of a level nobody claims from rises as it waits,
            -- so its wait is bounded. Rows read but not taken stay locked by this
            -- transaction only (other claimers skip them until it ends).
            SELECT aged.id, aged.limit_groups, aged.effective, aged.rank, aged.run_at
            FROM (SELECT priority FROM levels WHERE priority IS NOT NULL LIMIT 100) AS level
            CROSS JOIN classes AS class
            CROSS JOIN LATERAL (
                SELECT j.id, j.limit_groups, j.run_at, {schema}.fair_rank(j.meta) AS rank,
                       -- Seconds waited from the job’s due time (’-infinity’ written by
                       -- hand counts as very long); no interval: no rise.
                       least(level.priority + coalesce(floor(greatest(
                           extract(epoch FROM now()) - extract(epoch FROM j.run_at), 0)
                           / class.seconds), 0), 1e9)::double precision AS effective
                FROM {schema}.jobs AS j
                WHERE v_aged
                  AND j.status = 'pending'
                  AND j.limit_groups IS NOT NULL
                  AND j.priority = level.priority
                  AND CASE WHEN class.queues IS NULL
                           THEN j.queue <> ALL(coalesce(p_aged_queues, ARRAY[]::text[]))
                           ELSE j.queue = ANY(class.queues) END
                  AND j.run_at <= now()
                  AND (p_queues IS NULL OR j.queue = ANY(p_queues))
                  AND (p_excluded_queues IS NULL OR j.queue <> ALL(p_excluded_queues))
                  AND (p_task_names IS NULL OR j.task_name = ANY(p_task_names))
                  AND j.id <> ALL(v_seen)
                  AND NOT (j.limit_groups && v_skip)
                  AND cardinality(j.limit_groups) <= 8
                  AND j.attempts < 2147483647
                  AND (NOT j.meta ? 'pgtasks.expires'
                       OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
                ORDER BY j.priority DESC, {schema}.fair_rank(j.meta) NULLS FIRST, j.run_at,
                         j.id
                LIMIT v_batch
                FOR UPDATE OF j SKIP LOCKED
            ) AS aged
            WHERE v_aged
            ORDER BY aged.effective DESC, aged.rank NULLS FIRST, aged.run_at, aged.id
            LIMIT v_batch
        ), candidates AS MATERIALIZED (
            -- One of the two reads, with the keys of its order: (effective, rank,
            -- run_at, id) orders either (a stored priority is its effective one).
            SELECT id, limit_groups, effective, rank, run_at FROM stored_order
            UNION ALL
            SELECT id, limit_groups, effective, rank, run_at FROM aged_order
        ), pairs AS MATERIALIZED (
            SELECT c.id, c.effective, c.rank, c.run_at, g.inst, g.place
            FROM candidates AS c, unnest(c.limit_groups) WITH ORDINALITY AS g(inst, place)
        ), tried AS MATERIALIZED (
            -- Each instance’s lock is this schema’s (its channel names it): another
            -- store’s schema in the same database with the same limit takes another lock.
            SELECT inst,
                   pg_try_advisory_xact_lock(1885828204, hashtext({channel} || chr(31) || inst))
                       AS locked
            FROM (SELECT DISTINCT inst FROM pairs
                  WHERE inst IS NOT NULL AND inst <> ALL(v_held) AND inst <> ALL(v_skip))
                 AS fresh
        )
        -- The three arrays are aligned by their ORDER BY (claim order, then each job’s
        -- instances in their order), not by the order a plan happens to read rows in.
        SELECT (SELECT array_agg(id ORDER BY effective DESC, rank NULLS FIRST, run_at, id)
                FROM candidates),
               (SELECT array_agg(cardinality(limit_groups)
                                 ORDER BY effective DESC, rank NULLS FIRST, run_at, id)
                FROM candidates),
               (SELECT array_agg(inst ORDER BY effective DESC, rank NULLS FIRST, run_at, id,
                                 place)
                FROM pairs),
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
                    PERFORM pg_advisory_xact_lock(1885828204,
                                                  hashtext({channel} || chr(31) || v_new[1]));
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
                -- and whether this round’s candidates all fit (their demand per instance).
                WITH locked AS MATERIALIZED (
                    SELECT inst, split_part(inst, chr(31), 1) AS name
                    FROM unnest(v_locked) AS inst
                ), running AS (
                    SELECT l.inst, count(*) AS n
                    FROM {schema}.jobs AS j
                    CROSS JOIN LATERAL unnest(j.limit_groups) AS g(inst)
                    JOIN locked AS l ON l.inst = g.inst
                    -- Through jobs_limited_running_idx, which holds only the running jobs
                    -- that name an instance (migration 0036): a job with none adds no row.
                    WHERE j.status = 'running' AND j.limit_groups <> ARRAY[]::text[]
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
                -- Every candidate fits in its instances’ room (the common case): take them
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
        -- Instances out of room are left out of the next round’s reading.
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
        -- The jobs come back in claim order (an UPDATE returns rows in the plan’s order).
        RETURN QUERY
        WITH taken AS (
            UPDATE {schema}.jobs AS jobs
            SET status = 'running',
                attempts = jobs.attempts + 1,
                max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
                locked_by = p_worker_id,
                locked_at = clock_timestamp(),
                started_at = coalesce(jobs.started_at, now()),
                updated_at = now()
            WHERE jobs.id = ANY(v_accepted) AND jobs.status = 'pending'
            -- run_at and created_at within what Python’s datetime holds (as claim_jobs).
            RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args,
                      jobs.kwargs, jobs.attempts, jobs.max_attempts, jobs.meta,
                      greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
                      least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'),
                            '9000-01-01 00:00:00+00') AS created_at,
                      clock_timestamp() AS claimed_at
        )
        SELECT t.id, t.task_name, t.queue, t.priority, t.args, t.kwargs, t.attempts,
               t.max_attempts, t.meta, t.run_at, t.created_at, t.claimed_at,
               NULL::double precision, NULL::text[], NULL::text
        FROM taken AS t
        JOIN unnest(v_accepted) WITH ORDINALITY AS a(id, place) ON a.id = t.id
        ORDER BY a.place;
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

-- pgtasks:step concurrently
DROP INDEX CONCURRENTLY IF EXISTS {schema}.jobs_limited_running_idx;

-- pgtasks:step transaction
ALTER INDEX {schema}.jobs_capped_running_idx RENAME TO jobs_limited_running_idx;
