-- pgtasks migration debounce (numbered by its file name): the index that finds a task's
-- pending debounced job by its key (docs/howto/flow-control.md, "Debounce").
-- Placeholders: {schema} (quoted identifier).
--
-- A debounced job carries its key in its meta, under "pgtasks.debounce" (an object: key,
-- first, until, replaced). An enqueue of the same task and key, serialised with the
-- others of that key by a transaction-level advisory lock, looks the job up here while it
-- is pending and has never started (attempts = 0): it replaces its arguments and pushes
-- its run_at instead of adding a job. A job that started (claimed, retried, rescued)
-- leaves the index, so the next enqueue makes a new job. The index is not unique: the
-- lock arbitrates, so no other statement that makes a job pending again (a release, a
-- retry, a woken workflow step) can ever meet a conflict.
-- Only debounced jobs enter it (the predicate names the meta key), so plain jobs write no
-- entry. Online: built concurrently (reads, writes and claims go on).

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_debounce_idx
    ON {schema}.jobs (task_name, (meta -> 'pgtasks.debounce' ->> 'key'))
    WHERE status = 'pending' AND attempts = 0 AND meta ? 'pgtasks.debounce';
