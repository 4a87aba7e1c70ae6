-- pgtasks migration durable (numbered by its file name): durable steps inside a task,
-- durable sleeps and waits for events (docs/howto/durable.md).
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- * job_steps: a running or waiting job's checkpoints, one row per step reached, keyed by
--   (job id, step name, occurrence of that name) and ordered by position (the n-th step
--   call of the task's code). A row is written only by the attempt that holds the job's
--   lease (the statements of sql/durable.sql lock the job's row under the same condition
--   as the worker's finish). A job's first checkpoint marks its meta
--   'pgtasks.durable'; when such a job enters jobs_history (the worker's finish,
--   move_finished_job), its steps go into the history row's meta ('pgtasks.steps') and
--   leave job_steps (job_steps_taken): they are pruned with the row, by the partition
--   drop that prunes it.
-- * job_events: events (key, JSON payload), written in the emitter's transaction; the
--   pruner deletes them past their retention.
-- * job_waits: the jobs parked waiting for an event of a key, until the wait ends.
--
-- New tables and functions only: one transaction of catalog changes; no lock on jobs or
-- jobs_history, nothing rewritten or scanned.

-- pgtasks:step transaction
CREATE TABLE IF NOT EXISTS {schema}.job_steps (
    job_id      bigint NOT NULL,
    name        text NOT NULL,
    occurrence  integer NOT NULL,
    position    integer NOT NULL,
    -- done, failed, sleep, wait, timeout, version
    status      text NOT NULL,
    result      jsonb,
    error       text,
    attempt     integer NOT NULL,
    worker_id   bigint,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name, occurrence)
);

CREATE TABLE IF NOT EXISTS {schema}.job_events (
    id         bigserial PRIMARY KEY,
    key        text NOT NULL,
    payload    jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS job_events_key_idx ON {schema}.job_events (key, id);

CREATE INDEX IF NOT EXISTS job_events_created_idx ON {schema}.job_events (created_at);

CREATE TABLE IF NOT EXISTS {schema}.job_waits (
    job_id   bigint PRIMARY KEY,
    key      text NOT NULL,
    -- Events of the key after this id end the wait (those consumed by earlier waits
    -- of the same job are not seen again).
    after_id bigint NOT NULL DEFAULT 0,
    deadline timestamptz,
    since    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS job_waits_key_idx ON {schema}.job_waits (key);

-- A durable job entering jobs_history takes its steps along in its meta (its waits end):
-- what the worker's finish and move_finished_job write as the history row's meta.
CREATE OR REPLACE FUNCTION {schema}.job_steps_taken(p_id bigint, p_meta jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    taken jsonb;
BEGIN
    SELECT jsonb_agg(jsonb_build_object(
               'name', steps.name, 'occurrence', steps.occurrence,
               'position', steps.position, 'status', steps.status,
               'result', steps.result, 'error', steps.error,
               'attempt', steps.attempt, 'worker_id', steps.worker_id,
               'started_at', steps.started_at, 'finished_at', steps.finished_at)
           ORDER BY steps.position)
    INTO taken
    FROM {schema}.job_steps AS steps WHERE steps.job_id = p_id;
    DELETE FROM {schema}.job_steps WHERE job_id = p_id;
    DELETE FROM {schema}.job_waits WHERE job_id = p_id;
    RETURN (coalesce(p_meta, jsonb_build_object()) - 'pgtasks.parked')
           || jsonb_build_object('pgtasks.steps',
                                 coalesce(taken, p_meta -> 'pgtasks.steps', jsonb_build_array()));
END;
$$;

-- move_finished_job of migration jobs_history_moves, a durable job's steps taken along.
CREATE OR REPLACE FUNCTION {schema}.move_finished_job() RETURNS trigger
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
        IF NEW.meta ? 'pgtasks.durable' THEN
            NEW.meta := {schema}.job_steps_taken(NEW.id, NEW.meta);
        END IF;
        INSERT INTO {schema}.jobs_history SELECT NEW.*;
    END IF;
    RETURN NULL;
END;
$$;
