-- Queries of `pgtasks doctor`: read-only facts about the server and the schema's tables.

-- name: get_oldest_snapshot :one
-- The session whose snapshot (backend_xmin) is oldest, pinning the xmin horizon.
SELECT pid, application_name, state, backend_xmin::text AS backend_xmin,
       age(backend_xmin) AS xid_age,
       extract(epoch FROM clock_timestamp() - xact_start) AS transaction_seconds,
       left(query, 200) AS query
FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY age(backend_xmin) DESC
LIMIT 1;

-- name: get_replication_slots :many
-- Replication slots and how far back they hold the xmin horizon (in transactions).
SELECT slot_name, active, age(xmin) AS xmin_age, age(catalog_xmin) AS catalog_xmin_age
FROM pg_replication_slots
ORDER BY greatest(age(xmin), age(catalog_xmin)) DESC NULLS LAST;

-- name: get_prepared_transactions :many
-- Prepared (two-phase) transactions, which pin the xmin horizon until resolved.
SELECT gid, database, extract(epoch FROM clock_timestamp() - prepared) AS seconds
FROM pg_prepared_xacts
ORDER BY prepared;

-- name: get_table_health :many
-- Live and dead tuples and the last (auto)vacuum of the schema's tables.
SELECT relname AS table_name, n_live_tup AS live, n_dead_tup AS dead,
       extract(epoch FROM clock_timestamp() - greatest(last_vacuum, last_autovacuum))
           AS seconds_since_vacuum,
       pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables
WHERE schemaname = %(schema)s
ORDER BY relname;

-- name: get_index_sizes :many
-- Size of each index of the jobs table with the number of rows it should hold.
SELECT indexes.indexrelname AS index_name,
       pg_relation_size(indexes.indexrelid) AS bytes,
       CASE indexes.indexrelname
           WHEN 'jobs_claim_idx' THEN (SELECT count(*) FROM {schema}.jobs WHERE status = 'pending')
           WHEN 'jobs_running_idx' THEN (SELECT count(*) FROM {schema}.jobs WHERE status = 'running')
           WHEN 'jobs_finished_idx' THEN (SELECT count(*) FROM {schema}.jobs
                                          WHERE status IN ('done', 'failed', 'cancelled'))
           WHEN 'jobs_idempotency_key_key' THEN (SELECT count(*) FROM {schema}.jobs
                                                 WHERE idempotency_key IS NOT NULL)
           WHEN 'jobs_workflow_idx' THEN (SELECT count(*) FROM {schema}.jobs
                                          WHERE workflow_id IS NOT NULL)
           WHEN 'jobs_waiting_idx' THEN (SELECT count(*) FROM {schema}.jobs
                                         WHERE status = 'waiting')
           ELSE (SELECT count(*) FROM {schema}.jobs)
       END AS entries
FROM pg_stat_user_indexes AS indexes
WHERE indexes.schemaname = %(schema)s AND indexes.relname = 'jobs'
ORDER BY indexes.indexrelname;

-- name: get_stuck_jobs :one
-- Running jobs whose worker is gone or silent past the lease, and the oldest such lease.
SELECT count(*) AS jobs,
       extract(epoch FROM clock_timestamp() - min(jobs.locked_at)) AS oldest_seconds
FROM {schema}.jobs AS jobs
LEFT JOIN {schema}.workers AS workers ON workers.id = jobs.locked_by
WHERE jobs.status = 'running'
  AND (workers.id IS NULL
       OR workers.heartbeat_at < now() - make_interval(secs => %(lease_timeout)s));

-- name: get_backlog :one
-- Due pending jobs and how long the oldest has waited.
SELECT count(*) AS jobs, extract(epoch FROM clock_timestamp() - min(run_at)) AS oldest_seconds
FROM {schema}.jobs
WHERE status = 'pending' AND run_at <= now();

-- name: get_exhausted_pending_jobs :one
-- Pending jobs with no attempt left (attempts = max_attempts), as an operator's
-- UPDATE … SET status = 'pending' leaves them; a claim gives each one more attempt.
SELECT count(*) AS jobs, min(id) AS first_id
FROM {schema}.jobs
WHERE status = 'pending' AND attempts >= max_attempts;

-- name: get_connection_usage :one
-- Connections in use against max_connections (superuser-reserved slots excluded).
SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS used,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved;

-- name: get_session_defaults :one
-- Settings a pgtasks session starts with (through a pooler: those of its server connections).
SELECT current_setting('default_transaction_isolation') AS isolation,
       current_setting('server_version') AS server_version;

-- name: get_wal_position :one
-- The primary's current WAL position (NULL on a standby), to measure a replica's lag.
SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END AS lsn;

-- name: get_replica_state :one
-- On the replica: whether it is a standby, how far its replay is behind the given primary
-- position, how old the last transaction it replayed is, and its conflict settings.
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN pg_is_in_recovery() AND %(primary_lsn)s::text IS NOT NULL
            THEN greatest(0, pg_wal_lsn_diff(%(primary_lsn)s::pg_lsn,
                                             pg_last_wal_replay_lsn()))::bigint
       END AS behind_bytes,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS replay_age,
       current_setting('hot_standby_feedback') AS hot_standby_feedback,
       current_setting('max_standby_streaming_delay') AS max_standby_streaming_delay;
