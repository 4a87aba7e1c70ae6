-- pgtasks 0011: durable workflows (chain, group, chord).
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- A workflow's jobs are all inserted at once, in one transaction. A job that depends on
-- others starts as 'waiting' (never claimed: the claim reads status = 'pending' only)
-- with waiting_for = the number of its predecessors (prev_ids, in order). Each job lists
-- its successors in next_ids. When a workflow job ends, the trigger below moves on in
-- the same transaction as the write that ended it (a worker's fenced finish, the rescuer,
-- a cancellation), so a crash between "done" and "enqueue the next step" cannot happen:
--   done:               each successor's waiting_for is decremented under its row lock;
--                       the one decrement that reaches 0 makes it 'pending', prepending
--                       its input to args (input_mode 'one': the predecessor's result,
--                       'list': the results of prev_ids in order; NULL: nothing).
--   failed, cancelled:  every waiting job downstream is cancelled with a reason naming
--                       the step; a failure also starts the workflow's on_error job once.
-- Plain jobs (workflow_id NULL) never queue a trigger event: the WHEN clause is false.
-- A hand-written workflow row that breaks the function leaves its successors waiting
-- (a server log WARNING says so) rather than failing the write that ended the job.
--
-- Online: catalog changes first, the status check validated in a step of its own, each
-- index built concurrently (writes go on), then the trigger.

-- pgtasks:step transaction
CREATE TABLE {schema}.workflows (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- The job to insert when a job of the workflow fails for good (task_name, queue,
    -- priority, max_attempts, args, kwargs, input_mode), and the job it became.
    on_error      jsonb,
    error_job_id  bigint,
    CONSTRAINT workflows_kind_check CHECK (kind IN ('chain', 'group', 'chord'))
);

ALTER TABLE {schema}.jobs
    ADD COLUMN workflow_id   bigint,
    ADD COLUMN workflow_step text,
    ADD COLUMN next_ids      bigint[],
    ADD COLUMN prev_ids      bigint[],
    ADD COLUMN waiting_for   integer,
    ADD COLUMN input_mode    text;

-- The status check gains 'waiting' (validated without blocking writes).
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'pending', 'running', 'done', 'failed', 'cancelled'))
    NOT VALID;

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_status_check;

-- A workflow's jobs; plain jobs have no entry.
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_workflow_idx ON {schema}.jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- Waiting steps per queue (stats, dashboard, metrics) without reading finished ones.
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_waiting_idx ON {schema}.jobs (queue)
    WHERE status = 'waiting';

-- pgtasks:step transaction
CREATE FUNCTION {schema}.workflow_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    successor record;
    input jsonb;
    reason text;
    ended bigint[];
    spec jsonb;
    error_job bigint;
BEGIN
  -- Nothing to do (a group member, a last step, a job cancelled by the cascade below):
  -- return before the exception block, whose subtransaction is not free.
  IF (NEW.next_ids IS NULL AND NEW.status <> 'failed')
     OR (NEW.status <> 'done'
         AND current_setting('pgtasks.workflow_cascade', true) = 'on') THEN
    RETURN NULL;
  END IF;
  -- A hand-written row (links to nowhere, a broken on_error) must not make the write
  -- that ended the job fail: that write may be a worker's batch or the rescuer's.
  BEGIN
    IF NEW.status = 'done' THEN
        -- One row lock per successor, taken in id order (the index scan of the array):
        -- the last of concurrent finishers sees the others' decrements.
        FOR successor IN
            UPDATE {schema}.jobs AS jobs
            SET waiting_for = jobs.waiting_for - 1, updated_at = now()
            WHERE jobs.id = ANY(NEW.next_ids) AND jobs.status = 'waiting'
            RETURNING jobs.id, jobs.waiting_for, jobs.input_mode, jobs.prev_ids, jobs.queue
        LOOP
            CONTINUE WHEN successor.waiting_for > 0;
            IF successor.input_mode = 'one' THEN
                input := jsonb_build_array(NEW.result);
            ELSIF successor.input_mode = 'list' THEN
                -- A statement of its own: its snapshot sees the other predecessors'
                -- results, committed before their decrements released the row lock.
                SELECT jsonb_build_array(coalesce(jsonb_agg(jobs.result ORDER BY p.ord),
                                                  '[]'::jsonb))
                INTO input
                FROM unnest(successor.prev_ids) WITH ORDINALITY AS p(id, ord)
                LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id;
            ELSE
                input := '[]'::jsonb;
            END IF;
            UPDATE {schema}.jobs AS jobs
            SET status = 'pending',
                args = input || jobs.args,
                run_at = now(),
                updated_at = now()
            WHERE jobs.id = successor.id;
            PERFORM pg_notify({channel}, successor.queue);
        END LOOP;
        RETURN NULL;
    END IF;

    -- failed or cancelled. Jobs cancelled by the cascade below end here at once.
    IF current_setting('pgtasks.workflow_cascade', true) = 'on' THEN
        RETURN NULL;
    END IF;
    reason := format('WorkflowAborted: step %s of workflow %s (task %s, job %s) ended %s;'
                     ' this step was not run',
                     NEW.workflow_step, NEW.workflow_id, NEW.task_name, NEW.id, NEW.status);
    PERFORM set_config('pgtasks.workflow_cascade', 'on', true);
    WITH RECURSIVE downstream(id) AS (
        SELECT unnest(NEW.next_ids)
        UNION
        SELECT unnest(jobs.next_ids)
        FROM {schema}.jobs AS jobs JOIN downstream ON jobs.id = downstream.id
    ), cancelled AS (
        UPDATE {schema}.jobs AS jobs
        SET status = 'cancelled', last_error = reason, finished_at = now(), updated_at = now()
        WHERE jobs.id IN (SELECT id FROM downstream) AND jobs.status = 'waiting'
        RETURNING jobs.id
    )
    SELECT array_agg(id) INTO ended FROM cancelled;
    PERFORM set_config('pgtasks.workflow_cascade', 'off', true);
    IF ended IS NOT NULL THEN
        PERFORM pg_notify({done_channel}, array_to_string(ended, ','));
    END IF;

    IF NEW.status = 'failed' THEN
      -- A block of its own: a broken on_error leaves the cancellations above in place.
      BEGIN
        -- Once per workflow: the row lock makes a concurrent second failure wait, then
        -- find error_job_id set.
        UPDATE {schema}.workflows AS workflows
        SET error_job_id = 0
        WHERE workflows.id = NEW.workflow_id
          AND workflows.on_error IS NOT NULL
          AND workflows.error_job_id IS NULL
        RETURNING workflows.on_error INTO spec;
        IF spec IS NOT NULL THEN
            INSERT INTO {schema}.jobs
                (task_name, queue, priority, args, kwargs, max_attempts, workflow_id,
                 workflow_step)
            VALUES (
                spec->>'task_name', spec->>'queue', (spec->>'priority')::int,
                CASE WHEN spec->>'input_mode' IS NULL THEN spec->'args'
                     ELSE jsonb_build_array(jsonb_build_object(
                              'workflow_id', NEW.workflow_id, 'job_id', NEW.id,
                              'task_name', NEW.task_name, 'step', NEW.workflow_step,
                              'status', NEW.status, 'error', NEW.last_error))
                          || (spec->'args') END,
                spec->'kwargs', (spec->>'max_attempts')::int, NEW.workflow_id, 'on_error')
            RETURNING id INTO error_job;
            UPDATE {schema}.workflows SET error_job_id = error_job WHERE id = NEW.workflow_id;
        END IF;
      EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'pgtasks: workflow % could not start its on_error job after job %'
                      ' failed: %', NEW.workflow_id, NEW.id, SQLERRM;
      END;
    END IF;
    RETURN NULL;
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'pgtasks: workflow % could not move on after job % ended %: %',
        NEW.workflow_id, NEW.id, NEW.status, SQLERRM;
    RETURN NULL;
  END;
END;
$$;

CREATE TRIGGER jobs_workflow_job_ended
    AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL
          AND NEW.status IN ('done', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.workflow_job_ended();
