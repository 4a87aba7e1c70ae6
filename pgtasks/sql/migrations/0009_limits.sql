-- pgtasks: concurrency limits and rate limits across workers (docs/howto/flow-control.md).
-- Placeholders: {schema} (quoted identifier).
--
-- A job that some limit applies to carries the instances of those limits it counts in
-- (limit_groups, sorted) and, for a per-key concurrency limit, its key (limit_key, for
-- people to read); every other job has NULL there and never meets this machinery: the
-- plain claim leaves limited jobs out, and only the claim function below takes them.
--
-- Limit names: 'queue:<queue>', 'task:<task>' (concurrency and/or rate of the task as a
-- whole), 'key:<task>' (concurrency per key). An instance is the name itself, or for a
-- 'key:' name the name, a unit separator (chr(31)) and the job's key: the limit's row is
-- the part before the first separator.
--
-- Online: the columns and the table first, then each index built concurrently (writes go
-- on), then the claim function.

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs ADD COLUMN limit_groups text[], ADD COLUMN limit_key text;

-- The definitions, upserted by every worker at start from its app's declarations (the
-- last worker to start wins). rate: rate_count jobs per rate_period seconds, as a token
-- bucket of at most `burst` tokens.
CREATE TABLE {schema}.limits (
    name        text             PRIMARY KEY,
    concurrency integer          CHECK (concurrency IS NULL OR concurrency >= 1),
    rate_count  integer          CHECK (rate_count IS NULL OR rate_count >= 1),
    rate_period double precision CHECK (rate_period IS NULL OR rate_period > 0),
    burst       double precision NOT NULL DEFAULT 1 CHECK (burst >= 1),
    tokens      double precision NOT NULL DEFAULT 1,
    refilled_at timestamptz      NOT NULL DEFAULT now(),
    updated_at  timestamptz      NOT NULL DEFAULT now()
);

-- The limited claim's candidates, in claim order.
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_limited_claim_idx ON {schema}.jobs (priority DESC, run_at, id)
    WHERE status = 'pending' AND limit_groups IS NOT NULL;

-- The running limited jobs, which the limited claim counts per instance.
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_limited_running_idx ON {schema}.jobs (id)
    WHERE status = 'running' AND limit_groups IS NOT NULL;

-- pgtasks:step transaction
-- Claim up to p_limit due limited jobs for one worker, never past a limit.
--
-- Each instance is serialised by a transaction-level advisory lock: a claim waits (at most
-- 200 ms) for the first instance it meets, and takes the others with
-- pg_try_advisory_xact_lock (an instance another claim holds is skipped by this one: no
-- deadlock). Once the lock is held, a new statement (so a new snapshot, which
-- sees every claim committed before the lock was free) counts the instance's running jobs;
-- a job counts as running from its claim until its status changes (finished, retried,
-- released or rescued), so no counter can drift. Rate tokens live on the definition row,
-- written only by the claim that holds its instance's lock. Candidates are read in claim
-- order in batches; an instance found full is left out of the next batch's reading, so a
-- key with many waiting jobs does not hide the jobs of other keys behind it.
CREATE FUNCTION {schema}.claim_limited_jobs(
    p_worker_id bigint,
    p_queues text[],
    p_excluded_queues text[],
    p_task_names text[],
    p_limit integer
) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
DECLARE
    v_batch_size constant integer := greatest(p_limit * 2, 16);
    v_skip     text[] := ARRAY[]::text[];    -- instances this claim adds no job to
    v_held     text[] := ARRAY[]::text[];    -- instances whose lock this claim holds
    v_room     bigint[] := ARRAY[]::bigint[];  -- jobs each held instance may still take
    v_used     bigint[] := ARRAY[]::bigint[];  -- jobs this claim took per held instance
    v_rate     boolean[] := ARRAY[]::boolean[]; -- whether its room came from rate tokens
    v_tokens   double precision[] := ARRAY[]::double precision[];
    v_clock    timestamptz[] := ARRAY[]::timestamptz[];
    v_seen     bigint[] := ARRAY[]::bigint[];
    v_accepted bigint[] := ARRAY[]::bigint[];
    v_pair_ids bigint[];
    v_pair_insts text[];
    v_new      text[];
    v_locked   text[];
    v_found    integer;
    v_count    integer;
    v_index    integer;
    v_start    integer;
    v_end      integer;
    v_ok       boolean;
    v_position integer;
    v_round    integer := 0;
    v_timeout  text;
    r          record;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    LOOP
        v_round := v_round + 1;
        -- A batch of candidates, locked, flattened to (id, instance) pairs in claim order.
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.run_at, c.id, i.inst),
               array_agg(i.inst ORDER BY c.priority DESC, c.run_at, c.id, i.inst),
               count(DISTINCT c.id)
        INTO v_pair_ids, v_pair_insts, v_count
        FROM (
            SELECT j.id, j.priority, j.run_at, j.limit_groups AS instances
            FROM {schema}.jobs AS j
            WHERE j.status = 'pending'
              AND j.limit_groups IS NOT NULL
              AND j.run_at <= now()
              AND (p_queues IS NULL OR j.queue = ANY(p_queues))
              AND (p_excluded_queues IS NULL OR j.queue <> ALL(p_excluded_queues))
              AND (p_task_names IS NULL OR j.task_name = ANY(p_task_names))
              AND j.id <> ALL(v_seen)
              AND NOT (j.limit_groups && v_skip)
              -- pgtasks writes at most three instances; a row written by hand with more
              -- is left pending rather than slow every claim down.
              AND cardinality(j.limit_groups) <= 8
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_batch_size
            FOR UPDATE OF j SKIP LOCKED
        ) AS c
        LEFT JOIN LATERAL unnest(c.instances) AS i(inst) ON true;
        EXIT WHEN coalesce(v_count, 0) = 0;

        -- Lock the instances met for the first time; one held elsewhere is skipped.
        SELECT array_agg(DISTINCT inst) INTO v_new
        FROM unnest(v_pair_insts) AS inst
        WHERE inst IS NOT NULL AND inst <> ALL(v_held) AND inst <> ALL(v_skip);
        IF v_new IS NOT NULL THEN
            IF coalesce(array_length(v_held, 1), 0) = 0 THEN
                -- Holding no instance yet, the claim waits for its first one (the claims
                -- of one busy limit take turns instead of skipping each other). No
                -- deadlock: a claim that holds an instance never waits for another. The
                -- wait is bounded (a claimer stopped inside its transaction must not hold
                -- up the others): past it, the instance is skipped like a held one.
                v_timeout := current_setting('lock_timeout');
                PERFORM set_config('lock_timeout', '200ms', true);
                BEGIN
                    PERFORM pg_advisory_xact_lock(1885828204, hashtext(v_new[1]));
                EXCEPTION WHEN lock_not_available THEN
                    v_skip := v_skip || v_new[1];
                    v_new := array_remove(v_new, v_new[1]);
                END;
                PERFORM set_config('lock_timeout', v_timeout, true);
            END IF;
            SELECT coalesce(array_agg(inst) FILTER (WHERE locked), ARRAY[]::text[]),
                   v_skip || coalesce(array_agg(inst) FILTER (WHERE NOT locked), ARRAY[]::text[])
            INTO v_locked, v_skip
            FROM (SELECT inst, pg_try_advisory_xact_lock(1885828204, hashtext(inst)) AS locked
                  FROM unnest(v_new) AS inst) AS attempts;
            -- A new statement, so a new snapshot: it sees every claim committed before
            -- the locks were free. Room = concurrency - running, and whole rate tokens.
            FOR r IN
                WITH running AS (
                    SELECT inst, count(DISTINCT j.id) AS n
                    FROM {schema}.jobs AS j, unnest(j.limit_groups) AS inst
                    WHERE j.status = 'running' AND j.limit_groups IS NOT NULL
                      AND j.limit_groups && v_locked
                      AND inst = ANY(v_locked)
                    GROUP BY inst
                ), state AS (
                    SELECT l.inst, d.concurrency, d.rate_count, d.rate_period, d.burst,
                           coalesce(running.n, 0) AS running,
                           clock_timestamp() AS clock,
                           CASE WHEN d.rate_count IS NOT NULL AND d.name = l.inst THEN
                               least(d.burst, d.tokens + greatest(0, extract(epoch FROM
                                     clock_timestamp() - d.refilled_at))
                                     * d.rate_count / d.rate_period)
                           END AS tokens
                    FROM unnest(v_locked) AS l(inst)
                    LEFT JOIN {schema}.limits AS d ON d.name = split_part(l.inst, chr(31), 1)
                    LEFT JOIN running ON running.inst = l.inst
                )
                SELECT inst, tokens, clock,
                       least(coalesce(concurrency - running, 2147483647),
                             coalesce(floor(tokens)::bigint, 2147483647)) AS room
                FROM state
            LOOP
                v_held := v_held || r.inst;
                v_room := v_room || greatest(r.room, 0);
                v_used := v_used || 0::bigint;
                v_rate := v_rate || (r.tokens IS NOT NULL);
                v_tokens := v_tokens || r.tokens;
                v_clock := v_clock || r.clock;
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
            v_seen := v_seen || v_pair_ids[v_start];
            CONTINUE WHEN array_length(v_accepted, 1) >= p_limit;
            v_ok := true;
            FOR v_found IN v_start .. v_end LOOP
                CONTINUE WHEN v_pair_insts[v_found] IS NULL;
                v_position := array_position(v_held, v_pair_insts[v_found]);
                IF v_position IS NULL OR v_room[v_position] <= 0 THEN
                    v_ok := false;
                END IF;
            END LOOP;
            IF v_ok THEN
                v_accepted := v_accepted || v_pair_ids[v_start];
                FOR v_found IN v_start .. v_end LOOP
                    CONTINUE WHEN v_pair_insts[v_found] IS NULL;
                    v_position := array_position(v_held, v_pair_insts[v_found]);
                    v_room[v_position] := v_room[v_position] - 1;
                    v_used[v_position] := v_used[v_position] + 1;
                END LOOP;
            END IF;
        END LOOP;
        -- Instances out of room are left out of the next batch's reading.
        FOR v_found IN 1 .. coalesce(array_length(v_held, 1), 0) LOOP
            IF v_room[v_found] <= 0 AND v_held[v_found] <> ALL(v_skip) THEN
                v_skip := v_skip || v_held[v_found];
            END IF;
        END LOOP;
        EXIT WHEN coalesce(array_length(v_accepted, 1), 0) >= p_limit
               OR v_count < v_batch_size
               OR v_round >= 4;
    END LOOP;

    -- Spend the rate tokens of the held instances (their clocks move on even if unused).
    IF array_length(v_held, 1) > 0 THEN
        UPDATE {schema}.limits AS d
        SET tokens = h.tokens - h.used, refilled_at = h.clock
        FROM unnest(v_held, v_rate, v_tokens, v_clock, v_used)
             AS h(inst, rate, tokens, clock, used)
        WHERE h.rate AND d.name = h.inst;
    END IF;

    IF array_length(v_accepted, 1) > 0 THEN
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
        RETURNING jobs.*;
    END IF;
END;
$$;
