-- pgtasks 0023: fair queuing by key and sequences, strict order per key
-- (docs/howto/flow-control.md). Placeholders: {schema} (quoted identifier), {channel},
-- {done_channel} and {limits_channel} (literals).
--
-- Both live in a job’s meta under reserved keys written at enqueue, so plain jobs, the
-- plain claim statements and the history’s columns stay as they were.
-- * Fair queuing: "pgtasks.fair_key" (a text). An insert trigger gives the job a rank
--   ("pgtasks.fair_rank"): one more than the highest rank of its key’s pending jobs, and
--   no lower than the lowest rank of the due fair jobs of its priority (the turn being
--   served), and routes it to the limited claim (limit_groups: its instances, or an empty
--   array), which reads by (priority, rank, run_at, id): within a priority the keys take
--   turns. Per-key caps (concurrency_key) apply as before (instances of the same jobs).
-- * Sequences: "pgtasks.sequence" (a text), "pgtasks.sequence_on_failure" ('hold', the
--   default; 'continue'; 'cancel'). The insert trigger makes a new sequence job 'waiting'
--   (never claimed, so a backlog costs a claim nothing); the oldest waiting job of a key
--   becomes 'pending' when the key has no pending or running job and is not held: at the
--   enqueue’s commit (a deferred trigger) and when the previous job ends (a trigger of
--   jobs_history, in the transaction that ended it). A failed job of a 'hold' sequence
--   holds it (sequence_holds) until retried and done, or released; 'cancel' cancels the
--   waiting rest. Each key’s turn is serialised by an advisory lock both sides only try
--   (no wait on an enqueuer’s transaction, no deadlock); a turn a contended try missed is
--   moved on by the rescuer’s pass (sequence_sweep).
--
-- Online: catalog changes in one transaction, each index concurrently, the claim function.

-- pgtasks:step transaction
CREATE TABLE {schema}.sequence_holds (
    sequence_key text        PRIMARY KEY,
    job_id       bigint      NOT NULL,
    held_at      timestamptz NOT NULL DEFAULT now()
);

-- A fair job’s rank (NULL for any other job, or a rank written by hand that is not a number).
CREATE FUNCTION {schema}.fair_rank(meta jsonb) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(meta -> 'pgtasks.fair_rank') = 'number'
                THEN (meta -> 'pgtasks.fair_rank')::numeric END
$$;

-- A sequence job’s key (NULL for any other job, or a key written by hand that is no text).
CREATE FUNCTION {schema}.sequence_key(meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(meta -> 'pgtasks.sequence') = 'string'
                THEN meta ->> 'pgtasks.sequence' END
$$;

-- A new fair or sequence job (not a row restored for a retry: those keep their state),
-- written again by an AFTER trigger: a BEFORE row trigger on jobs would make every COPY
-- into it (plain bulk enqueues) insert row by row. The rows are not visible to other
-- transactions before this statement ends, so no claim sees them half-made.
CREATE FUNCTION {schema}.keyed_job_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key    text;
    v_top    numeric;
    v_low    numeric;
    v_meta   jsonb := NEW.meta;
    v_groups text[] := NEW.limit_groups;
    v_status text := NEW.status;
BEGIN
    IF NEW.status <> 'pending' OR NEW.attempts <> 0 OR NEW.workflow_id IS NOT NULL THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(NEW.meta -> 'pgtasks.fair_key') = 'string' THEN
        v_key := NEW.meta ->> 'pgtasks.fair_key';
        -- Both reads see the rows of this statement ranked before this one (each
        -- trigger call’s statements see the writes of the calls before it).
        SELECT {schema}.fair_rank(j.meta) INTO v_top
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.meta ? 'pgtasks.fair_key'
          AND j.meta ->> 'pgtasks.fair_key' = v_key
          AND {schema}.fair_rank(j.meta) IS NOT NULL
        ORDER BY {schema}.fair_rank(j.meta) DESC
        LIMIT 1;
        SELECT {schema}.fair_rank(j.meta) INTO v_low
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending' AND j.limit_groups IS NOT NULL
          AND j.priority = NEW.priority
          AND {schema}.fair_rank(j.meta) IS NOT NULL
          AND j.run_at <= now()
        ORDER BY j.priority DESC, {schema}.fair_rank(j.meta) NULLS FIRST
        LIMIT 1;
        v_meta := v_meta || jsonb_build_object(
            'pgtasks.fair_rank', coalesce(greatest(v_top + 1, v_low), 0));
        v_groups := coalesce(v_groups, ARRAY[]::text[]);
        -- Fair jobs are claimed by the limited claim, which workers run while some limit
        -- is stored: the first fair job stores one (no concurrency, no rate) and tells
        -- the running workers (a worker’s limits freed notification).
        IF NOT EXISTS (SELECT FROM {schema}.limits WHERE name = 'fair:') THEN
            INSERT INTO {schema}.limits (name) VALUES ('fair:') ON CONFLICT DO NOTHING;
            PERFORM pg_notify({limits_channel}, '0:fair:');
        END IF;
    END IF;
    IF jsonb_typeof(NEW.meta -> 'pgtasks.sequence') = 'string' THEN
        v_status := 'waiting';
    END IF;
    UPDATE {schema}.jobs AS jobs
    SET meta = v_meta, limit_groups = v_groups, status = v_status
    WHERE jobs.id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_keyed_job_inserted
    AFTER INSERT ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.fair_key' OR NEW.meta ? 'pgtasks.sequence')
    EXECUTE FUNCTION {schema}.keyed_job_inserted();

-- Make the oldest waiting job of sequence p_key pending when the key has no pending or
-- running job and is not held; returns its id (NULL: none moved). Only tries the key’s
-- lock: a caller that does not get it leaves the turn to the holder (or the sweep).
CREATE FUNCTION {schema}.sequence_advance(p_key text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id    bigint;
    v_queue text;
BEGIN
    IF p_key IS NULL OR NOT pg_try_advisory_xact_lock(1885828224, hashtext(p_key)) THEN
        RETURN NULL;
    END IF;
    -- New statements, so new snapshots: they see what was committed before the lock was free.
    IF EXISTS (SELECT FROM {schema}.jobs AS j
               WHERE j.meta ? 'pgtasks.sequence' AND {schema}.sequence_key(j.meta) = p_key
                 AND j.status IN ('pending', 'running'))
       OR EXISTS (SELECT FROM {schema}.sequence_holds AS h WHERE h.sequence_key = p_key) THEN
        RETURN NULL;
    END IF;
    -- Due from its turn (its own run_at when that is later): a worker reading on from its
    -- claim position sees it at once, and priority aging counts its wait from its turn.
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending', run_at = greatest(jobs.run_at, now()), updated_at = now()
    WHERE jobs.id = (SELECT j.id FROM {schema}.jobs AS j
                     WHERE j.meta ? 'pgtasks.sequence'
                       AND {schema}.sequence_key(j.meta) = p_key
                       AND j.status = 'waiting'
                     ORDER BY j.id LIMIT 1)
      AND jobs.status = 'waiting'
    RETURNING jobs.id, jobs.queue INTO v_id, v_queue;
    IF v_id IS NOT NULL AND octet_length(v_queue) < 7000 THEN
        PERFORM pg_notify({channel}, v_queue);
    END IF;
    RETURN v_id;
END;
$$;

-- At the commit of an enqueue: the sequence’s first job starts if nothing holds it.
CREATE FUNCTION {schema}.sequence_job_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM {schema}.sequence_advance({schema}.sequence_key(NEW.meta));
    EXCEPTION WHEN OTHERS THEN
        -- Never fail an enqueue’s commit: the rescuer’s pass moves the key on.
        RAISE WARNING 'pgtasks: sequence of job % not moved on: %', NEW.id, SQLERRM;
    END;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER jobs_sequence_job_inserted
    AFTER INSERT ON {schema}.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NULL AND NEW.meta ? 'pgtasks.sequence')
    EXECUTE FUNCTION {schema}.sequence_job_inserted();

-- A sequence job ended (it entered jobs_history): the next one starts, or the failure
-- holds the sequence ('hold') or cancels its waiting jobs ('cancel').
CREATE FUNCTION {schema}.sequence_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key  text := {schema}.sequence_key(NEW.meta);
    v_mode text := coalesce(NEW.meta ->> 'pgtasks.sequence_on_failure', 'hold');
    v_ended bigint[];
BEGIN
    IF v_key IS NULL OR current_setting('pgtasks.sequence_cascade', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('done', 'cancelled') OR (NEW.status = 'failed' AND v_mode = 'continue')
    THEN
        -- The next job’s turn. The common path runs without a subtransaction (one per
        -- finished job of a worker’s round trip would cost more than the rest): it reads
        -- and writes only rows of its own making, and the key is text by construction.
        -- A hold names a failed job: only a job retried after it can end one.
        IF NEW.attempts > 1 OR NEW.status <> 'done' THEN
            DELETE FROM {schema}.sequence_holds AS holds
            WHERE holds.sequence_key = v_key AND holds.job_id = NEW.id;
        END IF;
        PERFORM {schema}.sequence_advance(v_key);
        RETURN NULL;
    END IF;
    -- A failure that holds the sequence or cancels its waiting jobs; a hand-written row
    -- must not make the write that ended the job fail.
    BEGIN
        IF NEW.status = 'failed' AND v_mode = 'cancel' THEN
            PERFORM set_config('pgtasks.sequence_cascade', 'on', true);
            WITH cancelled AS (
                UPDATE {schema}.jobs AS jobs
                SET status = 'cancelled', finished_at = now(), updated_at = now(),
                    last_error = format('SequenceAborted: job %s of sequence %L failed;'
                                        ' this job was not run', NEW.id, v_key)
                WHERE jobs.meta ? 'pgtasks.sequence'
                  AND {schema}.sequence_key(jobs.meta) = v_key
                  AND jobs.status = 'waiting'
                RETURNING jobs.id
            )
            SELECT array_agg(id) INTO v_ended FROM cancelled;
            PERFORM set_config('pgtasks.sequence_cascade', 'off', true);
            IF v_ended IS NOT NULL THEN
                PERFORM pg_notify({done_channel}, array_to_string(v_ended, ','));
            END IF;
        ELSIF NEW.status = 'failed' THEN
            INSERT INTO {schema}.sequence_holds AS holds (sequence_key, job_id)
            VALUES (v_key, NEW.id)
            ON CONFLICT (sequence_key) DO UPDATE SET job_id = NEW.id, held_at = now();
            RETURN NULL;
        END IF;
        -- Cancelled the rest: jobs enqueued later start a new run.
        PERFORM {schema}.sequence_advance(v_key);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'pgtasks: sequence % not moved on after job %: %', v_key, NEW.id, SQLERRM;
    END;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_history_sequence_job_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.sequence' AND NEW.workflow_id IS NULL
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.sequence_job_ended();

-- The rescuer’s pass: every key with waiting jobs and no pending or running job (a turn
-- a contended lock missed, a head deleted by hand) moves on. Reads one index entry per
-- key of a waiting, pending or running sequence job (a loose scan), never a backlog.
CREATE FUNCTION {schema}.sequence_sweep() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_key   text;
    v_moved integer := 0;
BEGIN
    FOR v_key IN
        WITH RECURSIVE keys(k) AS (
            (SELECT {schema}.sequence_key(j.meta) FROM {schema}.jobs AS j
             WHERE j.meta ? 'pgtasks.sequence' AND j.status IN ('waiting', 'pending', 'running')
               AND {schema}.sequence_key(j.meta) IS NOT NULL
             ORDER BY {schema}.sequence_key(j.meta) LIMIT 1)
            UNION ALL
            SELECT (SELECT {schema}.sequence_key(j.meta) FROM {schema}.jobs AS j
                    WHERE j.meta ? 'pgtasks.sequence'
                      AND j.status IN ('waiting', 'pending', 'running')
                      AND {schema}.sequence_key(j.meta) > keys.k
                    ORDER BY {schema}.sequence_key(j.meta) LIMIT 1)
            FROM keys WHERE keys.k IS NOT NULL
        )
        SELECT k FROM keys WHERE k IS NOT NULL
    LOOP
        IF {schema}.sequence_advance(v_key) IS NOT NULL THEN
            v_moved := v_moved + 1;
        END IF;
    END LOOP;
    RETURN v_moved;
END;
$$;

-- Fair jobs in claim order (the limited claim’s candidates; jobs_limited_claim_idx stays
-- for the claim function of the previous release during a rolling upgrade).
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_fair_claim_idx
    ON {schema}.jobs (priority DESC, {schema}.fair_rank(meta) NULLS FIRST, run_at, id)
    WHERE status = 'pending' AND limit_groups IS NOT NULL;

-- A key’s highest pending rank (the rank of its next job).
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_fair_key_idx
    ON {schema}.jobs ((meta ->> 'pgtasks.fair_key'), {schema}.fair_rank(meta) DESC)
    WHERE status = 'pending' AND meta ? 'pgtasks.fair_key';

-- A sequence’s unfinished jobs in enqueue order (its head, its next waiting job).
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_sequence_idx
    ON {schema}.jobs ({schema}.sequence_key(meta), id)
    WHERE meta ? 'pgtasks.sequence' AND status IN ('waiting', 'pending', 'running');

-- The limited claim of migration 0020 (start_deadlines), reading fair jobs by rank.
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
            -- Fair jobs (migration 0023) take turns by rank within a priority; other
            -- limited jobs (rank NULL) come first, in their order as before.
            ORDER BY j.priority DESC, {schema}.fair_rank(j.meta) NULLS FIRST, j.run_at, j.id
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
