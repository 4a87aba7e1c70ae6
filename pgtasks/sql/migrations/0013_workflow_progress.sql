-- pgtasks 0013: workflows that never stall (migration workflow_progress).
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- Migration 0011's trigger moved a workflow on row by row, in the order the ending
-- statement happened to update its rows, and turned any error of that work into a
-- server log WARNING: a lock timeout, a serialization failure or a deadlock on a chord's
-- callback dropped the decrement for good and the callback waited forever. Now:
--
-- * The row trigger only notes which workflow jobs ended (in the transaction-local
--   setting pgtasks.workflow_ended); a statement trigger then moves all of them on at
--   once. Before it changes anything it locks every step it may change (the successors of
--   the jobs that ended done, every step downstream of those that failed or were
--   cancelled) in one global order, by job id, then the workflows rows it may change, by
--   id. Whatever the nesting of chords and chains, two transactions never wait for each
--   other's steps in a cycle.
-- * Errors propagate: a lock timeout, a serialization failure, a deadlock (and anything
--   else) fails the write that ended the job, which its writer retries (a worker writes
--   the same outcomes again). Only the errors a hand-edited row can cause (data,
--   integrity, cardinality, program limits) are tolerated: the write that ended the job
--   stands, each job that ended is moved on alone so that the others proceed, and every
--   job whose move failed is recorded in workflow_incidents, where `pgtasks doctor` and
--   the dashboard read it. Such a step is left waiting for the healing pass.
-- * waiting_for counts the predecessors not done yet. Each finisher decrements it under
--   the step's row lock (the write that serialises concurrent finishers: the last one
--   sees the others' results); the one that takes it to 0 starts the step, once the
--   rows of all its predecessors say done (else it is recounted: a hand-edited row).
--   It is at least 1 while the step waits, and 0 once the step has started with its
--   input (workflow_input: the one assembly of results). A cancelled step with
--   waiting_for > 0 and predecessors never received its input (workflow_retry_step).
-- * workflow_heal_step(id): the healing pass (a worker's Healer, `pgtasks workflows
--   heal`) moves on a waiting step whose predecessors have all finished: it starts it
--   with the same input assembly (workflow_input), or cancels it when a predecessor
--   failed, was cancelled or is gone; each heal is recorded as an incident.
-- * workflows.shape: the workflow as built (`pgtasks workflows list`).
--
-- Online: the index of unfinished workflow jobs is built concurrently (reads, writes and
-- claims go on), then one transaction adds the rest (catalog changes under lock_timeout,
-- retried; no scan of jobs).

-- pgtasks:step concurrently
-- The unfinished jobs of workflows: which workflows run (`pgtasks workflows list
-- --status running`), whether a workflow still needs a job (delete, prune).
CREATE INDEX CONCURRENTLY jobs_workflow_unfinished_idx ON {schema}.jobs (workflow_id)
    WHERE workflow_id IS NOT NULL AND status IN ('waiting', 'pending', 'running');

-- pgtasks:step transaction
CREATE TABLE {schema}.workflow_incidents (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- tolerated: moving on after job_id ended failed (a hand-edited row, say);
    -- healed: the healing pass moved job_id (a stuck step) on;
    -- unhealable: the healing pass could not move job_id on.
    kind         text        NOT NULL,
    workflow_id  bigint,
    job_id       bigint      NOT NULL,
    step         text,
    detail       text        NOT NULL,
    sqlstate     text,
    occurrences  integer     NOT NULL DEFAULT 1,
    first_at     timestamptz NOT NULL DEFAULT now(),
    last_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_incidents_kind_check CHECK (kind IN ('tolerated', 'healed', 'unhealable')),
    CONSTRAINT workflow_incidents_job_kind_key UNIQUE (job_id, kind)
);
CREATE INDEX workflow_incidents_last_at_idx ON {schema}.workflow_incidents (last_at);

ALTER TABLE {schema}.workflows ADD COLUMN shape text;

-- Record (or count again) an incident of a job of a workflow.
CREATE FUNCTION {schema}.workflow_incident(
    p_kind text, p_job_id bigint, p_detail text, p_sqlstate text
) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO {schema}.workflow_incidents AS incidents
        (kind, workflow_id, job_id, step, detail, sqlstate)
    SELECT p_kind, jobs.workflow_id, p_job_id, jobs.workflow_step, p_detail, p_sqlstate
    FROM (SELECT p_job_id AS id) AS wanted
    LEFT JOIN {schema}.jobs AS jobs ON jobs.id = wanted.id
    ON CONFLICT (job_id, kind) DO UPDATE
    SET occurrences = incidents.occurrences + 1, last_at = now(),
        detail = excluded.detail, sqlstate = excluded.sqlstate,
        workflow_id = coalesce(excluded.workflow_id, incidents.workflow_id),
        step = coalesce(excluded.step, incidents.step);
$$;

-- The steps that moving on after ``ended`` may change: the successors of those done,
-- and every step downstream of those failed or cancelled.
CREATE FUNCTION {schema}.workflow_targets(ended bigint[]) RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE origins AS (
        SELECT jobs.status, jobs.next_ids
        FROM {schema}.jobs AS jobs
        WHERE jobs.id = ANY(ended) AND jobs.next_ids IS NOT NULL
    ), downstream(id) AS (
        SELECT unnest(origins.next_ids) FROM origins WHERE origins.status <> 'done'
        UNION
        SELECT unnest(jobs.next_ids)
        FROM {schema}.jobs AS jobs
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
CREATE FUNCTION {schema}.workflow_lock_targets(ended bigint[]) RETURNS void
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
    WHERE workflows.id IN (SELECT jobs.workflow_id FROM {schema}.jobs AS jobs
                           WHERE jobs.id = ANY(ended) AND jobs.status = 'failed')
      AND workflows.on_error IS NOT NULL
      AND workflows.error_job_id IS NULL
    ORDER BY workflows.id
    FOR UPDATE OF workflows;
END;
$$;

-- A step's input, from its predecessors' rows (input_mode 'one': the predecessor's
-- result; 'list': the predecessors' results in order; NULL: nothing). The one assembly
-- of results, used wherever a step starts (the trigger, the healing pass, a retry).
CREATE FUNCTION {schema}.workflow_input(p_prev_ids bigint[], p_input_mode text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE p_input_mode
               WHEN 'one' THEN jsonb_build_array((jsonb_agg(jobs.result ORDER BY p.ord)) -> 0)
               WHEN 'list' THEN jsonb_build_array(coalesce(jsonb_agg(jobs.result ORDER BY p.ord),
                                                           '[]'::jsonb))
               ELSE '[]'::jsonb END
    FROM unnest(p_prev_ids) WITH ORDINALITY AS p(id, ord)
    LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id;
$$;

-- Start the waiting steps ``p_ids`` (their row locks held by the caller) whose
-- predecessors' rows all say done: pending, due now, their input prepended to args,
-- waiting_for 0; their queues are notified. A step whose counter reached 0 although a
-- predecessor is unfinished (a hand-edited row) gets its counter recounted instead. A
-- statement of its own: under READ COMMITTED its snapshot sees every predecessor that
-- committed before its decrement released the step's row lock.
CREATE FUNCTION {schema}.workflow_start_ready(p_ids bigint[]) RETURNS void
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
            LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id
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
CREATE FUNCTION {schema}.workflow_start(step_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    preds record;
BEGIN
    SELECT coalesce(bool_or(jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')), false)
               AS blocked
    INTO preds
    FROM {schema}.jobs AS steps
    CROSS JOIN LATERAL unnest(steps.prev_ids) AS p(id)
    LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id
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
CREATE FUNCTION {schema}.workflow_cancel_downstream(origin bigint, reason text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ended bigint[];
BEGIN
    PERFORM set_config('pgtasks.workflow_cascade', 'on', true);
    WITH RECURSIVE downstream(id) AS (
        SELECT unnest(jobs.next_ids) FROM {schema}.jobs AS jobs WHERE jobs.id = origin
        UNION
        SELECT unnest(jobs.next_ids)
        FROM {schema}.jobs AS jobs JOIN downstream ON jobs.id = downstream.id
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
CREATE FUNCTION {schema}.workflow_abort_reason(origin bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('WorkflowAborted: step %s of workflow %s (task %s, job %s) ended %s;'
                  ' this step was not run',
                  jobs.workflow_step, jobs.workflow_id, jobs.task_name, jobs.id, jobs.status)
    FROM {schema}.jobs AS jobs WHERE jobs.id = origin;
$$;

-- The workflow's on_error job, once per workflow, after ``failed_id`` failed for good.
CREATE FUNCTION {schema}.workflow_start_on_error(failed_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    failed record;
    spec jsonb;
    error_job bigint;
BEGIN
    SELECT jobs.id, jobs.workflow_id, jobs.workflow_step, jobs.task_name, jobs.status,
           jobs.last_error
    INTO failed
    FROM {schema}.jobs AS jobs WHERE jobs.id = failed_id;
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
CREATE FUNCTION {schema}.workflow_move_on(ended bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    origin record;
    due bigint[];
BEGIN
    -- Failed or cancelled: the steps after them will not run, and say why.
    FOR origin IN
        SELECT jobs.id, jobs.status
        FROM {schema}.jobs AS jobs
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
        FROM {schema}.jobs AS jobs, unnest(jobs.next_ids) AS following(id)
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

-- Row trigger: note a workflow job that ended (a transaction-local list of ids). Jobs
-- with nothing after them (a group member, a last step: done or cancelled) and jobs
-- cancelled by a cascade are not noted.
CREATE OR REPLACE FUNCTION {schema}.workflow_job_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text;
BEGIN
    IF (NEW.next_ids IS NULL AND NEW.status <> 'failed')
       OR (NEW.status <> 'done'
           AND current_setting('pgtasks.workflow_cascade', true) = 'on') THEN
        RETURN NULL;
    END IF;
    noted := current_setting('pgtasks.workflow_ended', true);
    PERFORM set_config('pgtasks.workflow_ended',
                       CASE WHEN noted IS NULL OR noted = '' THEN NEW.id::text
                            ELSE noted || ',' || NEW.id END,
                       true);
    RETURN NULL;
END;
$$;

-- Statement trigger: move on after every job the statement ended (noted above).
CREATE FUNCTION {schema}.workflow_jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text := current_setting('pgtasks.workflow_ended', true);
    ended bigint[];
    one bigint;
BEGIN
    IF noted IS NULL OR noted = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgtasks.workflow_ended', '', true);
    ended := string_to_array(noted, ',')::bigint[];
    PERFORM {schema}.workflow_lock_targets(ended);
    BEGIN
        PERFORM {schema}.workflow_move_on(ended);
    EXCEPTION
        WHEN data_exception OR integrity_constraint_violation OR cardinality_violation
             OR program_limit_exceeded THEN
            -- A hand-edited row: move each job on alone, so that the others proceed.
            FOREACH one IN ARRAY ended LOOP
                BEGIN
                    PERFORM {schema}.workflow_move_on(ARRAY[one]);
                EXCEPTION
                    WHEN data_exception OR integrity_constraint_violation
                         OR cardinality_violation OR program_limit_exceeded THEN
                        PERFORM {schema}.workflow_incident(
                            'tolerated', one,
                            format('the workflow could not move on after job %s ended: %s',
                                   one, SQLERRM),
                            SQLSTATE);
                END;
            END LOOP;
    END;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_workflow_jobs_ended
    AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.workflow_jobs_ended();

-- The healing pass for one step: a waiting step whose predecessors have all finished
-- (or one failed, was cancelled or is gone) is moved on, exactly once (under its row
-- lock; a step another session holds is skipped). Returns 'started' or 'cancelled'
-- (recorded as healed), 'unhealable' (recorded), 'waiting' or 'skipped'.
CREATE FUNCTION {schema}.workflow_heal_step(step_id bigint) RETURNS text
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
            LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id
            WHERE jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')
            ORDER BY p.ord
            LIMIT 1;
            reason := CASE WHEN blocker.gone
                THEN format('WorkflowAborted: job %s, a predecessor of this step of workflow'
                            ' %s, no longer exists; this step was not run',
                            blocker.id, step.workflow_id)
                ELSE {schema}.workflow_abort_reason(blocker.id) END;
            -- Not a cascade: this step's own trigger cancels the steps after it.
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
CREATE FUNCTION {schema}.workflow_retry_step(step_id bigint)
RETURNS TABLE (outcome text, detail text, queue text)
LANGUAGE plpgsql AS $$
DECLARE
    step record;
    blocker record;
    unfinished integer;
BEGIN
    -- The predecessors' rows first (a share lock, in id order: they precede the step), so
    -- that a predecessor cannot end unseen meanwhile: its finish waits for this retry and
    -- then finds the step waiting, or this retry waits for it and then finds it ended.
    PERFORM 1
    FROM {schema}.jobs AS jobs
    WHERE jobs.id IN (SELECT unnest(steps.prev_ids) FROM {schema}.jobs AS steps
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
        RETURN QUERY SELECT 'not_applicable'::text, NULL::text, step.queue;
        RETURN;
    END IF;
    SELECT p.id, jobs.id IS NULL AS gone, jobs.status, jobs.workflow_step, jobs.task_name
    INTO blocker
    FROM unnest(step.prev_ids) WITH ORDINALITY AS p(id, ord)
    LEFT JOIN {schema}.jobs AS jobs ON jobs.id = p.id
    WHERE jobs.id IS NULL OR jobs.status IN ('failed', 'cancelled')
    ORDER BY p.ord
    LIMIT 1;
    IF FOUND THEN
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
    JOIN {schema}.jobs AS jobs ON jobs.id = p.id
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
