-- Queries of `pgtasks doctor`: read-only facts about the server and the schema's tables.

-- fragment: deep_payload_candidate
-- A row that may nest deeper than %(depth)s levels (get_deep_payloads and
-- get_deep_history_payloads): each level takes 8 bytes of jsonb at least, so a smaller
-- value that is not compressed cannot, and is not walked.
pg_column_size(args) >= 8 * %(depth)s::int
OR pg_column_compression(args) IS NOT NULL
OR pg_column_size(kwargs) >= 8 * %(depth)s::int
OR pg_column_compression(kwargs) IS NOT NULL
OR pg_column_size(meta) >= 8 * %(depth)s::int
OR pg_column_compression(meta) IS NOT NULL
OR pg_column_size(result) >= 8 * %(depth)s::int
OR pg_column_compression(result) IS NOT NULL

-- fragment: deep_payload_checks
-- A candidate's columns nesting past %(past)s, and whether one nests as deep as
-- %(undecodable)s (the jsonpaths walk down to the level asked for only).
array_remove(ARRAY[
    CASE WHEN jsonb_path_exists(args, %(past)s::jsonpath) THEN 'args' END,
    CASE WHEN jsonb_path_exists(kwargs, %(past)s::jsonpath) THEN 'kwargs' END,
    CASE WHEN jsonb_path_exists(meta, %(past)s::jsonpath) THEN 'meta' END,
    CASE WHEN jsonb_path_exists(result, %(past)s::jsonpath) THEN 'result' END
], NULL) AS columns,
(jsonb_path_exists(args, %(undecodable)s::jsonpath)
 OR jsonb_path_exists(kwargs, %(undecodable)s::jsonpath)
 OR jsonb_path_exists(meta, %(undecodable)s::jsonpath)
 OR coalesce(jsonb_path_exists(result, %(undecodable)s::jsonpath), false)) AS undecodable

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

-- name: get_isolation :one
-- The isolation this connection's transactions run in (pgtasks pins READ COMMITTED).
SELECT current_setting('transaction_isolation') AS isolation;

-- name: get_limit_problems :one
-- What `pgtasks doctor` checks in the limits (migration flow_control): stored limits with values
-- the claim arithmetic cannot take (written by hand past its CHECKs; the claim clamps
-- them), pending jobs whose limit names no stored limit holds (they run without it), and
-- pending jobs under more limit instances than the claim takes (left pending).
SELECT (SELECT count(*) FROM {schema}.limits) AS stored,
       (SELECT array_agg(name ORDER BY name) FROM {schema}.limits
        WHERE NOT (tokens >= 0 AND tokens <= 1e9)
           OR NOT (burst >= 1 AND burst <= 1e9)
           OR NOT (rate_period IS NULL OR (rate_period >= 0.001 AND rate_period <= 1e10))
           OR NOT isfinite(refilled_at) OR NOT isfinite(updated_at)
           OR refilled_at > now() + interval '1 minute') AS bad_values,
       (SELECT array_agg(name ORDER BY name) FROM (
            SELECT DISTINCT split_part(inst, chr(31), 1) AS name
            FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
            WHERE jobs.status = 'pending' AND jobs.limit_groups IS NOT NULL
              AND inst IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM {schema}.limits AS d
                              WHERE d.name = split_part(inst, chr(31), 1))
            LIMIT 20) AS names) AS unstored,
       (SELECT count(*) FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
        WHERE jobs.status = 'pending' AND jobs.limit_groups IS NOT NULL AND inst IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {schema}.limits AS d
                          WHERE d.name = split_part(inst, chr(31), 1))) AS unstored_jobs,
       (SELECT count(*) FROM {schema}.jobs
        WHERE status = 'pending' AND cardinality(limit_groups) > 8) AS overlimited,
       (SELECT min(id) FROM {schema}.jobs
        WHERE status = 'pending' AND cardinality(limit_groups) > 8) AS first_overlimited;

-- name: get_unknown_task_jobs :many
-- Pending jobs that no live worker would claim: no worker whose heartbeat is within the
-- lease serves their queue and knows their task (migration flow_control; a worker of an earlier
-- release, task_names NULL, knows every task). Read without SKIP LOCKED.
WITH pending AS (
    SELECT task_name, queue, count(*) AS jobs, min(id) AS first_id
    FROM {schema}.jobs
    WHERE status = 'pending'
    GROUP BY task_name, queue
), live AS (
    SELECT queues, task_names FROM {schema}.workers
    WHERE heartbeat_at >= now() - make_interval(secs => %(lease_timeout)s)
)
SELECT pending.task_name, pending.queue, pending.jobs, pending.first_id
FROM pending
WHERE EXISTS (SELECT 1 FROM live)
  AND NOT EXISTS (
      SELECT 1 FROM live
      WHERE (live.queues IS NULL OR pending.queue = ANY(live.queues))
        AND (live.task_names IS NULL OR pending.task_name = ANY(live.task_names)))
ORDER BY pending.jobs DESC, pending.task_name, pending.queue
LIMIT 50;

-- name: get_deep_payloads :many
-- Jobs whose args, kwargs, meta or result nest arrays and objects more than %(depth)s
-- levels deep (written by SQL or another tool: enqueues, results and meta writes refuse
-- them), and whether one nests as deep as the %(undecodable)s jsonpath finds (past what a
-- worker decodes: it fails such a job without running it). Each level takes 8 bytes of jsonb at least: a smaller value that is not
-- compressed cannot nest that deep and is not walked; the jsonpath walks a candidate down
-- to the level asked for only (a value thousands deep costs no more).
WITH candidates AS (
    SELECT id, task_name, queue, status, args, kwargs, meta, result
    FROM {schema}.jobs
    WHERE {deep_payload_candidate}
), deep AS (
    SELECT id, task_name, queue, status, {deep_payload_checks}
    FROM candidates
)
SELECT id, task_name, queue, status, columns, undecodable, count(*) OVER () AS total
FROM deep
WHERE cardinality(columns) > 0
ORDER BY undecodable DESC, id
LIMIT 20;

-- name: get_deep_history_payloads :many
-- get_deep_payloads of jobs_history (finished jobs moved out of jobs), bounded: the
-- newest %(scan)s rows by id only (jobs_history_id_idx), then the same size filter and
-- jsonpath checks; scanned: how many rows were read (fewer than %(scan)s: all of them).
WITH newest AS (
    SELECT id, task_name, queue, status, args, kwargs, meta, result
    FROM {schema}.jobs_history
    ORDER BY id DESC
    LIMIT %(scan)s::int
), candidates AS (
    SELECT * FROM newest
    WHERE {deep_payload_candidate}
), deep AS (
    SELECT id, task_name, queue, status, {deep_payload_checks}
    FROM candidates
)
SELECT deep.id, deep.task_name, deep.queue, deep.status, deep.columns, deep.undecodable,
       count(*) OVER () AS total, (SELECT count(*) FROM newest)::int AS scanned
FROM deep
WHERE cardinality(deep.columns) > 0
ORDER BY deep.undecodable DESC, deep.id DESC
LIMIT 20;

-- name: get_main_module_jobs :many
-- Unfinished jobs of tasks registered in a module run as a script (``__main__.name``): a
-- worker imports the app's module under its real name, so no worker knows these tasks.
SELECT task_name, queue, count(*) AS jobs, min(id) AS first_id
FROM {schema}.jobs
WHERE status IN ('pending', 'waiting') AND task_name LIKE '\_\_main\_\_.%%'
GROUP BY task_name, queue
ORDER BY count(*) DESC, task_name, queue
LIMIT 20;
