-- pgtasks 0004: a short history of removed worker registrations, for `pgtasks workers`.
-- Placeholders: {schema} (quoted identifier).
--
-- A worker row is deleted when the worker stops (deregister) or when a rescuer finds
-- it silent past the lease; a worker whose row is gone re-registers under a new id.
-- A trigger copies each deleted row here, whatever deleted it, so operators can see
-- recently stopped and lost workers without changing that rule. The gap between the
-- last heartbeat and removed_at tells a clean stop (short) from a loss (a lease or
-- more). Rows are pruned by the Pruner and `pgtasks prune` after a day.

CREATE TABLE {schema}.worker_history (
    worker_id    bigint      PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[],
    concurrency  integer     NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    removed_at   timestamptz NOT NULL DEFAULT now()
);

-- Serves `pgtasks workers --since` and pruning by age.
CREATE INDEX worker_history_removed_at_idx ON {schema}.worker_history (removed_at);

CREATE FUNCTION {schema}.record_removed_workers() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.worker_history
        (worker_id, hostname, pid, queues, concurrency, started_at, heartbeat_at)
    SELECT id, hostname, pid, queues, concurrency, started_at, heartbeat_at
    FROM removed_workers
    ON CONFLICT (worker_id) DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER workers_record_removed
    AFTER DELETE ON {schema}.workers
    REFERENCING OLD TABLE AS removed_workers
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_removed_workers();
