-- jobs_history: its day partitions created, expired and dropped, its defaults pruned,
-- finished jobs archived (_store/history.py). Headers, placeholders and parameters as in
-- queries.sql.

-- name: prune_history_defaults :many
-- prune_jobs for the default partitions of jobs_history only: the jobs of a day with no
-- partition of its own (finished before its partition was created, or kept when their
-- day was dropped because their workflow was unfinished).
WITH doomed AS (
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs_history_done_default AS jobs
        WHERE 'done' = ANY(%(statuses)s::text[])
          AND (finished_at IS NULL
               OR finished_at < now() - make_interval(secs => %(older_than)s::float8))
          AND (workflow_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM {schema}.jobs AS other
                              WHERE other.workflow_id = jobs.workflow_id
                                AND other.status IN ('waiting', 'pending', 'running')))
        ORDER BY finished_at
        LIMIT %(limit)s::int
        FOR UPDATE SKIP LOCKED
    ) AS done
    UNION ALL
    SELECT id FROM (
        SELECT id
        FROM {schema}.jobs_history_failed_default AS jobs
        WHERE status = ANY(%(statuses)s::text[])
          AND (finished_at IS NULL
               OR finished_at < now() - make_interval(secs => %(older_than)s::float8))
          AND (workflow_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM {schema}.jobs AS other
                              WHERE other.workflow_id = jobs.workflow_id
                                AND other.status IN ('waiting', 'pending', 'running')))
        ORDER BY finished_at
        LIMIT %(limit)s::int
        FOR UPDATE SKIP LOCKED
    ) AS failed
    LIMIT %(limit)s::int
)
SELECT status, count(*)::int AS deleted
FROM {schema}.jobs_delete_finished(ARRAY(SELECT id FROM doomed))
GROUP BY status;

-- name: create_history_days :many
-- The day partitions of jobs_history from today (UTC) to %(days)s days ahead that do not
-- exist yet, created (rows of those days in a default partition move into them).
SELECT name FROM {schema}.jobs_history_create_days(now(), %(days)s::int) AS name;

-- name: get_expired_history_days :many
-- The day partitions of %(class)s ('done' or 'failed') whose whole day is over
-- %(older_than)s seconds ago.
SELECT partition_name, partition_day
FROM {schema}.jobs_history_expired_days(%(class)s::text,
                                        now() - make_interval(secs => %(older_than)s::float8));

-- name: forget_history_day_keys :many
-- Before a day partition is dropped: its jobs by status; the keys they held deleted.
SELECT status, jobs FROM {schema}.jobs_history_forget_day_keys(%(partition)s::text);

-- name: drop_history_day :one
-- Drop a day partition (jobs of unfinished workflows kept); its jobs kept.
SELECT {schema}.jobs_history_drop_day(%(class)s::text, %(partition)s::text) AS kept;

-- name: set_lock_timeout :exec
-- This transaction waits at most %(timeout)s for a lock (a partition's catalog change).
SELECT set_config('lock_timeout', %(timeout)s::text, true);

-- name: analyze_history :exec
-- Statistics of jobs_history (autovacuum never analyzes a partitioned table itself): the
-- dashboard's estimates of finished jobs read them.
ANALYZE {schema}.jobs_history;

-- name: archive_finished_jobs :one
-- Move up to %(limit)s jobs that finished before migration jobs_history from jobs into
-- jobs_history, oldest first (the workflows they belong to moved on when they ended:
-- pgtasks.archiving keeps the triggers from doing it again).
WITH flag AS (
    -- (And the jobs moved keep their keys: jobs_forget_key leaves their rows alone.)
    SELECT set_config('pgtasks.archiving', 'on', true),
           set_config('pgtasks.keys_handled', 'on', true)
), doomed AS (
    SELECT id
    FROM {schema}.jobs AS jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND (SELECT count(*) FROM flag) = 1
    ORDER BY finished_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), archived AS (
    DELETE FROM {schema}.jobs AS jobs
    USING doomed
    WHERE jobs.id = doomed.id
    RETURNING jobs.*
), moved AS (
    INSERT INTO {schema}.jobs_history SELECT * FROM archived RETURNING id
)
SELECT count(*)::int AS archived FROM moved;
