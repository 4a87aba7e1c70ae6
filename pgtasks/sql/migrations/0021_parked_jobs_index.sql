-- pgtasks migration parked_jobs_index (numbered by its file name): the jobs parked by a
-- durable sleep, a wait for an event or a snooze (migration durable) are counted through
-- an index of their own.
-- Placeholders: {schema} (quoted identifier).
--
-- count_parked_jobs (pgtasks stats, the dashboard, the Prometheus gauges
-- pgtasks_queue_parked_jobs) reads the parked jobs only: a partial index over the pending
-- rows whose meta holds 'pgtasks.parked', by queue and kind. A job that is not parked
-- has no entry (claims, enqueues and finishes of plain jobs never touch it).
--
-- Online: built concurrently (reads, writes and claims go on while it reads the table).

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_parked_idx
    ON {schema}.jobs (queue, ((meta -> 'pgtasks.parked') ->> 'kind'))
    WHERE status = 'pending' AND meta ? 'pgtasks.parked';
