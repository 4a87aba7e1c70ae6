-- pgtasks migration sequence_handover (numbered by its file name): the worker whose
-- finish ended a sequence's head takes the key's next job itself (docs/howto/flow-control.md,
-- "Sequences"). Placeholders: {schema} (quoted identifier), {channel} (literal).
--
-- Before, the next job of a key went waiting -> pending in the transaction that ended its
-- head, and a claim then wrote it again (pending -> running): two writes of its row, each
-- a new version with an entry in every index of jobs (status is in their predicates, so
-- no update is HOT). Now a worker's round trip that finishes sequence jobs and claims
-- names itself and its claim's filter (the transaction-local setting
-- pgtasks.sequence_taker, a JSON object: worker, queues, excluded, tasks); the turn
-- handover then makes each next job the worker may run running under a fresh lease of
-- that worker (attempts + 1, locked_by, locked_at, started_at: what a claim writes) in
-- one write, and notes its id (pgtasks.sequence_handed) for the round trip’s next
-- statement, which returns it to the worker with its claim. A next job the taker may not
-- run (another queue or task, not due yet, a job that limits apply to, past its start
-- deadline) goes pending as before. Finishes without a taker (a batch’s, a rescue, the
-- cancel mode, an enqueue’s commit, the sweep) hand turns over as in migration 0025.
-- The guarantees are unchanged: the key’s advisory lock is tried as before, and a handed
-- job is a running job like a claimed one (heartbeat, rescue, fenced finish).
--
-- Online: functions replaced in one transaction.

-- pgtasks:step transaction
-- Migration 0025’s sequence_advance_many with a taker (NULL: none, as before): the jobs
-- it made pending or handed to the taker.
CREATE FUNCTION {schema}.sequence_hand_over(p_keys text[], p_taker jsonb) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
-- The next job's probe reads jobs_sequence_idx (key, id) in order and stops at the key's
-- first waiting job. The generic plan's estimate (a handful of rows a key) made it a
-- bitmap scan of every unfinished job of the key and a sort instead: a turn read its
-- key's whole backlog (37 rows and 72 heap blocks a key for a backlog of 40).
SET enable_bitmapscan = off
AS $$
DECLARE
    v_locked  text[];
    v_next    bigint[];
    v_queues  text[];
    v_moved   bigint[];
    v_handed  bigint[] := ARRAY[]::bigint[];
    v_worker  bigint;
    v_only    text[];
    v_except  text[];
    v_tasks   text[];
    v_noted   text;
BEGIN
    SELECT array_agg(k ORDER BY k) INTO v_locked
    FROM (SELECT DISTINCT k FROM unnest(p_keys) AS keys(k) WHERE k IS NOT NULL) AS keys
    WHERE pg_try_advisory_xact_lock(1885828224, hashtext({channel} || chr(31) || k));
    IF v_locked IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- As in 0025: per key, its oldest waiting job when it has no head and no hold.
    v_next := ARRAY(
        SELECT (SELECT j.id FROM {schema}.jobs AS j
                WHERE j.meta ? 'pgtasks.sequence' AND {schema}.sequence_key(j.meta) = k
                  AND j.status IN ('waiting', 'pending', 'running')
                  AND coalesce(j.status, '') = 'waiting'
                ORDER BY j.id LIMIT 1)
        FROM unnest(v_locked) AS keys(k)
        WHERE (SELECT j.id FROM {schema}.jobs AS j
               WHERE j.meta ? 'pgtasks.sequence' AND {schema}.sequence_key(j.meta) = k
                 AND j.status IN ('pending', 'running')
               LIMIT 1) IS NULL
          AND (SELECT h.job_id FROM {schema}.sequence_holds AS h
               WHERE h.sequence_key = k) IS NULL);
    IF cardinality(v_next) = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    v_worker := CASE WHEN jsonb_typeof(p_taker -> 'worker') = 'number'
                     THEN (p_taker ->> 'worker')::bigint END;
    IF v_worker IS NOT NULL THEN
        -- The taker's claim filter, as its claim reads it (NULL: no filter).
        v_only := CASE WHEN jsonb_typeof(p_taker -> 'queues') = 'array'
                       THEN ARRAY(SELECT jsonb_array_elements_text(p_taker -> 'queues')) END;
        v_except := CASE WHEN jsonb_typeof(p_taker -> 'excluded') = 'array'
                         THEN ARRAY(SELECT jsonb_array_elements_text(p_taker -> 'excluded')) END;
        v_tasks := CASE WHEN jsonb_typeof(p_taker -> 'tasks') = 'array'
                        THEN ARRAY(SELECT jsonb_array_elements_text(p_taker -> 'tasks')) END;
        -- What the plain claim would take of these rows, and what it writes (claim_jobs).
        WITH handed AS (
            UPDATE {schema}.jobs AS jobs
            SET status = 'running',
                attempts = jobs.attempts + 1,
                max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
                locked_by = v_worker,
                locked_at = now(),
                started_at = coalesce(jobs.started_at, now()),
                updated_at = now()
            WHERE jobs.id = ANY(v_next) AND coalesce(jobs.status, '') = 'waiting'
              AND jobs.run_at <= now() AND jobs.limit_groups IS NULL
              AND jobs.attempts < 2147483647
              AND (v_only IS NULL OR jobs.queue = ANY(v_only))
              AND (v_except IS NULL OR jobs.queue <> ALL(v_except))
              AND (v_tasks IS NULL OR jobs.task_name = ANY(v_tasks))
              AND (NOT jobs.meta ? 'pgtasks.expires'
                   OR jobs.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
            RETURNING jobs.id
        )
        SELECT coalesce(array_agg(id ORDER BY id), ARRAY[]::bigint[]) INTO v_handed FROM handed;
        IF cardinality(v_handed) > 0 THEN
            v_noted := current_setting('pgtasks.sequence_handed', true);
            v_noted := set_config('pgtasks.sequence_handed',
                                  CASE WHEN v_noted IS NULL OR v_noted = '' THEN ''
                                       ELSE v_noted || ',' END
                                  || array_to_string(v_handed, ','),
                                  true);
        END IF;
    END IF;
    IF cardinality(v_handed) = cardinality(v_next) THEN
        RETURN v_handed;  -- every next job went to the taker: nothing to notify
    END IF;
    -- The others: due from their turn (their own run_at when that is later), as in 0023.
    WITH moved AS (
        UPDATE {schema}.jobs AS jobs
        SET status = 'pending', run_at = greatest(jobs.run_at, now()), updated_at = now()
        WHERE jobs.id = ANY(v_next) AND NOT jobs.id = ANY(v_handed)
          AND coalesce(jobs.status, '') = 'waiting'
        RETURNING jobs.id, jobs.queue
    )
    SELECT coalesce(array_agg(id ORDER BY id), ARRAY[]::bigint[]), array_agg(DISTINCT queue)
    INTO v_moved, v_queues FROM moved;
    IF cardinality(v_moved) > 0 THEN
        PERFORM pg_notify({channel}, q) FROM unnest(v_queues) AS queues(q)
        WHERE octet_length(q) < 7000;
    END IF;
    RETURN v_handed || v_moved;
END;
$$;

-- Without a taker: migration 0025’s statements, now those of the function above.
CREATE OR REPLACE FUNCTION {schema}.sequence_advance_many(p_keys text[]) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT {schema}.sequence_hand_over(p_keys, NULL::jsonb)
$$;

-- Migration 0025’s statement trigger, handing the turns to the taker when the
-- transaction names one.
CREATE OR REPLACE FUNCTION {schema}.sequence_jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_noted text := current_setting('pgtasks.sequence_ended', true);
    v_taker text;
    v_cleared text;
BEGIN
    IF v_noted IS NULL OR v_noted = '' THEN
        RETURN NULL;
    END IF;
    v_cleared := set_config('pgtasks.sequence_ended', '', true);
    v_taker := current_setting('pgtasks.sequence_taker', true);
    PERFORM {schema}.sequence_hand_over(
        ARRAY(SELECT jsonb_array_elements_text(('[' || v_noted || ']')::jsonb)),
        CASE WHEN v_taker IS NULL OR v_taker = '' THEN NULL ELSE v_taker::jsonb END);
    RETURN NULL;
END;
$$;
