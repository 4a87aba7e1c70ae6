-- pgtasks migration durable (numbered by its file name): durable steps inside a task,
-- durable sleeps and waits for events (docs/howto/durable.md).
-- Placeholders: {schema} (quoted identifier), {channel} and {done_channel} (literals).
--
-- * job_steps: a running or waiting job's checkpoints, one row per step reached, keyed by
--   (job id, step name, occurrence of that name) and ordered by position (the n-th step
--   call of the task's code). A row is written only by the attempt that holds the job's
--   lease (the statements of sql/durable.sql lock the job's row under the same condition
--   as the worker's finish). A job's first checkpoint marks its meta
--   'pgtasks.durable'; when such a job enters jobs_history, its steps go into the history
--   row's meta ('pgtasks.steps') and leave job_steps (jobs_history_take_steps): they are
--   pruned with the row, by the partition drop that prunes it.
-- * job_events: events (key, JSON payload), written in the emitter's transaction; the
--   pruner deletes them past their retention.
-- * job_waits: the jobs parked waiting for an event of a key, until the wait ends.
--
-- New tables, a function and a trigger on jobs_history only: one transaction of catalog
-- changes; nothing on jobs is rewritten or scanned.

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

-- A durable job entering jobs_history takes its steps along in its meta; its waits end.
CREATE OR REPLACE FUNCTION {schema}.jobs_history_take_steps() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.meta := coalesce(NEW.meta, jsonb_build_object()) || jsonb_build_object('pgtasks.steps', coalesce(
        (SELECT jsonb_agg(jsonb_build_object(
                    'name', steps.name, 'occurrence', steps.occurrence,
                    'position', steps.position, 'status', steps.status,
                    'result', steps.result, 'error', steps.error,
                    'attempt', steps.attempt, 'worker_id', steps.worker_id,
                    'started_at', steps.started_at, 'finished_at', steps.finished_at)
                ORDER BY steps.position)
         FROM {schema}.job_steps AS steps WHERE steps.job_id = NEW.id),
        NEW.meta -> 'pgtasks.steps', '[]'::jsonb));
    NEW.meta := NEW.meta - 'pgtasks.parked';
    DELETE FROM {schema}.job_steps WHERE job_id = NEW.id;
    DELETE FROM {schema}.job_waits WHERE job_id = NEW.id;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS jobs_history_take_steps ON {schema}.jobs_history;

CREATE TRIGGER jobs_history_take_steps
    BEFORE INSERT ON {schema}.jobs_history
    FOR EACH ROW
    WHEN (NEW.meta ? 'pgtasks.durable')
    EXECUTE FUNCTION {schema}.jobs_history_take_steps();
