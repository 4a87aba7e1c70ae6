-- The dashboard (`pgtasks web`): reads that stay fast with millions of jobs, and the
-- filtered writes of its bulk actions. Headers, placeholders and parameters as in
-- queries.sql. Reads never use SKIP LOCKED: a row a worker holds is still counted.
--
-- The job filter (the fragment job_filter: list_jobs_page and its variants,
-- count_filtered_jobs, retry_filtered_jobs, cancel_filtered_jobs): every parameter NULL
-- means "any"; %(args)s is a JSON document the
-- job's args contain (@>); %(log)s an ILIKE pattern over its captured log lines (meta
-- "pgtasks.logs", as JSON text: no index serves it); %(due)s: pending and due now (true) or scheduled later (false);
-- %(workflow_id)s: the jobs of one workflow (through jobs_workflow_idx and
-- jobs_history_workflow_idx).

-- fragment: job_filter
-- The job filter itself, written {job_filter} in the statements below.
(%(status)s::text IS NULL OR status = %(status)s::text)
AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
AND (%(workflow_id)s::bigint IS NULL OR workflow_id = %(workflow_id)s::bigint)
AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
AND (%(log)s::text IS NULL OR (meta -> 'pgtasks.logs')::text ILIKE %(log)s::text)
AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
-- due: pending and due now (true), or pending and scheduled later (false).
AND (%(due)s::boolean IS NULL
     OR (status = 'pending' AND (run_at <= now()) = %(due)s::boolean))

-- fragment: job_list_columns
-- What a list of jobs shows, cut on the server: the head of the args (when their stored
-- size is small: a large document is not rendered at all), the last line of the last
-- error, the progress of meta (when meta is not large), never result or kwargs.
id, task_name, queue, priority, status, attempts, max_attempts, run_at, locked_at,
created_at, finished_at, workflow_id, workflow_step,
CASE WHEN pg_column_size(args) <= %(args_bytes)s::int
     THEN left(args::text, %(args_chars)s::int) END AS args_head,
pg_column_size(args) AS args_size,
left(reverse(split_part(reverse(rtrim(right(last_error, 1000), E' \t\r\n')), E'\n', 1)),
     %(error_chars)s::int) AS error_line,
CASE WHEN pg_column_size(meta) <= 262144 THEN meta -> 'pgtasks.progress' END AS progress,
now() AS now

-- name: get_unfinished_stats :many
-- Per queue: pending, due, running and the oldest due job's wait, from indexes only:
-- jobs_claim_idx (its INCLUDE (queue), migration lighter_inserts; an index-only scan)
-- and jobs_running_idx.
-- Finished rows are never read.
WITH pending AS (
    SELECT queue,
           count(*) AS pending,
           count(*) FILTER (WHERE run_at <= now()) AS due,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
    FROM {schema}.jobs
    WHERE status = 'pending'
    GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running
    FROM {schema}.jobs
    WHERE status = 'running'
    GROUP BY queue
), waiting AS (
    -- Workflow steps waiting for earlier steps (migration 0011), through jobs_waiting_idx.
    SELECT queue, count(*) AS waiting
    FROM {schema}.jobs
    WHERE status = 'waiting'
    GROUP BY queue
)
SELECT queue,
       coalesce(waiting.waiting, 0) AS waiting,
       coalesce(pending.pending, 0) AS pending,
       coalesce(pending.due, 0) AS due,
       coalesce(running.running, 0) AS running,
       extract(epoch FROM now() - pending.oldest_due)::float8 AS oldest_due_age
FROM pending
FULL JOIN running USING (queue)
FULL JOIN waiting USING (queue)
ORDER BY queue;

-- name: get_jobs_table_size :one
-- The planner's row count of jobs and of jobs_history's partitions together (-1: never
-- analyzed or vacuumed).
SELECT coalesce(CASE WHEN bool_and(class.reltuples < 0) THEN -1
                     ELSE sum(greatest(class.reltuples, 0)) END, -1)::float8 AS reltuples
FROM pg_class AS class
WHERE class.oid = to_regclass(quote_ident(%(schema)s::text) || '.jobs')
   OR class.oid IN (
       SELECT relid
       FROM pg_partition_tree(to_regclass(quote_ident(%(schema)s::text) || '.jobs_history'))
       WHERE isleaf);

-- name: get_finished_counts :many
-- Exact finished jobs per queue and status (small tables only: it reads every one).
SELECT queue, status, count(*)::bigint AS jobs
FROM {schema}.all_jobs
WHERE status IN ('done', 'failed', 'cancelled')
GROUP BY queue, status;

-- name: get_finished_estimates :many
-- Finished jobs per queue and status estimated from ANALYZE's statistics: the (queue,
-- status) most-common-values lists of jobs_history_queue_status_stats (migration
-- jobs_history; the pruner analyzes jobs_history) and of jobs_queue_status_stats
-- (migration 0006: finished jobs an older version left in jobs), each times its table's
-- row count. No row of the tables is read.
WITH sources AS (
    SELECT 'jobs' AS tablename, 'jobs_queue_status_stats' AS statistics_name,
           (SELECT greatest(reltuples, 0) FROM pg_class
            WHERE oid = to_regclass(quote_ident(%(schema)s::text) || '.jobs')) AS reltuples
    UNION ALL
    SELECT 'jobs_history', 'jobs_history_queue_status_stats',
           (SELECT coalesce(sum(greatest(reltuples, 0)), 0) FROM pg_class
            WHERE oid IN (SELECT relid
                          FROM pg_partition_tree(to_regclass(
                              quote_ident(%(schema)s::text) || '.jobs_history'))
                          WHERE isleaf))
)
SELECT stats.most_common_vals[item][1] AS queue,
       stats.most_common_vals[item][2] AS status,
       sum(round(stats.most_common_freqs[item] * sources.reltuples))::bigint AS jobs
FROM sources
JOIN pg_stats_ext AS stats
  ON stats.schemaname = %(schema)s::text
 AND stats.tablename = sources.tablename
 AND stats.statistics_name = sources.statistics_name
CROSS JOIN LATERAL generate_subscripts(stats.most_common_freqs, 1) AS item
WHERE stats.most_common_vals[item][2] IN ('done', 'failed', 'cancelled')
GROUP BY 1, 2;

-- name: get_finished_minutes :many
-- Jobs finished per queue, status and minute over the last hour, newest first through
-- jobs_finished_idx, reading at most %(cap)s rows (a busy hour: only its newest minutes;
-- the caller sees the cap reached). Each row read is a heap fetch (queue, status).
SELECT queue, status, date_trunc('minute', finished_at) AS minute, count(*)::int AS jobs
FROM (
    SELECT queue, status, finished_at
    FROM {schema}.all_jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
    ORDER BY finished_at DESC
    LIMIT %(cap)s::int
) AS recent
GROUP BY 1, 2, 3;

-- name: list_jobs_page :many
-- One page of jobs matching the filter, newest first, older than the %(before)s id
-- (keyset paging: no OFFSET). Asks for one row more than a page to tell if one follows.
-- Only what the list shows is read, cut on the server: the head of the args (when their
-- stored size is small: a large document is not rendered at all), the last line of the
-- last error, the progress of meta (when meta is not large), never result or kwargs.
SELECT {job_list_columns}
FROM {schema}.all_jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND {job_filter}
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: list_finished_jobs_page :many
-- list_jobs_page for a finished status (done, failed, cancelled): jobs_history (its other
-- class's partitions skipped), and the finished jobs an older version left in jobs through
-- jobs_finished_idx; the backlog in jobs is never walked for a status it cannot hold.
-- One page of jobs matching the filter, newest first, older than the %(before)s id
-- (keyset paging: no OFFSET). Asks for one row more than a page to tell if one follows.
-- Only what the list shows is read, cut on the server: the head of the args (when their
-- stored size is small: a large document is not rendered at all), the last line of the
-- last error, the progress of meta (when meta is not large), never result or kwargs.
SELECT {job_list_columns}
FROM (
    SELECT * FROM {schema}.jobs_history
    UNION ALL
    SELECT * FROM {schema}.jobs
    WHERE status IN ('done', 'failed', 'cancelled')
) AS jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND {job_filter}
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: list_unfinished_jobs_page :many
-- list_jobs_page for an unfinished status (waiting, pending, running): jobs alone (no
-- finished job is ever in that state).
-- One page of jobs matching the filter, newest first, older than the %(before)s id
-- (keyset paging: no OFFSET). Asks for one row more than a page to tell if one follows.
-- Only what the list shows is read, cut on the server: the head of the args (when their
-- stored size is small: a large document is not rendered at all), the last line of the
-- last error, the progress of meta (when meta is not large), never result or kwargs.
SELECT {job_list_columns}
FROM {schema}.jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND {job_filter}
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: list_workflow_jobs_page :many
-- list_jobs_page of one workflow's jobs (%(workflow_id)s, never NULL here): read through
-- workflow_jobs backwards from %(before)s (jobs_workflow_idx merged with the
-- jobs_history_workflow_idx of the days since the workflow was made), whatever else the
-- filter names, so that a generic plan of the statement still uses those indexes.
SELECT {job_list_columns}
FROM (
    SELECT steps.*
    FROM (SELECT %(workflow_id)s::bigint AS id) AS wanted
    LEFT JOIN {schema}.workflows AS made ON made.id = wanted.id
    CROSS JOIN LATERAL {schema}.workflow_jobs(wanted.id, coalesce(made.created_at, '-infinity'))
        AS steps
) AS jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND {job_filter}
ORDER BY workflow_id DESC, id DESC
LIMIT %(limit)s::int;

-- name: list_jobs_scan :many
-- list_jobs_page reading at most %(scan)s jobs (newest first, older than %(before)s):
-- filters no index serves (args, task, creation times, a queue) cost what one page of
-- them costs, whatever the table holds; get_scan_floor tells where the scan stopped.
SELECT {job_list_columns}
FROM (
    SELECT *
    FROM {schema}.all_jobs
    WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
    ORDER BY id DESC
    LIMIT %(scan)s::int
) AS jobs
WHERE {job_filter}
ORDER BY id DESC
LIMIT %(limit)s::int;

-- name: get_scan_floor :one
-- Where list_jobs_scan stops: the lowest id among the %(scan)s newest jobs older than
-- %(before)s, and how many there are (fewer: the scan reached the oldest job).
SELECT min(id) AS floor, count(*)::int AS scanned
FROM (
    SELECT id
    FROM {schema}.all_jobs
    WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
    ORDER BY id DESC
    LIMIT %(scan)s::int
) AS scanned;

-- name: count_filtered_jobs :one
-- How many jobs a bulk action of the filter would touch, each count stopping at
-- %(cap)s: retryable (failed or cancelled) and cancellable (waiting, pending, or running
-- and not yet asked to stop).
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM {schema}.all_jobs
        WHERE status IN ('failed', 'cancelled')
          AND {job_filter}
        LIMIT %(cap)s::int) AS matching) AS retryable,
    (SELECT count(*) FROM (
        SELECT 1 FROM {schema}.jobs
        WHERE (status IN ('pending', 'waiting') OR (status = 'running' AND NOT cancel_requested))
          AND {job_filter}
        LIMIT %(cap)s::int) AS matching) AS cancellable;

-- name: get_job_page :one
-- One job as its dashboard page shows it: every field, the JSON documents as text cut at
-- %(json_chars)s characters (with their full length), a last error longer than
-- %(error_chars)s characters as its head and tail, each failed attempt's error as its
-- last line. A row written by hand (attempt_errors not an array, 100,000 limit
-- instances) reads without error.
SELECT jobs.id, task_name, queue, priority, status, attempts, max_attempts,
       run_at, locked_at, locked_by, idempotency_key, created_at, updated_at, finished_at,
       started_at, cancel_requested,
       unique_key, lower(unique_window) AS unique_window_start,
       upper(unique_window) AS unique_window_end,
       -- The limit instances (a row written by hand may hold 100,000: the first few).
       limit_groups[1:%(instances)s::int] AS limit_groups,
       cardinality(limit_groups) AS limit_groups_count, left(limit_key, 1000) AS limit_key,
       workflow_id, workflow_step,
       -- A workflow step's links (a chord's callback may name thousands: the first few).
       prev_ids[1:%(neighbours)s::int] AS prev_ids, cardinality(prev_ids) AS prev_count,
       next_ids[1:%(neighbours)s::int] AS next_ids, cardinality(next_ids) AS next_count,
       left(rendered.args, %(json_chars)s::int) AS args_text, length(rendered.args) AS args_length,
       left(rendered.kwargs, %(json_chars)s::int) AS kwargs_text,
       length(rendered.kwargs) AS kwargs_length,
       left(rendered.result, %(json_chars)s::int) AS result_text,
       length(rendered.result) AS result_length,
       left(rendered.meta, %(json_chars)s::int) AS meta_text, length(rendered.meta) AS meta_length,
       CASE WHEN length(last_error) <= %(error_chars)s::int THEN last_error
            ELSE left(last_error, %(error_chars)s::int / 2)
                 || E'\n[… ' || (length(last_error) - %(error_chars)s::int) || ' characters'
                 || E' not shown …]\n' || right(last_error, %(error_chars)s::int / 2)
       END AS last_error,
       (SELECT jsonb_agg(jsonb_build_object(
                   'attempt', entry -> 'attempt',
                   'worker_id', entry -> 'worker_id',
                   'exception_type', left(entry ->> 'exception_type', 200),
                   'finished_at', entry -> 'finished_at',
                   'error', left(reverse(split_part(reverse(rtrim(
                                right(entry ->> 'error', 1000), E' \t\r\n')), E'\n', 1)), 300))
                   ORDER BY position)
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(attempt_errors) = 'array'
                                       THEN attempt_errors END)
             WITH ORDINALITY AS history(entry, position)
        WHERE jsonb_typeof(entry) = 'object') AS attempt_errors,
       -- The captured log lines per attempt (pgtasks/_execution/joblogs.py), shown apart
       -- from the meta document (capped when captured: a row written by hand is checked
       -- line by line where it is shown).
       CASE WHEN jsonb_typeof(jobs.meta -> 'pgtasks.logs') = 'object'
            THEN jobs.meta -> 'pgtasks.logs' END AS logs,
       now() AS now
FROM {schema}.all_jobs AS jobs
CROSS JOIN LATERAL (
    SELECT jobs.args::text AS args, jobs.kwargs::text AS kwargs, jobs.result::text AS result,
           (CASE WHEN jsonb_typeof(jobs.meta) = 'object' THEN jobs.meta - 'pgtasks.logs'
                 ELSE jobs.meta END)::text AS meta
) AS rendered
WHERE jobs.id = %(id)s::bigint;

-- name: get_limit_instances :many
-- What the limits page counts per limit instance (a limit's name, or a per-key limit's
-- name, chr(31) and a key): the jobs running under it (every running job that names an
-- instance, through jobs_limited_running_idx) and the pending and due ones among the first
-- %(cap)s pending limited jobs in claim order (jobs_limited_claim_idx: a page costs the
-- same however long the backlog), a pending job under more than 8 instances (no claim
-- takes it) counted apart. Each row also says how many pending jobs were read and how
-- many of those carry more than 8 instances (the first of them); one row of NULL
-- instance when none has jobs. Read without SKIP LOCKED.
WITH pending AS MATERIALIZED (
    SELECT id, limit_groups, run_at <= now() AS due
    FROM {schema}.jobs
    WHERE status = 'pending' AND limit_groups IS NOT NULL
    ORDER BY priority DESC, run_at, id
    LIMIT %(cap)s::int
), pairs AS (
    SELECT inst, 0 AS running, 1 AS pending, pending.due::int AS due
    FROM pending, unnest(pending.limit_groups) AS inst
    WHERE cardinality(pending.limit_groups) <= 8
    UNION ALL
    SELECT inst, 1, 0, 0
    FROM {schema}.jobs AS jobs, unnest(jobs.limit_groups) AS inst
    WHERE jobs.status = 'running' AND jobs.limit_groups <> ARRAY[]::text[]
), counted AS (
    SELECT inst, sum(running)::bigint AS running, sum(pending)::bigint AS pending,
           sum(due)::bigint AS due
    FROM pairs
    WHERE inst IS NOT NULL
    GROUP BY inst
)
SELECT counted.inst, counted.running, counted.pending, counted.due,
       (SELECT count(*) FROM pending) AS pending_read,
       (SELECT count(*) FROM pending WHERE cardinality(limit_groups) > 8) AS overlimited,
       (SELECT min(id) FROM pending WHERE cardinality(limit_groups) > 8) AS first_overlimited
FROM (SELECT 1) AS one
LEFT JOIN counted ON true;

-- name: get_workflow_neighbours :many
-- The steps a job page links to as its neighbours: the jobs %(ids)s of workflow
-- %(workflow_id)s (its predecessors and successors), with their step, task and status
-- (workflow_jobs: by the workflow indexes of jobs and of the days of jobs_history since
-- the workflow was made).
SELECT id, workflow_step, task_name, status
FROM (
    SELECT steps.*
    FROM (SELECT %(workflow_id)s::bigint AS id) AS wanted
    LEFT JOIN {schema}.workflows AS made ON made.id = wanted.id
    CROSS JOIN LATERAL {schema}.workflow_jobs(wanted.id, coalesce(made.created_at, '-infinity'))
        AS steps
) AS jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id;

-- name: delete_finished_job :one
-- Delete one done, failed or cancelled job (from jobs_history, with the keys it holds);
-- the row's status tells a missing job (no row) from one that is not finished (deleted
-- false). A job of a workflow that has unfinished jobs stays (workflow_unfinished): its
-- later steps read its result.
WITH target AS (
    SELECT id, status, workflow_id, workflow_step,
           workflow_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM {schema}.jobs AS other
               WHERE other.workflow_id = jobs.workflow_id
                 AND other.status IN ('waiting', 'pending', 'running')) AS workflow_unfinished
    FROM {schema}.all_jobs AS jobs WHERE id = %(id)s::bigint
), deleted AS (
    SELECT deleted.id
    FROM target
    CROSS JOIN LATERAL {schema}.jobs_delete_finished(ARRAY[target.id]) AS deleted
    WHERE target.status IN ('done', 'failed', 'cancelled')
      AND NOT target.workflow_unfinished
)
SELECT target.status, deleted.id IS NOT NULL AS deleted, target.workflow_id,
       target.workflow_step, target.workflow_unfinished
FROM target
LEFT JOIN deleted ON deleted.id = target.id;

-- name: retry_filtered_jobs :many
-- Up to %(limit)s failed or cancelled jobs matching the filter back to pending, due now
-- (the rule of retry_job: jobs_retry); rows ``id, queue``.
WITH picked AS (
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs_history AS jobs
        WHERE status IN ('failed', 'cancelled')
          -- A workflow step that never received its input: retry_filtered_steps.
          AND NOT coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                           AND cardinality(prev_ids) > 0, false)
          AND {job_filter}
          -- A job unique while active (migration 0010) whose key an active job holds
          -- stays as it is: retrying it would make a second active job of the key.
          AND (unique_key IS NULL OR unique_window IS NOT NULL OR NOT EXISTS (
              SELECT FROM {schema}.jobs AS holder
              WHERE holder.unique_key = jobs.unique_key AND holder.unique_window IS NULL
                AND holder.status IN ('pending', 'running')))
        ORDER BY id
        LIMIT %(limit)s::int
        -- A row another session holds is left for the next pass, not waited for.
        FOR UPDATE SKIP LOCKED
    ) AS history
    UNION ALL
    -- Jobs that finished before migration jobs_history, until the pruner moves them.
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs AS jobs
        WHERE status IN ('failed', 'cancelled')
          -- A workflow step that never received its input: retry_filtered_steps.
          AND NOT coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                           AND cardinality(prev_ids) > 0, false)
          AND {job_filter}
          -- A job unique while active (migration 0010) whose key an active job holds
          -- stays as it is: retrying it would make a second active job of the key.
          AND (unique_key IS NULL OR unique_window IS NOT NULL OR NOT EXISTS (
              SELECT FROM {schema}.jobs AS holder
              WHERE holder.unique_key = jobs.unique_key AND holder.unique_window IS NULL
                AND holder.status IN ('pending', 'running')))
        ORDER BY id
        LIMIT %(limit)s::int
        -- A row another session holds is left for the next pass, not waited for.
        FOR UPDATE SKIP LOCKED
    ) AS legacy
    LIMIT %(limit)s::int
)
SELECT id, queue FROM {schema}.jobs_retry(ARRAY(SELECT id FROM picked ORDER BY id));

-- name: retry_filtered_steps :many
-- Up to %(limit)s cancelled workflow steps that never received their input, matching
-- the filter, with ids above %(after)s, retried in id order by workflow_retry_step (each
-- sees the earlier ones: a chain's steps retried together wait for each other); rows
-- ``id, outcome, detail, queue``.
SELECT picked.id, retried.outcome, retried.detail, retried.queue
FROM (
    SELECT id
    FROM {schema}.all_jobs AS jobs
    WHERE status = 'cancelled'
      AND coalesce(workflow_id IS NOT NULL AND waiting_for > 0
                   AND cardinality(prev_ids) > 0, false)
      AND id > %(after)s::bigint
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task_name)s::text IS NULL OR task_name = %(task_name)s::text)
      AND (%(workflow_id)s::bigint IS NULL OR workflow_id = %(workflow_id)s::bigint)
      AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
      AND (%(log)s::text IS NULL OR (meta -> 'pgtasks.logs')::text ILIKE %(log)s::text)
      AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
      AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
    ORDER BY id
    LIMIT %(limit)s::int
) AS picked
CROSS JOIN LATERAL {schema}.workflow_retry_step(picked.id) AS retried
ORDER BY picked.id;

-- name: cancel_filtered_jobs :many
-- Up to %(limit)s pending jobs, and running jobs not yet asked to stop, matching the
-- filter: pending ones become cancelled, running ones are flagged and their workers told
-- (as cancel_job does); rows ``id, status`` after the change.
WITH picked AS (
    SELECT id, status
    FROM {schema}.jobs
    WHERE (status IN ('pending', 'waiting') OR (status = 'running' AND NOT cancel_requested))
      AND {job_filter}
    ORDER BY id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN picked.status IN ('pending', 'waiting') THEN 'cancelled'
                      ELSE jobs.status END,
        cancel_requested = true,
        finished_at = CASE WHEN picked.status IN ('pending', 'waiting') THEN now()
                           ELSE jobs.finished_at END,
        updated_at = now()
    FROM picked
    WHERE jobs.id = picked.id
    RETURNING jobs.id, jobs.status
)
SELECT id, status,
       CASE WHEN status = 'running' THEN pg_notify({cancel_channel}, id::text)
            ELSE pg_notify({done_channel}, id::text)
       END IS NULL AS notified
FROM cancelled;

-- name: begin_read_committed :exec
-- The first statement of a dashboard read through a transaction pooler, which refuses
-- startup options: this transaction runs READ COMMITTED whatever the server's default.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
