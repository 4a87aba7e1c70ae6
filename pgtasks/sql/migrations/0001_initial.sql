-- pgtasks 0001: jobs, workers, the claim index and the enqueue notification.
-- Placeholders: {schema} (quoted identifier) and {channel} (string literal).

CREATE TABLE {schema}.jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_name       text        NOT NULL,
    queue           text        NOT NULL,
    priority        integer     NOT NULL DEFAULT 0,
    args            jsonb       NOT NULL,
    kwargs          jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    run_at          timestamptz NOT NULL DEFAULT now(),
    locked_at       timestamptz,
    locked_by       bigint,
    last_error      text,
    result          jsonb,
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT jobs_status_check
        CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    CONSTRAINT jobs_attempts_check CHECK (attempts >= 0 AND attempts <= max_attempts),
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT jobs_idempotency_key_key UNIQUE (idempotency_key)
) WITH (
    -- Rows change status several times: leave room for HOT updates, vacuum early.
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- Serves the claim: pending jobs in claim order. Finished rows are not in it.
CREATE INDEX jobs_claim_idx ON {schema}.jobs (priority DESC, run_at, id)
    WHERE status = 'pending';

-- Serves the rescuer: running jobs by the worker that holds them.
CREATE INDEX jobs_running_idx ON {schema}.jobs (locked_by)
    WHERE status = 'running';

-- Serves pruning of finished jobs by age.
CREATE INDEX jobs_finished_idx ON {schema}.jobs (finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');

CREATE TABLE {schema}.workers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[],
    concurrency  integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- One notification per inserting statement and queue, carrying the queue name only.
CREATE FUNCTION {schema}.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify({channel}, queues.queue)
    FROM (SELECT DISTINCT queue FROM inserted_jobs
          WHERE status = 'pending' AND run_at <= now()) AS queues;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_jobs_inserted();
