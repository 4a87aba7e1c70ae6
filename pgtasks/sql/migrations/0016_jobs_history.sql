-- pgtasks migration jobs_history (numbered by its file name): finished jobs leave the hot
-- table.
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- A job that ends (done, failed, cancelled) moves out of jobs into jobs_history in the
-- statement that ends it: the worker’s finish is one fenced DELETE … RETURNING whose rows
-- one INSERT writes into jobs_history (a lost lease matches nothing; a racing cancel finds
-- nothing), and every other statement that ends a job (a cancel, a rescue, a workflow’s
-- cascade, an operator’s UPDATE) is moved by jobs_move_finished, a row trigger. jobs keeps
-- the jobs that wait, are due or run: its size follows the backlog, not the history, and
-- the pruner never deletes a row of it.
--
-- * jobs_history has jobs’ columns in jobs’ order. It is partitioned by retention class
--   (done; failed and cancelled) and then by the UTC day the job finished
--   (jobs_history_done_pYYYYMMDD, jobs_history_failed_pYYYYMMDD), each class with a
--   default partition for a day not created yet. The pruner creates the coming days’
--   partitions ahead (moving into a new day what its default partition held of it) and
--   drops a day once the whole day is past the class’s retention (retentions under a day
--   delete the rows past it from the day still kept).
-- * all_jobs (jobs UNION ALL jobs_history) is what reads of a job by id, the workflows’
--   result assembly, `pgtasks jobs`, stats and the dashboard read.
-- * job_keys: the idempotency key and the unique_for window of every job that has one,
--   from its enqueue (a row trigger) until its history is pruned. Its unique indexes make
--   a key exact across both tables: an enqueue of a key whose job finished (and left the
--   jobs’ own unique index) fails on job_keys, and the enqueue answers with that job. A
--   job deleted outright (by hand, or by the pruner of an earlier release) frees its key
--   when its transaction commits (jobs_forget_key, jobs_history_forget_key).
-- * The workflow triggers fire when a row enters jobs_history, and the workflow functions
--   read the jobs that ended through all_jobs.
-- * jobs_restore / jobs_refinish move jobs back for a retry (and again if not retried).
--
-- Online, in three steps: jobs_history, job_keys and the triggers that register the key
-- of each job inserted from then on and forget those of jobs deleted (catalog changes
-- under lock_timeout, retried); the keys of the keyed jobs already in jobs copied in
-- batches of ids (one short transaction each: enqueues and claims go on); then a view,
-- functions and triggers (catalog changes again). Finished jobs already in jobs stay there and age out: the pruner moves
-- them into jobs_history in batches (rows of an old day go to the default partition of
-- their class and are deleted when past retention).

-- pgtasks:step transaction
CREATE TABLE {schema}.jobs_history (LIKE {schema}.jobs INCLUDING DEFAULTS)
    PARTITION BY LIST (status);

CREATE TABLE {schema}.jobs_history_done PARTITION OF {schema}.jobs_history
    FOR VALUES IN ('done') PARTITION BY RANGE (finished_at);

CREATE TABLE {schema}.jobs_history_failed PARTITION OF {schema}.jobs_history
    FOR VALUES IN ('failed', 'cancelled') PARTITION BY RANGE (finished_at);

CREATE TABLE {schema}.jobs_history_done_default PARTITION OF {schema}.jobs_history_done
    DEFAULT;

CREATE TABLE {schema}.jobs_history_failed_default PARTITION OF {schema}.jobs_history_failed
    DEFAULT;

-- Indexes of the (still empty) partitioned table, created on every partition.
CREATE INDEX jobs_history_id_idx ON {schema}.jobs_history (id);

CREATE INDEX jobs_history_finished_idx ON {schema}.jobs_history (finished_at);

CREATE INDEX jobs_history_workflow_idx ON {schema}.jobs_history (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- The keyed jobs of a partition, for pruning job_keys in step with it.
CREATE INDEX jobs_history_keyed_idx ON {schema}.jobs_history (id)
    WHERE idempotency_key IS NOT NULL OR unique_window IS NOT NULL;

CREATE TABLE {schema}.job_keys (
    job_id          bigint PRIMARY KEY,
    idempotency_key text,
    unique_key      text,
    unique_window   tstzrange
);

CREATE UNIQUE INDEX job_keys_idempotency_key ON {schema}.job_keys (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE UNIQUE INDEX job_keys_unique_window ON {schema}.job_keys (unique_key, unique_window)
    WHERE unique_window IS NOT NULL;

-- Register the key of a job inserted into jobs. Enqueues answer a key registered here
-- before they insert; a key registered meanwhile by another job (one that finished while
-- this insert waited for it to leave jobs’ own unique index) is a unique violation named
-- as jobs’ index would name it (a one-job enqueue of its own tries once more and is then
-- answered with that job; in a caller’s transaction the error stands, and nothing is
-- duplicated). A job moved back by jobs_restore finds its own row.
CREATE FUNCTION {schema}.register_job_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.job_keys (job_id, idempotency_key, unique_key, unique_window)
    VALUES (NEW.id, NEW.idempotency_key, NEW.unique_key, NEW.unique_window)
    ON CONFLICT DO NOTHING;
    IF FOUND OR EXISTS (SELECT 1 FROM {schema}.job_keys WHERE job_id = NEW.id) THEN
        RETURN NULL;
    END IF;
    IF NEW.idempotency_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM {schema}.job_keys WHERE idempotency_key = NEW.idempotency_key
    ) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "jobs_idempotency_key_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_idempotency_key_key',
                  DETAIL = format('Key (idempotency_key)=(%s) belongs to a job that finished.',
                                  NEW.idempotency_key);
    END IF;
    RAISE EXCEPTION 'duplicate key value violates unique constraint "jobs_unique_window_idx"'
        USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_unique_window_idx',
              DETAIL = format('Key (unique_key, unique_window)=(%s, %s) belongs to a job'
                              ' that finished.', NEW.unique_key, NEW.unique_window);
END;
$$;

CREATE TRIGGER jobs_register_key
    AFTER INSERT ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.idempotency_key IS NOT NULL OR NEW.unique_window IS NOT NULL)
    EXECUTE FUNCTION {schema}.register_job_key();

-- Forget the key of a job deleted outright (by hand, or by the pruner of an earlier
-- release): a key is taken as long as its job exists. pgtasks’ own statements that move
-- jobs between the two tables (the key stays) or delete them with their keys set
-- pgtasks.keys_handled, so no event is queued for their rows. Deferred to the commit: a
-- job deleted by another statement but moved in the same transaction is found where it
-- went, and keeps its key.
CREATE FUNCTION {schema}.forget_job_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE id = OLD.id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_history WHERE id = OLD.id) THEN
        DELETE FROM {schema}.job_keys WHERE job_id = OLD.id;
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER jobs_forget_key
    AFTER DELETE ON {schema}.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.idempotency_key IS NOT NULL OR OLD.unique_window IS NOT NULL)
          AND current_setting('pgtasks.keys_handled', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.forget_job_key();

CREATE CONSTRAINT TRIGGER jobs_history_forget_key
    AFTER DELETE ON {schema}.jobs_history
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.idempotency_key IS NOT NULL OR OLD.unique_window IS NOT NULL)
          AND current_setting('pgtasks.keys_handled', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.forget_job_key();

-- pgtasks:step batched table=jobs size=10000
-- Keyed jobs already in jobs, a batch of ids at a time (jobs inserted since the step
-- above registered their own keys; a key copied twice is kept once). Finished ones among
-- them keep their key until they are pruned.
INSERT INTO {schema}.job_keys (job_id, idempotency_key, unique_key, unique_window)
SELECT id, idempotency_key, unique_key, unique_window
FROM {schema}.jobs
WHERE id >= %(start)s AND id < %(stop)s
  AND (idempotency_key IS NOT NULL OR unique_window IS NOT NULL)
ON CONFLICT DO NOTHING;

-- pgtasks:step transaction
-- The view over both tables, and the statements that move jobs into the history and back.
CREATE VIEW {schema}.all_jobs AS
    SELECT * FROM {schema}.jobs
    UNION ALL
    SELECT * FROM {schema}.jobs_history;

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

-- The first missing day partition of jobs_history from the day of ``first_day`` to
-- ``days`` days after it (done, then failed); rows of its day held by the default
-- partition move into it. A partition is attached (SHARE UPDATE EXCLUSIVE on the class’s
-- table: finishes go on; ACCESS EXCLUSIVE on its default partition while it is checked).
-- Returns the partition created (no row: none was missing).
CREATE FUNCTION {schema}.jobs_history_create_days(first_day timestamptz, days integer)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    class text;
    the_day date;
    name text;
    lower_bound timestamptz;
    upper_bound timestamptz;
    keys_handled text;
BEGIN
    FOREACH class IN ARRAY ARRAY['done', 'failed'] LOOP
        FOR offset_days IN 0 .. days LOOP
            the_day := (first_day AT TIME ZONE 'UTC')::date + offset_days;
            name := format('jobs_history_%s_p%s', class, to_char(the_day, 'YYYYMMDD'));
            CONTINUE WHEN to_regclass('{schema}.' || quote_ident(name)) IS NOT NULL;
            lower_bound := the_day::timestamp AT TIME ZONE 'UTC';
            upper_bound := (the_day + 1)::timestamp AT TIME ZONE 'UTC';
            EXECUTE format('CREATE TABLE {schema}.%I (LIKE {schema}.jobs_history'
                           ' INCLUDING DEFAULTS)', name);
            -- The constraint the partition bound implies: ATTACH then skips its scan.
            EXECUTE format('ALTER TABLE {schema}.%I ADD CONSTRAINT %I CHECK (finished_at'
                           ' IS NOT NULL AND finished_at >= %L AND finished_at < %L)',
                           name, name || '_bound', lower_bound, upper_bound);
            keys_handled := coalesce(current_setting('pgtasks.keys_handled', true), 'off');
            PERFORM set_config('pgtasks.keys_handled', 'on', true);
            EXECUTE format('WITH moved AS (DELETE FROM {schema}.%I WHERE finished_at >= %L'
                           ' AND finished_at < %L RETURNING *) INSERT INTO {schema}.%I'
                           ' SELECT * FROM moved',
                           'jobs_history_' || class || '_default', lower_bound, upper_bound,
                           name);
            PERFORM set_config('pgtasks.keys_handled', keys_handled, true);
            EXECUTE format('ALTER TABLE {schema}.%I ATTACH PARTITION {schema}.%I'
                           ' FOR VALUES FROM (%L) TO (%L)',
                           'jobs_history_' || class, name, lower_bound, upper_bound);
            EXECUTE format('ALTER TABLE {schema}.%I DROP CONSTRAINT %I',
                           name, name || '_bound');
            RETURN NEXT name;
            -- One partition a transaction: the caller holds one default partition’s
            -- ACCESS EXCLUSIVE lock at a time (and so never waits in a cycle).
            RETURN;
        END LOOP;
    END LOOP;
END;
$$;

-- The day partitions of ``class`` whose whole day ended before ``cutoff``, oldest first:
-- the ones the pruner drops.
CREATE FUNCTION {schema}.jobs_history_expired_days(class text, cutoff timestamptz)
RETURNS TABLE (partition_name text, partition_day date)
LANGUAGE sql STABLE AS $$
    SELECT partitions.relname::text,
           to_date(right(partitions.relname, 8), 'YYYYMMDD')
    FROM pg_inherits
    JOIN pg_class AS partitions ON partitions.oid = pg_inherits.inhrelid
    WHERE pg_inherits.inhparent = to_regclass('{schema}.' || quote_ident('jobs_history_' || class))
      AND partitions.relname ~ '_p[0-9]+$'
      AND (to_date(right(partitions.relname, 8), 'YYYYMMDD') + 1)::timestamp
          AT TIME ZONE 'UTC' <= cutoff
    ORDER BY 2;
$$;

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

-- The workflow triggers fire as a job enters jobs_history (every job that ends does),
-- except for the rows the pruner moves there from jobs (pgtasks.archiving): those ended
-- before, and their workflows moved on then.
DROP TRIGGER jobs_workflow_job_ended ON {schema}.jobs;

DROP TRIGGER jobs_workflow_jobs_ended ON {schema}.jobs;

CREATE TRIGGER jobs_history_workflow_job_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL
          AND current_setting('pgtasks.archiving', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.workflow_job_ended();

CREATE TRIGGER jobs_history_workflow_jobs_ended
    AFTER INSERT ON {schema}.jobs_history
    FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.workflow_jobs_ended();

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

CREATE STATISTICS {schema}.jobs_history_queue_status_stats (mcv) ON queue, status
    FROM {schema}.jobs_history;

-- Drop the day partition ``partition_name`` of ``class`` (expired: the pruner checked).
-- Rows of workflows that still have unfinished jobs stay (a chord’s callback reads its
-- members’ results): they move to the class’s default partition, pruned row by row
-- later. Run by the pruner in a short transaction of its own under lock_timeout: the
-- detach takes ACCESS EXCLUSIVE on the class’s table for a catalog change. The keys the
-- dropped rows held were deleted before (jobs_history_forget_day_keys).
CREATE FUNCTION {schema}.jobs_history_drop_day(class text, partition_name text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    kept bigint;
BEGIN
    EXECUTE format('ALTER TABLE {schema}.%I DETACH PARTITION {schema}.%I',
                   'jobs_history_' || class, partition_name);
    PERFORM set_config('pgtasks.archiving', 'on', true);
    EXECUTE format('INSERT INTO {schema}.%I SELECT * FROM {schema}.%I AS day'
                   ' WHERE day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                   ' FROM {schema}.jobs AS other WHERE other.workflow_id = day.workflow_id'
                   ' AND other.status IN (''waiting'', ''pending'', ''running''))',
                   'jobs_history_' || class, partition_name);
    GET DIAGNOSTICS kept = ROW_COUNT;
    PERFORM set_config('pgtasks.archiving', 'off', true);
    EXECUTE format('DROP TABLE {schema}.%I', partition_name);
    RETURN kept;
END;
$$;

-- Before a day partition is dropped: its jobs by status and the keys they held deleted
-- (through jobs_history_keyed_idx), but for the rows of unfinished workflows (kept).
CREATE FUNCTION {schema}.jobs_history_forget_day_keys(partition_name text)
RETURNS TABLE (status text, jobs bigint)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM {schema}.job_keys AS keys USING {schema}.%I AS day'
                   ' WHERE keys.job_id = day.id'
                   ' AND (day.idempotency_key IS NOT NULL OR day.unique_window IS NOT NULL)'
                   ' AND NOT (day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                   ' FROM {schema}.jobs AS other WHERE other.workflow_id = day.workflow_id'
                   ' AND other.status IN (''waiting'', ''pending'', ''running'')))',
                   partition_name);
    RETURN QUERY EXECUTE format('SELECT day.status, count(*) FROM {schema}.%I AS day'
                                ' WHERE NOT (day.workflow_id IS NOT NULL AND EXISTS (SELECT 1'
                                ' FROM {schema}.jobs AS other'
                                ' WHERE other.workflow_id = day.workflow_id AND other.status'
                                ' IN (''waiting'', ''pending'', ''running'')))'
                                ' GROUP BY day.status', partition_name);
END;
$$;
