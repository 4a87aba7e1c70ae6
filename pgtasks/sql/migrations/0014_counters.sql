-- pgtasks 0014: counters of how often the guarantees were exercised.
-- Placeholders: {schema} (quoted identifier).
--
-- How many attempts lost their lease, jobs were rescued from dead workers, fenced
-- writes were refused, enqueues were answered by an existing job, jobs were released
-- at shutdown and jobs of unknown tasks were seen, since the schema was created
-- (docs/howto/metrics.md). Every count is a row added, never a row updated: writers
-- never wait for each other (an enqueue answered by an existing job is counted in the
-- enqueuer's transaction, which must not hold a lock another enqueue waits for).
-- Readers sum the rows of a name; the pruner folds them into one row per name now and
-- then. Workers add their counts with their heartbeat, the rescue statement its own.

CREATE TABLE {schema}.counters (
    name  text   NOT NULL,
    value bigint NOT NULL
);

-- An enqueue answered by an existing job: every enqueue statement that arbitrates on a
-- key answers a conflict with DO UPDATE SET <that key> = EXCLUDED.<that key> (the same
-- value), which fires this trigger for that row only; an enqueue without a conflict
-- does not. Counted in the enqueue's transaction: a rollback takes the count back.
CREATE FUNCTION {schema}.count_deduplicated_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.counters (name, value) VALUES ('enqueues_deduplicated', 1);
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_count_deduplicated
    AFTER UPDATE OF idempotency_key, unique_key ON {schema}.jobs
    FOR EACH ROW
    WHEN (OLD.idempotency_key IS NOT DISTINCT FROM NEW.idempotency_key
          AND OLD.unique_key IS NOT DISTINCT FROM NEW.unique_key)
    EXECUTE FUNCTION {schema}.count_deduplicated_enqueue();
