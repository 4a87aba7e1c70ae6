-- pgtasks migration sequence_handed_with_claim (numbered by its file name): fewer
-- statements and trigger calls per finish of a sequence job (docs/howto/flow-control.md,
-- "Sequences"). Placeholders: {schema} (quoted identifier).
--
-- Before, a round trip that ended sequence jobs and claimed sent two statements more
-- than a plain one: the taker’s set_config before its finish, and a SELECT of the jobs
-- the finish handed over (migration sequence_handover) after it. Now the finish statement
-- sets the taker itself (its flag CTE), and the plain claims read the handed jobs through
-- sequence_handed_jobs below in the same statement (pgtasks/_store/base.py, the claims’
-- _handing form): one statement a round trip where there were three. A limited claim’s
-- round trip still reads them with a statement of its own.
--
-- And each sequence job that entered jobs_history ran two plpgsql row triggers: the
-- BEFORE one that flags the transaction (migration sequence_trigger_when_noted) and the
-- AFTER one that notes its key (migration sequence_turns). Now the BEFORE one notes the
-- key of a job that ended done or cancelled (every finish of a sequence but failures),
-- and the AFTER one runs for the other statuses only (a failure holds its sequence,
-- cancels the rest, or moves on: unchanged). A key noted before its row is inserted is
-- no different: a failed insert rolls its note back with it, and the statement trigger
-- that reads the notes fires after every row of the statement.
--
-- Online: one transaction: a function created, the BEFORE trigger’s function replaced,
-- the AFTER trigger dropped and created again with its new WHEN (a short lock of
-- jobs_history and its partitions, as in migration sequence_trigger_when_noted).

-- pgtasks:step transaction
-- The jobs noted in pgtasks.sequence_handed (this transaction’s turn handovers) still
-- running under p_worker’s lease, with the columns a claim returns but claimed_at (the
-- caller adds its clock), run_at and created_at within what Python’s datetime holds, as
-- the claims write them. Plain SQL, STABLE, no SET clause: the planner inlines it into
-- the claim that calls it.
CREATE FUNCTION {schema}.sequence_handed_jobs(p_worker bigint)
RETURNS TABLE (id bigint, task_name text, queue text, priority integer, args jsonb,
               kwargs jsonb, attempts integer, max_attempts integer, meta jsonb,
               run_at timestamptz, created_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
           jobs.attempts, jobs.max_attempts, jobs.meta,
           greatest(jobs.run_at, '0002-01-01 00:00:00+00'),
           least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'),
                 '9000-01-01 00:00:00+00')
    FROM {schema}.jobs AS jobs
    WHERE jobs.id = ANY(string_to_array(
              nullif(current_setting('pgtasks.sequence_handed', true), ''), ',')::bigint[])
      AND jobs.status = 'running' AND jobs.locked_by = p_worker
    ORDER BY jobs.id
$$;

-- The BEFORE row trigger (migration sequence_trigger_when_noted): flags the transaction
-- for the statement trigger; for a job that ended done or cancelled, ends the hold it
-- may be (only a job retried after its failure, or cancelled, can) and notes its key, as
-- sequence_job_ended did (migration sequence_turns). Assignments, not queries, but for
-- the DELETE of a hold (migration sequence_trigger_when_noted set the flag by PERFORM,
-- a query run through the executor for each row). The row is inserted as it comes.
CREATE OR REPLACE FUNCTION {schema}.sequence_job_ending() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key   text;
    v_noted text;
BEGIN
    -- An assignment, not PERFORM: an expression evaluated directly, no query.
    v_noted := set_config('pgtasks.sequence_ending', 'on', true);
    IF coalesce(NEW.status, '') NOT IN ('done', 'cancelled')
       OR current_setting('pgtasks.sequence_cascade', true) = 'on' THEN
        RETURN NEW;
    END IF;
    v_key := {schema}.sequence_key(NEW.meta);
    IF v_key IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.attempts > 1 OR NEW.status <> 'done' THEN
        DELETE FROM {schema}.sequence_holds AS holds
        WHERE holds.sequence_key = v_key AND holds.job_id = NEW.id;
    END IF;
    -- The next job’s turn, at the end of the statement (a JSON text per key: any
    -- character a key may hold).
    v_noted := current_setting('pgtasks.sequence_ended', true);
    v_noted := set_config('pgtasks.sequence_ended',
                          CASE WHEN v_noted IS NULL OR v_noted = '' THEN ''
                               ELSE v_noted || ',' END || to_json(v_key)::text,
                          true);
    RETURN NEW;
END;
$$;

-- The AFTER row trigger (migration fair_queues_and_sequences), for the statuses the
-- BEFORE one leaves to it: a failure (hold, cancel the rest, or continue), or a status
-- written by hand. Its function is unchanged.
DROP TRIGGER jobs_history_sequence_job_ended ON {schema}.jobs_history;

CREATE TRIGGER jobs_history_sequence_job_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.sequence'
          AND NEW.workflow_id IS NULL
          AND coalesce(NEW.status, '') NOT IN ('done', 'cancelled')
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.sequence_job_ended();
