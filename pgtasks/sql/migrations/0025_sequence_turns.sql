-- pgtasks migration sequence_turns (numbered by its file name): a sequence’s turn handed
-- over once per statement that ended jobs, and a retried sequence job back in its
-- sequence (docs/howto/flow-control.md, "Sequences"). Placeholders: {schema} (quoted
-- identifier), {channel} and {done_channel} (literals).
--
-- Before, each sequence job that entered jobs_history ran the row trigger’s turn
-- handover (sequence_advance): a try of the key’s advisory lock, two probes and the
-- UPDATE of the next job, each statement planned again at every call (plpgsql replans a
-- statement whose generic plan it has not chosen yet), and a NOTIFY per job. Now the row
-- trigger only notes the key (a transaction-local list, as the workflow triggers do)
-- and a statement trigger of jobs_history hands the turns of all the keys one statement
-- ended over in three statements (sequence_advance_many): the same lock tries, one set
-- UPDATE, one NOTIFY per queue. Plain jobs’ finishes pay one plpgsql call per statement
-- that reads a setting (no query). The guarantees are those of migration 0023: each
-- key’s turn is serialised by the advisory lock both sides only try, and a turn a
-- contended try missed is moved on by the rescuer’s pass (sequence_sweep).
--
-- jobs_retry: a retried sequence job waits for its turn ('waiting': it runs after its
-- key’s head, before the jobs enqueued after it), unless it is the failed job holding
-- its sequence (then it is the head: pending at once, as before).
--
-- Online: functions and a trigger in one transaction, then an index built concurrently.

-- pgtasks:step transaction
-- Make the oldest waiting job of each of p_keys pending when the key has no pending or
-- running job and is not held (sequence_advance for a set of keys); the jobs it made
-- pending. Only tries each key’s lock: a key another transaction holds is left to it (or
-- the sweep).
CREATE FUNCTION {schema}.sequence_advance_many(p_keys text[]) RETURNS bigint[]
LANGUAGE plpgsql
-- The probes below read one key’s index entries whatever the keys: a generic plan,
-- planned once per session (a custom plan would be planned again at every call).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[];
    v_next   bigint[];
    v_queues text[];
    v_moved  bigint[];
BEGIN
    -- Each key’s lock is this schema’s (its channel names it): another store’s schema
    -- in the same database with the same key takes another lock, never this turn.
    SELECT array_agg(k ORDER BY k) INTO v_locked
    FROM (SELECT DISTINCT k FROM unnest(p_keys) AS keys(k) WHERE k IS NOT NULL) AS keys
    WHERE pg_try_advisory_xact_lock(1885828224, hashtext({channel} || chr(31) || k));
    IF v_locked IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- A new statement, so a new snapshot: it sees what was committed before the locks
    -- were free. Each probe is a scalar subquery, run per key with the key as its index
    -- condition (an EXISTS here may become a join that reads every head of every key).
    -- "coalesce(status, '') = 'waiting'" is no plain equality on purpose: the planner
    -- cannot use jobs_waiting_idx (every waiting job of every key, which statistics
    -- taken before a backlog was enqueued show as nearly empty) for it.
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
    -- Due from its turn (its own run_at when that is later), as in 0023.
    WITH moved AS (
        UPDATE {schema}.jobs AS jobs
        SET status = 'pending', run_at = greatest(jobs.run_at, now()), updated_at = now()
        WHERE jobs.id = ANY(v_next) AND coalesce(jobs.status, '') = 'waiting'
        RETURNING jobs.id, jobs.queue
    )
    SELECT coalesce(array_agg(id ORDER BY id), ARRAY[]::bigint[]), array_agg(DISTINCT queue)
    INTO v_moved, v_queues FROM moved;
    IF cardinality(v_moved) > 0 THEN
        PERFORM pg_notify({channel}, q) FROM unnest(v_queues) AS queues(q)
        WHERE octet_length(q) < 7000;
    END IF;
    RETURN v_moved;
END;
$$;

-- One key (migration 0023’s function, now the same statements as a set of keys): the
-- job it made pending (NULL: none). The enqueue’s commit, a release and the cancel mode
-- call it.
CREATE OR REPLACE FUNCTION {schema}.sequence_advance(p_key text) RETURNS bigint
LANGUAGE sql AS $$
    SELECT ({schema}.sequence_advance_many(ARRAY[p_key]))[1]
$$;

-- The rescuer’s pass: every key with waiting jobs and neither a head nor a hold (a turn a
-- contended lock missed, a head deleted by hand) moves on. The keys are read by a loose
-- scan (one index entry per key, never a backlog), each checked by one probe of
-- jobs_sequence_head_idx; only the keys without a head are locked (0023’s pass tried the
-- lock of every key and held them all to its end: the finishes meanwhile missed their
-- turns, which then waited for the next pass).
CREATE OR REPLACE FUNCTION {schema}.sequence_sweep() RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_keys text[];
BEGIN
    v_keys := ARRAY(
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
        SELECT k FROM keys
        WHERE k IS NOT NULL
          AND (SELECT j.id FROM {schema}.jobs AS j
               WHERE j.meta ? 'pgtasks.sequence' AND {schema}.sequence_key(j.meta) = k
                 AND j.status IN ('pending', 'running')
               LIMIT 1) IS NULL
          AND (SELECT h.job_id FROM {schema}.sequence_holds AS h
               WHERE h.sequence_key = k) IS NULL);
    IF cardinality(v_keys) = 0 THEN
        RETURN 0;
    END IF;
    RETURN cardinality({schema}.sequence_advance_many(v_keys));
END;
$$;

-- A sequence job ended (it entered jobs_history): its key is noted for the statement
-- trigger below (the next job’s turn), or the failure holds the sequence ('hold') or
-- cancels its waiting jobs ('cancel'), as in 0023.
CREATE OR REPLACE FUNCTION {schema}.sequence_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key  text := {schema}.sequence_key(NEW.meta);
    v_mode text := coalesce(NEW.meta ->> 'pgtasks.sequence_on_failure', 'hold');
    v_noted text;
    v_ended bigint[];
BEGIN
    IF v_key IS NULL OR current_setting('pgtasks.sequence_cascade', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('done', 'cancelled') OR (NEW.status = 'failed' AND v_mode = 'continue')
    THEN
        -- A hold names a failed job: only a job retried after it can end one.
        IF NEW.attempts > 1 OR NEW.status <> 'done' THEN
            DELETE FROM {schema}.sequence_holds AS holds
            WHERE holds.sequence_key = v_key AND holds.job_id = NEW.id;
        END IF;
        -- The next job’s turn, at the end of the statement (a JSON text per key: any
        -- character a key may hold). Assignments, not queries: no statement to plan.
        v_noted := current_setting('pgtasks.sequence_ended', true);
        v_noted := set_config('pgtasks.sequence_ended',
                              CASE WHEN v_noted IS NULL OR v_noted = '' THEN ''
                                   ELSE v_noted || ',' END || to_json(v_key)::text,
                              true);
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

-- Statement trigger: the turns of the keys the statement’s ended jobs noted. The common
-- path runs without a subtransaction (as 0023’s row trigger did): it reads and writes
-- only rows of pgtasks’ making, and the keys are text by construction.
CREATE FUNCTION {schema}.sequence_jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_noted text := current_setting('pgtasks.sequence_ended', true);
    v_cleared text;
BEGIN
    IF v_noted IS NULL OR v_noted = '' THEN
        RETURN NULL;
    END IF;
    v_cleared := set_config('pgtasks.sequence_ended', '', true);
    PERFORM {schema}.sequence_advance_many(
        ARRAY(SELECT jsonb_array_elements_text(('[' || v_noted || ']')::jsonb)));
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_history_sequence_jobs_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.sequence_jobs_ended();

-- Put failed or cancelled jobs back (migration start_deadlines’ function): a sequence
-- job waits for its turn behind its key’s head (enqueue order: the oldest waiting job
-- of a key goes next), unless it is the failed job holding its sequence, which is the
-- head again at once.
CREATE OR REPLACE FUNCTION {schema}.jobs_retry(ids bigint[])
RETURNS TABLE (id bigint, queue text, attempts integer, max_attempts integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids      bigint[];
    v_queues   text[];
    v_attempts integer[];
    v_max      integer[];
    v_keys     text[];
BEGIN
    PERFORM {schema}.jobs_restore(ids);
    WITH retried AS (
        UPDATE {schema}.jobs AS jobs
        SET status = CASE WHEN {schema}.sequence_key(jobs.meta) IS NULL
                               OR EXISTS (SELECT FROM {schema}.sequence_holds AS h
                                          WHERE h.sequence_key = {schema}.sequence_key(jobs.meta)
                                            AND h.job_id = jobs.id)
                          THEN 'pending' ELSE 'waiting' END,
            run_at = now(),
            -- Attempts keep counting; the limit grows when it was used up.
            max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
            locked_by = NULL,
            locked_at = NULL,
            result = NULL,
            finished_at = NULL,
            -- A cancelled job’s flag would cancel the new attempt too.
            cancel_requested = false,
            -- A retry is an operator’s "run it now": a start deadline (expires=) that
            -- passed would only end the job cancelled again.
            meta = jobs.meta - 'pgtasks.expires',
            updated_at = now()
        WHERE jobs.id = ANY(ids) AND jobs.status IN ('failed', 'cancelled')
        RETURNING jobs.id, jobs.queue, jobs.attempts, jobs.max_attempts, jobs.status,
                  {schema}.sequence_key(jobs.meta) AS sequence_key
    )
    SELECT array_agg(retried.id), array_agg(retried.queue), array_agg(retried.attempts),
           array_agg(retried.max_attempts),
           array_agg(DISTINCT retried.sequence_key) FILTER (WHERE retried.status = 'waiting')
    INTO v_ids, v_queues, v_attempts, v_max, v_keys
    FROM retried;
    IF v_keys IS NOT NULL THEN
        -- A new statement: it sees the rows made waiting above. The key’s turn moves on
        -- when nothing runs or holds it (the oldest waiting job, maybe this one, starts).
        PERFORM {schema}.sequence_advance_many(v_keys);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_ids, v_queues, v_attempts, v_max);
END;
$$;

-- A sequence’s head (its pending or running job: at most one a key), so that the turn
-- handover’s "does the key have a head" is one index probe, however long its backlog
-- (jobs_sequence_idx holds the waiting jobs too: that check read them all).
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_sequence_head_idx
    ON {schema}.jobs ({schema}.sequence_key(meta))
    WHERE meta ? 'pgtasks.sequence' AND status IN ('pending', 'running');
