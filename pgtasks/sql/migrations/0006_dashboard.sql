-- pgtasks 0006: what the dashboard (`pgtasks web`) reads to count jobs per queue and
-- status without reading millions of rows per page load.
-- Placeholders: {schema} (quoted identifier).
-- Online: the index is built concurrently (writes go on), then the statistics are declared.

-- Pending jobs by queue, for the exact pending / due / oldest-wait counts per queue: an
-- index-only scan of the pending rows, where the claim index (which has no queue) would
-- have to visit each row's heap page. An enqueue adds one entry to it. A claim does not:
-- the claimed row's new version is running, outside this index's predicate, and
-- finishing a job does not touch it either.
-- The claim must never read it: with a queue filter and stale statistics the planner
-- would walk it and sort (every pending row of the queue) instead of walking
-- jobs_claim_idx in claim order and stopping at the limit. So its predicate has a term
-- no claim states, `attempts >= 0` (always true: jobs_attempts_check), which the
-- dashboard's query repeats to use it.
-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_pending_queue_idx ON {schema}.jobs (queue, run_at)
    WHERE status = 'pending' AND attempts >= 0;

-- pgtasks:step transaction
-- Finished jobs per queue and status are estimated on large tables from the (queue,
-- status) most-common-values list ANALYZE keeps here, times pg_class.reltuples.
-- Extended statistics cost nothing on writes (no index entry, no trigger): only ANALYZE,
-- which autovacuum already runs on this table (analyze scale factor 0.02), computes them.
CREATE STATISTICS {schema}.jobs_queue_status_stats (mcv) ON queue, status FROM {schema}.jobs;
