-- The last jobs each worker ran (the workers page, `pgtasks workers`): an index probe per
-- worker on jobs_history, exact at any history size (before, the newest 5,000 finished
-- jobs were read and the workers' jobs picked from them). jobs_history is partitioned:
-- the migrator builds the index of each partition CONCURRENTLY and attaches it
-- (pgtasks/_store/partition_indexes.py); a new schema gets it in one transaction.

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_history_worker_idx ON {schema}.jobs_history (locked_by, finished_at);
