-- pgtasks migration workflow_triggers_when_noted (numbered by its file name): a job that
-- enters jobs_history outside any workflow runs no workflow trigger. Placeholders:
-- {schema} (quoted identifier).
--
-- Before, every statement that inserted into jobs_history (each worker finish, each
-- cancel, each rescue) ran the workflows' statement trigger (workflow_jobs_ended: a
-- plpgsql call that reads a setting and returns), whether or not a row of it belonged to
-- a workflow; the row trigger that notes ended workflow jobs already had its WHEN.
--
-- Now the row trigger notes a workflow job BEFORE the row is inserted, and the statement
-- trigger has a WHEN on the noted list (pgtasks.workflow_ended, transaction-local). A
-- statement trigger's WHEN is evaluated when the statement's rows are all written and
-- before its AFTER row triggers fire: so the noting has to be a BEFORE row trigger (it
-- changes no row: it returns NEW) for the statement trigger to see what its rows noted.
-- A statement without workflow rows leaves the list empty and queues no trigger at all.
-- The guarantees are unchanged: every noted id is moved on by the first statement
-- trigger to run after it was noted (the same list, the same function, the same locks);
-- an insert that fails rolls its notes back with it (set_config of a failed statement or
-- subtransaction is undone); the pruner's moves (pgtasks.archiving) note nothing.
--
-- Online: a function and two triggers of jobs_history (and of its partitions) replaced
-- in one short transaction.

-- pgtasks:step transaction
-- Row trigger (BEFORE INSERT on jobs_history): note a workflow job that ended (a
-- transaction-local list of ids). Jobs with nothing after them (a group member, a last
-- step: done or cancelled) and jobs cancelled by a cascade are not noted. The row is
-- inserted as it comes.
CREATE OR REPLACE FUNCTION {schema}.workflow_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text;
BEGIN
    IF (NEW.next_ids IS NULL AND NEW.status <> 'failed')
       OR (NEW.status <> 'done'
           AND current_setting('pgtasks.workflow_cascade', true) = 'on') THEN
        RETURN NEW;
    END IF;
    noted := current_setting('pgtasks.workflow_ended', true);
    PERFORM set_config('pgtasks.workflow_ended',
                       CASE WHEN noted IS NULL OR noted = '' THEN NEW.id::text
                            ELSE noted || ',' || NEW.id END,
                       true);
    RETURN NEW;
END;
$$;

DROP TRIGGER jobs_history_workflow_job_ended ON {schema}.jobs_history;

CREATE TRIGGER jobs_history_workflow_job_ended
    BEFORE INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.workflow_job_ended();

DROP TRIGGER jobs_history_workflow_jobs_ended ON {schema}.jobs_history;

-- Statement trigger: move on after every job noted above, only when one was.
CREATE TRIGGER jobs_history_workflow_jobs_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH STATEMENT
    WHEN (coalesce(current_setting('pgtasks.workflow_ended', true), '') <> '')
    EXECUTE FUNCTION {schema}.workflow_jobs_ended();
