-- pgtasks 0012: the idempotency key's unique index holds the jobs that have a key only.
-- Placeholders: {schema} (quoted identifier).
--
-- jobs_idempotency_key_key was a UNIQUE constraint over every row. A job's status
-- changes cannot be HOT updates (status is in the indexes' predicates), so each write
-- of a job (claim, finish, retry) added an entry for its NULL key to that index: one
-- ever-growing run of equal keys, about 15 % of the server's CPU per claimed and
-- finished job. It is now a partial unique index of the same name, over the rows
-- whose key is not NULL. Which keys are unique is unchanged (NULLs never conflicted),
-- and so is the wait of a concurrent insert of the same key. Enqueues arbitrate with
-- ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL, which infers this
-- index (and the former constraint too, so enqueues work at every point in between).
--
-- Online: the new index is built concurrently (reads, writes and claims go on: it reads
-- the table while they run), then one short transaction swaps the names (a catalog
-- change under lock_timeout, retried).

-- pgtasks:step concurrently
CREATE UNIQUE INDEX CONCURRENTLY jobs_idempotency_key_partial ON {schema}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_idempotency_key_key;
ALTER INDEX {schema}.jobs_idempotency_key_partial RENAME TO jobs_idempotency_key_key;
