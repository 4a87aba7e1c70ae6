-- Workflows (migration 0011): chain, group and chord, `pgtasks workflows show|cancel`.
-- Headers, placeholders and parameters as in queries.sql. What happens when a
-- workflow's job ends is the trigger of migration 0011 (workflow_job_ended).

-- name: insert_workflow :one
-- A workflow's row; its jobs follow in the same transaction (insert_workflow_jobs).
INSERT INTO {schema}.workflows (kind, on_error)
VALUES (%(kind)s, %(on_error)s::jsonb)
RETURNING id;

-- name: reserve_job_ids :many
-- %(count)s ids from the jobs' identity sequence, so that rows can name each other.
SELECT nextval(pg_get_serial_sequence(%(jobs_table)s, 'id')) AS id
FROM generate_series(1, %(count)s::int);

-- name: insert_workflow_jobs :exec
-- A workflow's jobs with their reserved ids: 'pending' with no predecessor, else
-- 'waiting' for waiting_for predecessors (prev_ids). The notify trigger wakes workers.
INSERT INTO {schema}.jobs
    (id, task_name, queue, priority, args, kwargs, max_attempts, status, workflow_id,
     workflow_step, next_ids, prev_ids, waiting_for, input_mode, limit_groups, limit_key,
     meta)
OVERRIDING SYSTEM VALUE
SELECT t.id, t.task_name, t.queue, t.priority, t.args, t.kwargs, t.max_attempts,
       CASE WHEN t.waiting_for > 0 THEN 'waiting' ELSE 'pending' END,
       %(workflow_id)s, t.step,
       (SELECT array_agg(value::bigint) FROM jsonb_array_elements_text(t.next) AS value),
       (SELECT array_agg(value::bigint) FROM jsonb_array_elements_text(t.prev) AS value),
       t.waiting_for, t.input_mode,
       -- Concurrency and rate limits (migration 0009), as insert_limited_jobs writes them.
       CASE WHEN jsonb_typeof(t.limit_groups) = 'array'
            THEN ARRAY(SELECT jsonb_array_elements_text(t.limit_groups)) END,
       t.limit_key,
       -- Trace context (pgtasks.contrib.otel; migration 0008): NULL when no step has meta.
       coalesce(t.meta, jsonb_build_object())
FROM ROWS FROM (
    unnest(%(id)s::bigint[]), unnest(%(task_name)s::text[]), unnest(%(queue)s::text[]),
    unnest(%(priority)s::int[]), jsonb_array_elements(%(args)s::jsonb),
    jsonb_array_elements(%(kwargs)s::jsonb), unnest(%(max_attempts)s::int[]),
    unnest(%(step)s::text[]), jsonb_array_elements(%(next)s::jsonb),
    jsonb_array_elements(%(prev)s::jsonb), unnest(%(waiting_for)s::int[]),
    unnest(%(input_mode)s::text[]), jsonb_array_elements(%(limit_groups)s::jsonb),
    unnest(%(limit_key)s::text[]), jsonb_array_elements(%(meta)s::jsonb)
) AS t(id, task_name, queue, priority, args, kwargs, max_attempts, step, next, prev,
       waiting_for, input_mode, limit_groups, limit_key, meta);

-- name: get_workflow :one
-- A workflow and its status from its jobs: running while any is unfinished, then
-- failed, cancelled or done.
SELECT workflows.id, workflows.kind, workflows.created_at, workflows.error_job_id,
       CASE WHEN bool_or(jobs.status IN ('waiting', 'pending', 'running')) THEN 'running'
            WHEN bool_or(jobs.status = 'failed') THEN 'failed'
            WHEN bool_or(jobs.status = 'cancelled') THEN 'cancelled'
            ELSE 'done' END AS status,
       CASE WHEN NOT bool_or(jobs.status IN ('waiting', 'pending', 'running'))
            THEN max(jobs.finished_at) END AS finished_at
FROM {schema}.workflows AS workflows
LEFT JOIN {schema}.jobs AS jobs ON jobs.workflow_id = workflows.id
WHERE workflows.id = %(id)s
GROUP BY workflows.id;

-- name: get_workflow_jobs :many
-- A workflow's jobs in insertion order, with their links.
SELECT id, task_name, queue, status, attempts, max_attempts, workflow_step, next_ids,
       prev_ids, waiting_for, last_error, finished_at
FROM {schema}.jobs
WHERE workflow_id = %(id)s
ORDER BY id;

-- name: get_job_workflow :one
-- The workflow of one job (no row for a job outside any workflow, or no such job).
SELECT workflow_id, workflow_step FROM {schema}.jobs
WHERE id = %(id)s AND workflow_id IS NOT NULL;

-- name: cancel_workflow :many
-- Cancel what has not run: waiting and pending jobs end cancelled, running ones are
-- flagged and their workers told (they end cancelled at their fenced finish).
WITH targets AS (
    SELECT id, status FROM {schema}.jobs
    WHERE workflow_id = %(id)s AND status IN ('waiting', 'pending', 'running')
    ORDER BY id
    FOR UPDATE
), cancelled AS (
    UPDATE {schema}.jobs AS jobs
    SET status = CASE WHEN targets.status = 'running' THEN jobs.status ELSE 'cancelled' END,
        cancel_requested = true,
        last_error = CASE WHEN targets.status = 'running' THEN jobs.last_error
                          ELSE format('WorkflowCancelled: workflow %%s was cancelled',
                                      %(id)s::bigint) END,
        finished_at = CASE WHEN targets.status = 'running' THEN NULL ELSE now() END,
        updated_at = now()
    FROM targets
    WHERE jobs.id = targets.id
    RETURNING jobs.id, targets.status AS previous_status
)
SELECT id, previous_status,
       CASE WHEN previous_status = 'running' THEN pg_notify({cancel_channel}, id::text)
            ELSE pg_notify({done_channel}, id::text) END IS NULL AS notified
FROM cancelled
ORDER BY id;

-- name: prune_workflows :one
-- Forget workflows without jobs left (their jobs were pruned).
WITH deleted AS (
    DELETE FROM {schema}.workflows AS workflows
    WHERE workflows.created_at < now() - make_interval(secs => %(older_than)s::float8)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS jobs
                      WHERE jobs.workflow_id = workflows.id)
    RETURNING id
)
SELECT count(*)::int AS deleted FROM deleted;
