-- pgtasks migration jobs_history_moves (numbered by its file name): finished jobs move
-- into jobs_history (made by migration jobs_history, just before; its header says how).
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- One transaction (catalog changes under lock_timeout, retried): the workflow functions
-- read the jobs that ended through all_jobs, the statements that end a job move it into
-- jobs_history (jobs_move_finished) and back for a retry (jobs_restore, jobs_refinish),
-- and the workflow triggers leave jobs for jobs_history, all at once: a workflow never
-- sees a job in neither table, or ended without its triggers firing.

-- pgtasks:step transaction
-- The workflow functions of migration workflow_progress, reading the jobs that ended
-- (and their predecessors’ results) through all_jobs.
-- Record (or count again) an incident of a job of a workflow.
CREATE OR REPLACE FUNCTION {schema}.workflow_incident(
    p_kind text, p_job_id bigint, p_detail text, p_sqlstate text
) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO {schema}.workflow_incidents AS incidents
        (kind, workflow_id, job_id, step, detail, sqlstate)
    SELECT p_kind, jobs.workflow_id, p_job_id, jobs.workflow_step, p_detail, p_sqlstate
    FROM (SELECT p_job_id AS id) AS wanted
    LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = wanted.id
    ON CONFLICT (job_id, kind) DO UPDATE
    SET occurrences = incidents.occurrences + 1, last_at = now(),
        detail = excluded.detail, sqlstate = excluded.sqlstate,
        workflow_id = coalesce(excluded.workflow_id, incidents.workflow_id),
        step = coalesce(excluded.step, incidents.step);
$$;

-- The steps that moving on after ``ended`` may change: the successors of those done,
-- and every step downstream of those failed or cancelled. No JIT (here and in
-- workflow_cancel_downstream): the planner's estimate of a recursion over all_jobs (a
-- union of many partitions) passes jit_above_cost, and a server with JIT compiled the
-- plan at every finish of a workflow's job, for a few index lookups.
CREATE OR REPLACE FUNCTION {schema}.workflow_targets(ended bigint[]) RETURNS SETOF bigint
LANGUAGE sql STABLE SET jit = off AS $$
    WITH RECURSIVE origins AS (
        SELECT jobs.status, jobs.next_ids
        FROM {schema}.all_jobs AS jobs
        WHERE jobs.id = ANY(ended) AND jobs.next_ids IS NOT NULL
    ), downstream(id) AS (
        SELECT unnest(origins.next_ids) FROM origins WHERE origins.status <> 'done'
        UNION
        SELECT unnest(jobs.next_ids)
        FROM {schema}.all_jobs AS jobs
        JOIN downstream ON jobs.id = downstream.id
        WHERE jobs.next_ids IS NOT NULL
    )
    SELECT unnest(origins.next_ids) FROM origins WHERE origins.status = 'done'
    UNION
    SELECT id FROM downstream;
$$;

-- Lock what moving on after ``ended`` may change, in one global order: the steps by job
-- id, then the workflows rows (on_error) by id. Lock waits happen here, before any
-- change; their errors (lock_timeout, deadlock, serialization) propagate.
CREATE OR REPLACE FUNCTION {schema}.workflow_lock_targets(ended bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
    FROM {schema}.jobs AS jobs
    WHERE jobs.id IN (SELECT {schema}.workflow_targets(ended))
      AND jobs.status = 'waiting'
    ORDER BY jobs.id
    FOR UPDATE OF jobs;
    PERFORM 1
    FROM {schema}.workflows AS workflows
    WHERE workflows.id IN (SELECT jobs.workflow_id FROM {schema}.all_jobs AS jobs
                           WHERE jobs.id = ANY(ended) AND jobs.status = 'failed')
      AND workflows.on_error IS NOT NULL
      AND workflows.error_job_id IS NULL
    ORDER BY workflows.id
    FOR UPDATE OF workflows;
END;
$$;

-- A step’s input, from its predecessors’ rows (input_mode 'one': the predecessor’s
-- result; 'list': the predecessors’ results in order; NULL: nothing). The one assembly
-- of results, used wherever a step starts (the trigger, the healing pass, a retry).
CREATE OR REPLACE FUNCTION {schema}.workflow_input(p_prev_ids bigint[], p_input_mode text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE p_input_mode
               WHEN 'one' THEN jsonb_build_array((jsonb_agg(jobs.result ORDER BY p.ord)) -> 0)
               WHEN 'list' THEN jsonb_build_array(coalesce(jsonb_agg(jobs.result ORDER BY p.ord),
                                                           '[]'::jsonb))
               ELSE '[]'::jsonb END
    FROM unnest(p_prev_ids) WITH ORDINALITY AS p(id, ord)
    LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id;
$$;

-- Start the waiting steps ``p_ids`` (their row locks held by the caller) whose
-- predecessors’ rows all say done: pending, due now, their input prepended to args,
-- waiting_for 0; their queues are notified. A step whose counter reached 0 although a
-- predecessor is unfinished (a hand-edited row) gets its counter recounted instead. A
-- statement of its own: under READ COMMITTED its snapshot sees every predecessor that
-- committed before its decrement released the step’s row lock.
CREATE OR REPLACE FUNCTION {schema}.workflow_start_ready(p_ids bigint[]) RETURNS void
LANGUAGE sql AS $$
    WITH steps AS (
        SELECT steps.id, preds.total, preds.done, preds.blocked
        FROM {schema}.jobs AS steps
        CROSS JOIN LATERAL (
            SELECT count(*) AS total,
                   count(*) FILTER (WHERE jobs.status = 'done') AS done,
                   coalesce(bool_or(jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')),
                            false) AS blocked
            FROM unnest(steps.prev_ids) AS p(id)
            LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id
        ) AS preds
        WHERE steps.id = ANY(p_ids) AND steps.status = 'waiting'
    ), started AS (
        UPDATE {schema}.jobs AS jobs
        SET status = 'pending',
            args = {schema}.workflow_input(jobs.prev_ids, jobs.input_mode) || jobs.args,
            waiting_for = 0,
            run_at = now(),
            updated_at = now()
        FROM steps
        WHERE jobs.id = steps.id AND steps.done = steps.total AND NOT steps.blocked
        RETURNING jobs.queue
    ), recounted AS (
        UPDATE {schema}.jobs AS jobs
        SET waiting_for = greatest(1, steps.total - steps.done)
        FROM steps
        WHERE jobs.id = steps.id AND steps.done < steps.total AND NOT steps.blocked
          AND jobs.waiting_for IS DISTINCT FROM greatest(1, steps.total - steps.done)
        RETURNING jobs.id
    )
    -- (A data-modifying WITH runs to completion whether its rows are read or not.)
    SELECT pg_notify({channel}, queue) FROM (SELECT DISTINCT queue FROM started) AS queues;
$$;

-- Start one waiting step (the caller holds its row lock) when its predecessors are all
-- done, as workflow_start_ready does. Returns 'started'; 'waiting' while a predecessor is
-- unfinished; 'blocked' when one failed, was cancelled or is gone (the step will not
-- run); 'moved' when the step is not waiting.
CREATE OR REPLACE FUNCTION {schema}.workflow_start(step_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    preds record;
BEGIN
    SELECT coalesce(bool_or(jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')), false)
               AS blocked
    INTO preds
    FROM {schema}.jobs AS steps
    CROSS JOIN LATERAL unnest(steps.prev_ids) AS p(id)
    LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id
    WHERE steps.id = step_id AND steps.status = 'waiting';
    IF NOT EXISTS (SELECT 1 FROM {schema}.jobs AS jobs
                   WHERE jobs.id = step_id AND jobs.status = 'waiting') THEN
        RETURN 'moved';
    END IF;
    IF preds.blocked THEN
        RETURN 'blocked';
    END IF;
    PERFORM {schema}.workflow_start_ready(ARRAY[step_id]);
    IF EXISTS (SELECT 1 FROM {schema}.jobs AS jobs
               WHERE jobs.id = step_id AND jobs.status = 'waiting') THEN
        RETURN 'waiting';
    END IF;
    RETURN 'started';
END;
$$;

-- Cancel the waiting steps downstream of ``origin`` with ``reason``; their own row
-- triggers do nothing (pgtasks.workflow_cascade). Waiters hear of them.
CREATE OR REPLACE FUNCTION {schema}.workflow_cancel_downstream(origin bigint, reason text) RETURNS void
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    ended bigint[];
BEGIN
    PERFORM set_config('pgtasks.workflow_cascade', 'on', true);
    WITH RECURSIVE downstream(id) AS (
        SELECT unnest(jobs.next_ids) FROM {schema}.all_jobs AS jobs WHERE jobs.id = origin
        UNION
        SELECT unnest(jobs.next_ids)
        FROM {schema}.all_jobs AS jobs JOIN downstream ON jobs.id = downstream.id
    ), cancelled AS (
        UPDATE {schema}.jobs AS jobs
        SET status = 'cancelled', last_error = reason, finished_at = now(), updated_at = now()
        WHERE jobs.id IN (SELECT id FROM downstream) AND jobs.status = 'waiting'
        RETURNING jobs.id
    )
    SELECT array_agg(id ORDER BY id) INTO ended FROM cancelled;
    PERFORM set_config('pgtasks.workflow_cascade', 'off', true);
    -- One notification per 500 jobs (a payload stays under the 8 kB limit).
    PERFORM pg_notify({done_channel}, string_agg(id::text, ','))
    FROM unnest(ended) WITH ORDINALITY AS cancelled(id, ord)
    GROUP BY (ord - 1) / 500;
END;
$$;

-- The reason a step was not run: the job of the workflow that ended it.
CREATE OR REPLACE FUNCTION {schema}.workflow_abort_reason(origin bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('WorkflowAborted: step %s of workflow %s (task %s, job %s) ended %s;'
                  ' this step was not run',
                  jobs.workflow_step, jobs.workflow_id, jobs.task_name, jobs.id, jobs.status)
    FROM {schema}.all_jobs AS jobs WHERE jobs.id = origin;
$$;

-- The workflow’s on_error job, once per workflow, after ``failed_id`` failed for good.
CREATE OR REPLACE FUNCTION {schema}.workflow_start_on_error(failed_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    failed record;
    spec jsonb;
    error_job bigint;
BEGIN
    SELECT jobs.id, jobs.workflow_id, jobs.workflow_step, jobs.task_name, jobs.status,
           jobs.last_error
    INTO failed
    FROM {schema}.all_jobs AS jobs WHERE jobs.id = failed_id;
    -- Once per workflow: error_job_id is set (0 while the insert below runs) under the
    -- row lock taken in workflow_lock_targets.
    UPDATE {schema}.workflows AS workflows
    SET error_job_id = 0
    WHERE workflows.id = failed.workflow_id
      AND workflows.on_error IS NOT NULL
      AND workflows.error_job_id IS NULL
    RETURNING workflows.on_error INTO spec;
    IF spec IS NULL THEN
        RETURN;
    END IF;
    -- A block of its own: a hand-edited on_error leaves the cancellations in place.
    BEGIN
        INSERT INTO {schema}.jobs
            (task_name, queue, priority, args, kwargs, max_attempts, workflow_id,
             workflow_step)
        VALUES (
            spec->>'task_name', spec->>'queue', (spec->>'priority')::int,
            CASE WHEN spec->>'input_mode' IS NULL THEN spec->'args'
                 ELSE jsonb_build_array(jsonb_build_object(
                          'workflow_id', failed.workflow_id, 'job_id', failed.id,
                          'task_name', failed.task_name, 'step', failed.workflow_step,
                          'status', failed.status, 'error', failed.last_error))
                      || (spec->'args') END,
            spec->'kwargs', (spec->>'max_attempts')::int, failed.workflow_id, 'on_error')
        RETURNING id INTO error_job;
        UPDATE {schema}.workflows SET error_job_id = error_job WHERE id = failed.workflow_id;
    EXCEPTION
        WHEN data_exception OR integrity_constraint_violation OR cardinality_violation
             OR program_limit_exceeded THEN
            PERFORM {schema}.workflow_incident(
                'tolerated', failed_id,
                format('workflow %s could not start its on_error job after job %s failed: %s',
                       failed.workflow_id, failed_id, SQLERRM),
                SQLSTATE);
    END;
END;
$$;

-- Move a workflow on after the jobs ``ended`` ended (the caller locked the targets).
CREATE OR REPLACE FUNCTION {schema}.workflow_move_on(ended bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    origin record;
    due bigint[];
BEGIN
    -- Failed or cancelled: the steps after them will not run, and say why.
    FOR origin IN
        SELECT jobs.id, jobs.status
        FROM {schema}.all_jobs AS jobs
        WHERE jobs.id = ANY(ended) AND jobs.status IN ('failed', 'cancelled')
        ORDER BY jobs.id
    LOOP
        PERFORM {schema}.workflow_cancel_downstream(
            origin.id, {schema}.workflow_abort_reason(origin.id));
        IF origin.status = 'failed' THEN
            PERFORM {schema}.workflow_start_on_error(origin.id);
        END IF;
    END LOOP;
    -- Done: each waiting successor counts down by its predecessors done here (the write
    -- that serialises concurrent finishers); those reaching 0 start, with their input,
    -- once the rows of all their predecessors say done.
    WITH finished AS (
        SELECT following.id, count(*)::int AS n
        FROM {schema}.all_jobs AS jobs, unnest(jobs.next_ids) AS following(id)
        WHERE jobs.id = ANY(ended) AND jobs.status = 'done'
        GROUP BY following.id
    ), counted AS (
        UPDATE {schema}.jobs AS jobs
        SET waiting_for = coalesce(jobs.waiting_for, 1) - finished.n, updated_at = now()
        FROM finished
        WHERE jobs.id = finished.id AND jobs.status = 'waiting'
        RETURNING jobs.id, jobs.waiting_for
    )
    SELECT array_agg(id) INTO due FROM counted WHERE waiting_for <= 0;
    IF due IS NOT NULL THEN
        PERFORM {schema}.workflow_start_ready(due);
    END IF;
END;
$$;
-- The healing pass for one step: a waiting step whose predecessors have all finished
-- (or one failed, was cancelled or is gone) is moved on, exactly once (under its row
-- lock; a step another session holds is skipped). Returns 'started' or 'cancelled'
-- (recorded as healed), 'unhealable' (recorded), 'waiting' or 'skipped'.
CREATE OR REPLACE FUNCTION {schema}.workflow_heal_step(step_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    step record;
    outcome text;
    blocker record;
    reason text;
BEGIN
    SELECT jobs.id, jobs.workflow_id, jobs.workflow_step, jobs.task_name, jobs.prev_ids
    INTO step
    FROM {schema}.jobs AS jobs
    WHERE jobs.id = step_id AND jobs.status = 'waiting'
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 'skipped';
    END IF;
    BEGIN
        outcome := {schema}.workflow_start(step_id);
        IF outcome = 'started' THEN
            PERFORM {schema}.workflow_incident(
                'healed', step_id,
                format('step %s of workflow %s (task %s, job %s) was waiting although every'
                       ' predecessor was done; the healing pass started it with its input',
                       step.workflow_step, step.workflow_id, step.task_name, step_id),
                NULL);
        ELSIF outcome = 'blocked' THEN
            SELECT p.id, jobs.id IS NULL AS gone INTO blocker
            FROM unnest(step.prev_ids) WITH ORDINALITY AS p(id, ord)
            LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id
            WHERE jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')
            ORDER BY p.ord
            LIMIT 1;
            reason := CASE WHEN blocker.gone
                THEN format('WorkflowAborted: job %s, a predecessor of this step of workflow'
                            ' %s, no longer exists; this step was not run',
                            blocker.id, step.workflow_id)
                ELSE {schema}.workflow_abort_reason(blocker.id) END;
            -- Not a cascade: this step’s own trigger cancels the steps after it.
            UPDATE {schema}.jobs AS jobs
            SET status = 'cancelled', last_error = reason, finished_at = now(),
                updated_at = now()
            WHERE jobs.id = step_id;
            PERFORM pg_notify({done_channel}, step_id::text);
            outcome := 'cancelled';
            PERFORM {schema}.workflow_incident(
                'healed', step_id,
                format('step %s of workflow %s (task %s, job %s) was waiting after a'
                       ' predecessor ended; the healing pass cancelled it: %s',
                       step.workflow_step, step.workflow_id, step.task_name, step_id, reason),
                NULL);
        END IF;
        RETURN outcome;
    EXCEPTION
        WHEN data_exception OR integrity_constraint_violation OR cardinality_violation
             OR program_limit_exceeded THEN
            PERFORM {schema}.workflow_incident(
                'unhealable', step_id,
                format('step %s of workflow %s (task %s, job %s) is stuck and could not be'
                       ' moved on: %s',
                       step.workflow_step, step.workflow_id, step.task_name, step_id, SQLERRM),
                SQLSTATE);
            RETURN 'unhealable';
    END;
END;
$$;

-- Retry a cancelled step that never started (so never received its input): it waits
-- again for its predecessors (waiting), starts at once with its input re-assembled when
-- they are all done (pending), or is refused when one failed, was cancelled or is gone
-- (refused; detail names it). Rows: outcome, detail, queue.
CREATE OR REPLACE FUNCTION {schema}.workflow_retry_step(step_id bigint)
RETURNS TABLE (outcome text, detail text, queue text)
LANGUAGE plpgsql AS $$
DECLARE
    step record;
    blocker record;
    unfinished integer;
BEGIN
    -- A cancelled step lives in jobs_history (migration jobs_history): back to jobs for
    -- the retry; it moves back below if it is not retried.
    PERFORM {schema}.jobs_restore(ARRAY[step_id]);
    -- The predecessors’ rows first (a share lock, in id order: they precede the step), so
    -- that a predecessor cannot end unseen meanwhile: its finish waits for this retry and
    -- then finds the step waiting, or this retry waits for it and then finds it ended.
    PERFORM 1
    FROM {schema}.jobs AS jobs
    WHERE jobs.id IN (SELECT unnest(steps.prev_ids) FROM {schema}.all_jobs AS steps
                      WHERE steps.id = step_id)
    ORDER BY jobs.id
    FOR SHARE OF jobs;
    SELECT jobs.id, jobs.status, jobs.workflow_id, jobs.workflow_step, jobs.prev_ids,
           jobs.waiting_for, jobs.queue
    INTO step
    FROM {schema}.jobs AS jobs
    WHERE jobs.id = step_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'missing'::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF step.status <> 'cancelled'
       OR NOT coalesce(step.waiting_for > 0 AND cardinality(step.prev_ids) > 0, false) THEN
        PERFORM {schema}.jobs_refinish(ARRAY[step_id]);
        RETURN QUERY SELECT 'not_applicable'::text, NULL::text, step.queue;
        RETURN;
    END IF;
    SELECT p.id, jobs.id IS NULL AS gone, jobs.status, jobs.workflow_step, jobs.task_name
    INTO blocker
    FROM unnest(step.prev_ids) WITH ORDINALITY AS p(id, ord)
    LEFT JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id
    WHERE jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')
    ORDER BY p.ord
    LIMIT 1;
    IF FOUND THEN
        PERFORM {schema}.jobs_refinish(ARRAY[step_id]);
        RETURN QUERY SELECT 'refused'::text,
            format('job %s is step %s of workflow %s and never received its input: %s;'
                   ' retry that step first, then this one',
                   step_id, step.workflow_step, step.workflow_id,
                   CASE WHEN blocker.gone
                        THEN format('its predecessor job %s no longer exists', blocker.id)
                        ELSE format('its predecessor step %s (task %s, job %s) is %s',
                                    blocker.workflow_step, blocker.task_name, blocker.id,
                                    blocker.status) END),
            step.queue;
        RETURN;
    END IF;
    SELECT count(*) INTO unfinished
    FROM unnest(step.prev_ids) AS p(id)
    JOIN {schema}.all_jobs AS jobs ON jobs.id = p.id
    WHERE jobs.status <> 'done';
    UPDATE {schema}.jobs AS jobs
    SET status = 'waiting',
        waiting_for = greatest(1, unfinished),
        run_at = now(),
        locked_by = NULL,
        locked_at = NULL,
        result = NULL,
        finished_at = NULL,
        cancel_requested = false,
        updated_at = now()
    WHERE jobs.id = step_id;
    IF {schema}.workflow_start(step_id) = 'started' THEN
        RETURN QUERY SELECT 'pending'::text, NULL::text, step.queue;
    ELSE
        RETURN QUERY SELECT 'waiting'::text, NULL::text, step.queue;
    END IF;
END;
$$;

-- Move a job that a statement ended (other than the worker’s finish, which moves its
-- rows itself) into jobs_history: the row leaves jobs first, so that nothing reads it
-- twice through all_jobs while the workflow triggers of jobs_history run.
CREATE FUNCTION {schema}.move_finished_job() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keys_handled text := coalesce(current_setting('pgtasks.keys_handled', true), 'off');
    moved boolean;
BEGIN
    PERFORM set_config('pgtasks.keys_handled', 'on', true);
    DELETE FROM {schema}.jobs WHERE id = NEW.id;
    moved := FOUND;
    PERFORM set_config('pgtasks.keys_handled', keys_handled, true);
    IF moved THEN
        INSERT INTO {schema}.jobs_history SELECT NEW.*;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_move_finished
    AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.status IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION {schema}.move_finished_job();

-- Jobs back from jobs_history into jobs (their status unchanged), for a retry; the ids
-- that moved. A job still in jobs is left as it is.
CREATE FUNCTION {schema}.jobs_restore(ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    keys_handled text := coalesce(current_setting('pgtasks.keys_handled', true), 'off');
    moved bigint[];
BEGIN
    PERFORM set_config('pgtasks.keys_handled', 'on', true);
    WITH restored AS (
        DELETE FROM {schema}.jobs_history WHERE id = ANY(ids) RETURNING *
    ), inserted AS (
        INSERT INTO {schema}.jobs OVERRIDING SYSTEM VALUE
        SELECT * FROM restored
        RETURNING id
    )
    SELECT coalesce(array_agg(id), ARRAY[]::bigint[]) INTO moved FROM inserted;
    PERFORM set_config('pgtasks.keys_handled', keys_handled, true);
    RETURN moved;
END;
$$;

-- Jobs restored but not retried back into jobs_history, without moving any workflow on
-- a second time (pgtasks.archiving).
CREATE FUNCTION {schema}.jobs_refinish(ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('pgtasks.archiving', 'on', true);
    UPDATE {schema}.jobs SET status = status
    WHERE id = ANY(ids) AND status IN ('done', 'failed', 'cancelled');
    PERFORM set_config('pgtasks.archiving', 'off', true);
END;
$$;

-- The workflow triggers of jobs go: those of jobs_history (migration jobs_history) fire
-- as a job enters it (every job that ends does from now on).
DROP TRIGGER jobs_workflow_job_ended ON {schema}.jobs;

DROP TRIGGER jobs_workflow_jobs_ended ON {schema}.jobs;

-- Failed or cancelled jobs back to pending, due now, allowed one more attempt (the rule of
-- `pgtasks jobs retry`): moved back from jobs_history first. Rows: the jobs retried.
CREATE FUNCTION {schema}.jobs_retry(ids bigint[])
RETURNS TABLE (id bigint, queue text, attempts integer, max_attempts integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM {schema}.jobs_restore(ids);
    RETURN QUERY
    UPDATE {schema}.jobs AS jobs
    SET status = 'pending',
        run_at = now(),
        -- Attempts keep counting; the limit grows when it was used up.
        max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
        locked_by = NULL,
        locked_at = NULL,
        result = NULL,
        finished_at = NULL,
        -- A cancelled job’s flag would cancel the new attempt too.
        cancel_requested = false,
        updated_at = now()
    WHERE jobs.id = ANY(ids) AND jobs.status IN ('failed', 'cancelled')
    RETURNING jobs.id, jobs.queue, jobs.attempts, jobs.max_attempts;
END;
$$;

-- Delete finished jobs and the keys they hold (an operator’s delete; the pruner’s
-- deletes of rows past retention). Rows: the status of each job deleted.
CREATE FUNCTION {schema}.jobs_delete_finished(ids bigint[])
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    keys_handled text := coalesce(current_setting('pgtasks.keys_handled', true), 'off');
BEGIN
    PERFORM set_config('pgtasks.keys_handled', 'on', true);
    RETURN QUERY
    WITH deleted AS (
        DELETE FROM {schema}.jobs_history AS history
        WHERE history.id = ANY(ids)
        RETURNING history.id, history.status
    ), legacy AS (
        DELETE FROM {schema}.jobs AS jobs
        WHERE jobs.id = ANY(ids) AND jobs.status IN ('done', 'failed', 'cancelled')
        RETURNING jobs.id, jobs.status
    ), keys AS (
        DELETE FROM {schema}.job_keys AS keys
        WHERE keys.job_id IN (SELECT deleted.id FROM deleted UNION ALL
                              SELECT legacy.id FROM legacy)
    )
    SELECT deleted.id, deleted.status FROM deleted
    UNION ALL
    SELECT legacy.id, legacy.status FROM legacy;
    PERFORM set_config('pgtasks.keys_handled', keys_handled, true);
END;
$$;
