-- pgtasks migration sequence_trigger_when_noted (numbered by its file name): a statement
-- that moves no sequence job into jobs_history runs no sequence trigger. Placeholders:
-- {schema} (quoted identifier).
--
-- Before, every statement that inserted into jobs_history (each worker finish, cancel and
-- rescue) called the sequences' statement trigger (sequence_jobs_ended: a plpgsql call
-- that reads a setting and returns), whether or not a row of it was a sequence job: 18 to
-- 26 µs of server time per finish statement. Migration 0030 ended the same cost for the
-- workflows' statement trigger.
--
-- Now a BEFORE row trigger with the sequence row trigger’s own WHEN flags the transaction
-- (pgtasks.sequence_ending, transaction-local), and the statement trigger has a WHEN on
-- that flag. A statement trigger’s WHEN is evaluated once the statement’s rows are
-- written and before its AFTER row triggers fire, which is why the flag is set BEFORE the
-- row is inserted; the AFTER row trigger still notes the keys (and holds or cancels on a
-- failure) as in 0025, and fires before the statement trigger it flagged. The statement
-- trigger clears the flag first, so a later statement of the same transaction that moves
-- no sequence job runs no trigger either. An insert that fails rolls its flag back with
-- it (set_config of a failed statement or subtransaction is undone); the pruner’s moves
-- (pgtasks.archiving) flag nothing, as they note nothing.
--
-- Online: two short transactions: the row trigger created on jobs_history and its
-- partitions, then the statement trigger replaced on jobs_history (until then the old
-- one runs for every statement, as before).

-- pgtasks:step transaction
-- Row trigger (BEFORE INSERT on jobs_history): a sequence job is about to enter
-- jobs_history. The row is inserted as it comes.
CREATE FUNCTION {schema}.sequence_job_ending() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('pgtasks.sequence_ending', 'on', true);
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_history_sequence_job_ending
    BEFORE INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.sequence'
          AND NEW.workflow_id IS NULL
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.sequence_job_ending();

-- pgtasks:step transaction
-- Migration 0029’s statement trigger function, clearing the flag first (a step of its
-- own: it locks jobs_history alone, the step above its partitions too).
CREATE OR REPLACE FUNCTION {schema}.sequence_jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_noted text := current_setting('pgtasks.sequence_ended', true);
    v_taker text;
    v_cleared text;
BEGIN
    v_cleared := set_config('pgtasks.sequence_ending', '', true);
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

DROP TRIGGER jobs_history_sequence_jobs_ended ON {schema}.jobs_history;

-- Statement trigger: the turns of the keys the statement’s ended jobs noted, only when
-- one of its rows was a sequence job.
CREATE TRIGGER jobs_history_sequence_jobs_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH STATEMENT
    WHEN (coalesce(current_setting('pgtasks.sequence_ending', true), '') = 'on')
    EXECUTE FUNCTION {schema}.sequence_jobs_ended();
