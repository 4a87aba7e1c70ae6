-- pgtasks 0010: uniqueness scopes besides the key-for-life idempotency key.
-- Placeholders: {schema} (quoted identifier).
--
-- A job enqueued with unique_while="active" or unique_for=<period> carries its key in
-- unique_key (idempotency_key stays the key for life; beat's tick key, for instance):
--   * unique while active: unique_window is NULL, and jobs_unique_active_idx admits one
--     pending or running job per key. A job that finishes leaves the index (its status
--     no longer matches the predicate), so the key is free again; a retry of the same
--     job (running -> pending) keeps it.
--   * unique for a period: unique_window is the window of the database's clock, aligned
--     to the epoch, that the job was enqueued in ([start, start + period)), and
--     jobs_unique_window_idx admits one job per key and window, whatever its status.
-- Enqueues arbitrate with ON CONFLICT on these indexes (the exact predicates below), so
-- concurrent enqueues of one key are race-free. Jobs without a scope have NULL in both
-- columns and never enter either index; adding nullable columns rewrites nothing.
-- Online: the check is added NOT VALID and validated in a step of its own, and each index
-- is built concurrently (writes go on meanwhile).

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs
    ADD COLUMN unique_key    text,
    ADD COLUMN unique_window tstzrange,
    ADD CONSTRAINT jobs_unique_window_check
        CHECK (unique_window IS NULL OR (unique_key IS NOT NULL AND NOT isempty(unique_window)))
        NOT VALID;

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_unique_window_check;

-- pgtasks:step concurrently
CREATE UNIQUE INDEX CONCURRENTLY jobs_unique_active_idx ON {schema}.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND unique_window IS NULL
      AND status IN ('pending', 'running');

-- pgtasks:step concurrently
CREATE UNIQUE INDEX CONCURRENTLY jobs_unique_window_idx ON {schema}.jobs (unique_key, unique_window)
    WHERE unique_window IS NOT NULL;
