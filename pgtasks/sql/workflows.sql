-- Workflows (migrations 0011 and workflow_progress): chain, group and chord,
-- `pgtasks workflows list|show|cancel|heal`. Headers, placeholders and parameters as in
-- queries.sql. What happens when a workflow's job ends is the triggers' work (migration
-- workflow_progress: workflow_job_ended and workflow_jobs_ended).

-- name: insert_workflow :one
-- A workflow's row; its jobs follow in the same transaction (insert_workflow_jobs).
INSERT INTO {schema}.workflows (kind, on_error, shape)
VALUES (%(kind)s, %(on_error)s::jsonb, %(shape)s)
RETURNING id;

-- name: reserve_job_ids :many
-- %(count)s ids from the jobs' identity sequence, so that rows can name each other.
-- One row: the ids as text, increasing, joined by commas (one value to read, not a row
-- per id); the sequence is looked up once, not once per id.
WITH sequence AS MATERIALIZED (
    SELECT pg_get_serial_sequence(%(jobs_table)s, 'id')::regclass AS id
)
SELECT string_agg(reserved.id::text, ',' ORDER BY reserved.id) AS ids
FROM (SELECT nextval(sequence.id) AS id
      FROM sequence, generate_series(1, %(count)s::int)) AS reserved;

-- name: insert_workflow_jobs :exec
-- A workflow's jobs with their reserved ids: 'pending' with no predecessor, else
-- 'waiting' for waiting_for predecessors (prev_ids). The notify trigger wakes workers.
-- Every column comes as one JSON array (the client joins texts: nothing per job is
-- adapted), next and prev null for a job without successors or predecessors.
INSERT INTO {schema}.jobs
    (id, task_name, queue, priority, args, kwargs, max_attempts, status, workflow_id,
     workflow_step, next_ids, prev_ids, waiting_for, input_mode, limit_groups, limit_key,
     meta)
OVERRIDING SYSTEM VALUE
SELECT t.id::bigint, t.task_name, t.queue, t.priority::int, t.args, t.kwargs,
       t.max_attempts::int,
       CASE WHEN t.waiting_for::int > 0 THEN 'waiting' ELSE 'pending' END,
       %(workflow_id)s, t.step,
       CASE WHEN jsonb_typeof(t.next) = 'array'
            THEN ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(t.next) AS value) END,
       CASE WHEN jsonb_typeof(t.prev) = 'array'
            THEN ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(t.prev) AS value) END,
       t.waiting_for::int, t.input_mode,
       -- Concurrency and rate limits (migration 0009), as insert_limited_jobs writes them.
       CASE WHEN jsonb_typeof(t.limit_groups) = 'array'
            THEN ARRAY(SELECT jsonb_array_elements_text(t.limit_groups)) END,
       t.limit_key,
       -- Trace context (pgtasks.contrib.otel; migration 0008): NULL when no step has meta.
       coalesce(t.meta, jsonb_build_object())
FROM ROWS FROM (
    jsonb_array_elements_text(%(id)s::jsonb), jsonb_array_elements_text(%(task_name)s::jsonb),
    jsonb_array_elements_text(%(queue)s::jsonb),
    jsonb_array_elements_text(%(priority)s::jsonb), jsonb_array_elements(%(args)s::jsonb),
    jsonb_array_elements(%(kwargs)s::jsonb),
    jsonb_array_elements_text(%(max_attempts)s::jsonb),
    jsonb_array_elements_text(%(step)s::jsonb), jsonb_array_elements(%(next)s::jsonb),
    jsonb_array_elements(%(prev)s::jsonb), jsonb_array_elements_text(%(waiting_for)s::jsonb),
    jsonb_array_elements_text(%(input_mode)s::jsonb),
    jsonb_array_elements(%(limit_groups)s::jsonb),
    jsonb_array_elements_text(%(limit_key)s::jsonb), jsonb_array_elements(%(meta)s::jsonb)
) AS t(id, task_name, queue, priority, args, kwargs, max_attempts, step, next, prev,
       waiting_for, input_mode, limit_groups, limit_key, meta);

-- name: copy_workflow_jobs :exec
-- insert_workflow_jobs by COPY, for a large workflow without limits (its rows in COPY's
-- text format, built by WorkflowQueries.copy_workflow_jobs): the server parses far less
-- than the JSON arrays. Run at the database's now(); the notify trigger wakes workers.
COPY {schema}.jobs (id, args, kwargs, meta, task_name, queue, priority, max_attempts,
                    status, workflow_id, workflow_step, next_ids, prev_ids, waiting_for,
                    input_mode)
FROM STDIN;

-- name: schedule_workflow_job :exec
-- A workflow's first job, inserted pending in this transaction, due later: at %(run_at)s,
-- or %(delay)s seconds after the database's now (apply_async's countdown=/eta= with
-- link=). Invisible to claims until the transaction commits, so it never starts early.
UPDATE {schema}.jobs
SET run_at = coalesce(%(run_at)s::timestamptz,
                      now() + make_interval(secs => %(delay)s::float8))
WHERE id = %(id)s AND status = 'pending'
  AND (%(run_at)s::timestamptz IS NOT NULL OR %(delay)s::float8 IS NOT NULL);

-- name: get_workflow :one
-- A workflow and its status from its jobs: running while any is unfinished, then
-- failed, cancelled or done (workflow_jobs: the days of jobs_history since it was made).
SELECT workflows.id, workflows.kind, workflows.shape, workflows.created_at,
       workflows.error_job_id,
       CASE WHEN bool_or(jobs.status IN ('waiting', 'pending', 'running')) THEN 'running'
            WHEN bool_or(jobs.status = 'failed') THEN 'failed'
            WHEN bool_or(jobs.status = 'cancelled') THEN 'cancelled'
            ELSE 'done' END AS status,
       CASE WHEN NOT bool_or(jobs.status IN ('waiting', 'pending', 'running'))
            THEN max(jobs.finished_at) END AS finished_at
FROM {schema}.workflows AS workflows
LEFT JOIN LATERAL {schema}.workflow_jobs(workflows.id, workflows.created_at) AS jobs ON true
WHERE workflows.id = %(id)s
GROUP BY workflows.id;

-- name: get_workflow_jobs :many
-- A workflow's jobs in insertion order, with their links (the first %(limit)s; NULL: all).
SELECT id, task_name, queue, status, attempts, max_attempts, workflow_step, next_ids,
       prev_ids, waiting_for, last_error, finished_at
FROM (
    SELECT steps.*
    FROM (SELECT %(id)s::bigint AS id) AS wanted
    LEFT JOIN {schema}.workflows AS made ON made.id = wanted.id
    CROSS JOIN LATERAL {schema}.workflow_jobs(wanted.id, coalesce(made.created_at, '-infinity'))
        AS steps
) AS jobs
ORDER BY id
LIMIT %(limit)s::bigint;

-- name: count_workflow_jobs :many
-- How many jobs a workflow has in each status.
SELECT steps.status, count(*)::bigint AS jobs
FROM (SELECT %(id)s::bigint AS id) AS wanted
LEFT JOIN {schema}.workflows AS made ON made.id = wanted.id
CROSS JOIN LATERAL {schema}.workflow_jobs(wanted.id, coalesce(made.created_at, '-infinity'))
    AS steps
GROUP BY steps.status
ORDER BY steps.status;

-- name: get_job_workflow :one
-- The workflow of one job (no row for a job outside any workflow, or no such job).
SELECT workflow_id, workflow_step FROM {schema}.all_jobs
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
      AND NOT EXISTS (SELECT 1 FROM {schema}.all_jobs AS jobs
                      WHERE jobs.workflow_id = workflows.id)
    RETURNING id
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: list_workflows :many
-- Workflows newest first (ids below %(before)s), with their steps done and in all (the
-- on_error job is not a step), state (as get_workflow), first start and end; %(status)s
-- keeps one state, %(id)s one workflow. A workflow's state is a probe of
-- jobs_workflow_unfinished_idx (running: such jobs are in jobs only) and, for a finished
-- one, of its failed and cancelled jobs (workflow_jobs: jobs_history_workflow_idx on the
-- partitions of that class from the workflow's day on, and jobs_workflow_idx for the
-- finished rows an older version left in jobs); the workflows listed have their jobs
-- read through workflow_jobs (the same indexes). A state
-- filter reads workflows until a page is full: the running ones are found from their
-- index by list_running_workflows, and the dashboard reads at most a bounded number of
-- jobs per page for the other states (list_workflows_scan).
WITH picked AS (
    SELECT workflows.id, workflows.kind, workflows.shape, workflows.created_at, state.state
    FROM {schema}.workflows AS workflows
    -- Scalar probes (LIMIT 1), not EXISTS: PostgreSQL may run an uncorrelated EXISTS as
    -- one hashed scan of every unfinished (or failed) job of the table.
    CROSS JOIN LATERAL (
        SELECT CASE WHEN (SELECT 1 FROM {schema}.jobs AS jobs
                          WHERE jobs.workflow_id = workflows.id
                            AND jobs.status IN ('waiting', 'pending', 'running')
                          LIMIT 1) IS NOT NULL
                    THEN 'running'
                    WHEN (SELECT 1
                          FROM {schema}.workflow_jobs(workflows.id, workflows.created_at)
                               AS jobs
                          WHERE jobs.status = 'failed'
                          LIMIT 1) IS NOT NULL
                    THEN 'failed'
                    WHEN (SELECT 1
                          FROM {schema}.workflow_jobs(workflows.id, workflows.created_at)
                               AS jobs
                          WHERE jobs.status = 'cancelled'
                          LIMIT 1) IS NOT NULL
                    THEN 'cancelled'
                    ELSE 'done' END AS state
    ) AS state
    WHERE (%(before)s::bigint IS NULL OR workflows.id < %(before)s::bigint)
      AND (%(id)s::bigint IS NULL OR workflows.id = %(id)s::bigint)
      AND (%(status)s::text IS NULL OR state.state = %(status)s::text)
    ORDER BY workflows.id DESC
    LIMIT %(limit)s::int
)
SELECT picked.id, picked.kind, picked.shape, picked.created_at, progress.steps,
       progress.steps_done, progress.started_at, picked.state,
       CASE WHEN picked.state <> 'running' THEN progress.finished_at END AS finished_at
FROM picked
CROSS JOIN LATERAL (
    -- At most %(steps_cap)s + 1 jobs read (NULL: all): past the cap, steps is the
    -- number read (more than the cap), and the times are not known (NULL).
    SELECT CASE WHEN count(*) > %(steps_cap)s::int THEN count(*)::int
                ELSE count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error')::int
           END AS steps,
           count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error'
                              AND jobs.status = 'done')::int AS steps_done,
           CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                ELSE min(jobs.started_at) END AS started_at,
           CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                ELSE max(jobs.finished_at) END AS finished_at
    FROM (SELECT jobs.workflow_step, jobs.status, jobs.started_at, jobs.finished_at
          FROM {schema}.workflow_jobs(picked.id, picked.created_at) AS jobs
          LIMIT %(steps_cap)s::int + 1) AS jobs
) AS progress
ORDER BY picked.id DESC;

-- name: list_running_workflows :many
-- list_workflows of the running workflows (any job waiting, pending or running), found
-- newest first from jobs_workflow_unfinished_idx (such jobs are in jobs only) by a skip
-- scan (running: each the next workflow id below the previous one, one index probe
-- each), not a DISTINCT of its entries: a running group of a million members costs one
-- probe, not a million entries read. Their steps are counted through workflow_jobs (the
-- finished ones are in jobs_history), up to %(steps_cap)s + 1 each.
WITH RECURSIVE running(workflow_id) AS (
    SELECT (SELECT jobs.workflow_id
            FROM {schema}.jobs AS jobs
            WHERE jobs.workflow_id IS NOT NULL
              AND jobs.status IN ('waiting', 'pending', 'running')
              AND (%(before)s::bigint IS NULL OR jobs.workflow_id < %(before)s::bigint)
            ORDER BY jobs.workflow_id DESC
            LIMIT 1)
    UNION ALL
    SELECT (SELECT jobs.workflow_id
            FROM {schema}.jobs AS jobs
            WHERE jobs.workflow_id IS NOT NULL
              AND jobs.status IN ('waiting', 'pending', 'running')
              AND jobs.workflow_id < running.workflow_id
            ORDER BY jobs.workflow_id DESC
            LIMIT 1)
    FROM running
    WHERE running.workflow_id IS NOT NULL
), picked AS (
    SELECT workflows.id, workflows.kind, workflows.shape, workflows.created_at,
           'running'::text AS state
    FROM running
    JOIN {schema}.workflows AS workflows ON workflows.id = running.workflow_id
    ORDER BY workflows.id DESC
    LIMIT %(limit)s::int
)
SELECT picked.id, picked.kind, picked.shape, picked.created_at, progress.steps,
       progress.steps_done, progress.started_at, picked.state, NULL::timestamptz AS finished_at
FROM picked
CROSS JOIN LATERAL (
    -- At most %(steps_cap)s + 1 jobs read (NULL: all): past the cap, steps is the
    -- number read (more than the cap), and the times are not known (NULL).
    SELECT CASE WHEN count(*) > %(steps_cap)s::int THEN count(*)::int
                ELSE count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error')::int
           END AS steps,
           count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error'
                              AND jobs.status = 'done')::int AS steps_done,
           CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                ELSE min(jobs.started_at) END AS started_at
    FROM (SELECT jobs.workflow_step, jobs.status, jobs.started_at, jobs.finished_at
          FROM {schema}.workflow_jobs(picked.id, picked.created_at) AS jobs
          LIMIT %(steps_cap)s::int + 1) AS jobs
) AS progress
ORDER BY picked.id DESC;

-- name: list_ended_workflows :many
-- list_workflows of the workflows in state %(status)s ('failed' or 'cancelled'), found
-- newest first from their jobs of that status (in jobs_history, the partitions of that
-- class merged in jobs_history_workflow_idx order; in jobs, the rows an older version
-- left there, through jobs_workflow_idx): reads the jobs of that status of the
-- workflows down to the page's last, not a probe of every workflow above it. Each
-- candidate is then checked as list_workflows does: not running (no job waiting,
-- pending or running) and, to be cancelled, no failed job.
WITH candidates AS (
    SELECT DISTINCT ended.workflow_id AS id
    FROM (
        SELECT jobs.workflow_id
        FROM {schema}.jobs AS jobs
        WHERE jobs.workflow_id IS NOT NULL AND jobs.status = %(status)s::text
          AND (%(before)s::bigint IS NULL OR jobs.workflow_id < %(before)s::bigint)
        UNION ALL
        SELECT history.workflow_id
        FROM {schema}.jobs_history AS history
        WHERE history.workflow_id IS NOT NULL AND history.status = %(status)s::text
          AND (%(before)s::bigint IS NULL OR history.workflow_id < %(before)s::bigint)
    ) AS ended
    ORDER BY ended.workflow_id DESC
), picked AS (
    SELECT workflows.id, workflows.kind, workflows.shape, workflows.created_at,
           %(status)s::text AS state
    FROM candidates
    JOIN {schema}.workflows AS workflows ON workflows.id = candidates.id
    WHERE (SELECT 1 FROM {schema}.jobs AS jobs
           WHERE jobs.workflow_id = workflows.id
             AND jobs.status IN ('waiting', 'pending', 'running')
           LIMIT 1) IS NULL
      AND (%(status)s::text = 'failed'
           OR (SELECT 1
               FROM {schema}.workflow_jobs(workflows.id, workflows.created_at) AS jobs
               WHERE jobs.status = 'failed'
               LIMIT 1) IS NULL)
    ORDER BY workflows.id DESC
    LIMIT %(limit)s::int
)
SELECT picked.id, picked.kind, picked.shape, picked.created_at, progress.steps,
       progress.steps_done, progress.started_at, picked.state, progress.finished_at
FROM picked
CROSS JOIN LATERAL (
    -- At most %(steps_cap)s + 1 jobs read (NULL: all): past the cap, steps is the
    -- number read (more than the cap), and the times are not known (NULL).
    SELECT CASE WHEN count(*) > %(steps_cap)s::int THEN count(*)::int
                ELSE count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error')::int
           END AS steps,
           count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error'
                              AND jobs.status = 'done')::int AS steps_done,
           CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                ELSE min(jobs.started_at) END AS started_at,
           CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                ELSE max(jobs.finished_at) END AS finished_at
    FROM (SELECT jobs.workflow_step, jobs.status, jobs.started_at, jobs.finished_at
          FROM {schema}.workflow_jobs(picked.id, picked.created_at) AS jobs
          LIMIT %(steps_cap)s::int + 1) AS jobs
) AS progress
ORDER BY picked.id DESC;

-- name: list_workflows_scan :many
-- list_workflows of the workflows in state %(status)s (done, failed or cancelled) that
-- reads at most %(scan)s workflow jobs (newest workflow first, ids below %(before)s:
-- all_jobs in (workflow_id, id) order, a merge of jobs_workflow_idx and each partition's
-- jobs_history_workflow_idx): a rare state costs what a page of a common one does. Each
-- workflow the scan read whole gets its state from the rows read; the oldest one it
-- reached (it may have read part of it) is probed as list_workflows does. One row at
-- least: floor (the oldest workflow id the scan reached: older ones were not searched)
-- and scanned (jobs read; fewer than %(scan)s: the scan reached the oldest workflow),
-- then the workflows found (id NULL when none).
WITH scanned AS (
    SELECT jobs.workflow_id, jobs.status
    FROM {schema}.all_jobs AS jobs
    WHERE jobs.workflow_id IS NOT NULL
      AND (%(before)s::bigint IS NULL OR jobs.workflow_id < %(before)s::bigint)
    ORDER BY jobs.workflow_id DESC, jobs.id DESC
    LIMIT %(scan)s::int
), bounds AS (
    SELECT min(workflow_id) AS floor, count(*)::int AS scanned FROM scanned
), states AS (
    SELECT scanned.workflow_id AS id,
           CASE WHEN bool_or(scanned.status IN ('waiting', 'pending', 'running'))
                THEN 'running'
                WHEN bool_or(scanned.status = 'failed') THEN 'failed'
                WHEN bool_or(scanned.status = 'cancelled') THEN 'cancelled'
                ELSE 'done' END AS state
    FROM scanned
    WHERE scanned.workflow_id > (SELECT floor FROM bounds)
    GROUP BY scanned.workflow_id
    UNION ALL
    SELECT bounds.floor,
           CASE WHEN (SELECT 1 FROM {schema}.jobs AS jobs
                      WHERE jobs.workflow_id = bounds.floor
                        AND jobs.status IN ('waiting', 'pending', 'running')
                      LIMIT 1) IS NOT NULL
                THEN 'running'
                WHEN (SELECT 1 FROM {schema}.workflow_jobs(
                               bounds.floor, coalesce(floor_made.created_at, '-infinity'))
                           AS jobs
                      WHERE jobs.status = 'failed'
                      LIMIT 1) IS NOT NULL
                THEN 'failed'
                WHEN (SELECT 1 FROM {schema}.workflow_jobs(
                               bounds.floor, coalesce(floor_made.created_at, '-infinity'))
                           AS jobs
                      WHERE jobs.status = 'cancelled'
                      LIMIT 1) IS NOT NULL
                THEN 'cancelled'
                ELSE 'done' END
    FROM bounds
    LEFT JOIN {schema}.workflows AS floor_made ON floor_made.id = bounds.floor
    WHERE bounds.floor IS NOT NULL
), picked AS (
    SELECT workflows.id, workflows.kind, workflows.shape, workflows.created_at, states.state
    FROM states
    JOIN {schema}.workflows AS workflows ON workflows.id = states.id
    WHERE states.state = %(status)s::text
    ORDER BY workflows.id DESC
    LIMIT %(limit)s::int
), found AS (
    SELECT picked.id, picked.kind, picked.shape, picked.created_at, progress.steps,
           progress.steps_done, progress.started_at, picked.state, progress.finished_at
    FROM picked
    CROSS JOIN LATERAL (
        -- At most %(steps_cap)s + 1 jobs read (NULL: all): past the cap, steps is the
        -- number read (more than the cap), and the times are not known (NULL).
        SELECT CASE WHEN count(*) > %(steps_cap)s::int THEN count(*)::int
                    ELSE count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error')::int
               END AS steps,
               count(*) FILTER (WHERE jobs.workflow_step IS DISTINCT FROM 'on_error'
                                  AND jobs.status = 'done')::int AS steps_done,
               CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                    ELSE min(jobs.started_at) END AS started_at,
               CASE WHEN count(*) > %(steps_cap)s::int THEN NULL
                    ELSE max(jobs.finished_at) END AS finished_at
        FROM (SELECT jobs.workflow_step, jobs.status, jobs.started_at, jobs.finished_at
              FROM {schema}.workflow_jobs(picked.id, picked.created_at) AS jobs
              LIMIT %(steps_cap)s::int + 1) AS jobs
    ) AS progress
)
SELECT bounds.floor, bounds.scanned, found.*
FROM bounds
LEFT JOIN found ON true
ORDER BY found.id DESC NULLS LAST;

-- name: count_workflows :one
-- The workflows in all and the running ones (with a job waiting, pending or running:
-- from jobs_workflow_unfinished_idx), each counted up to %(cap)s.
SELECT (SELECT count(*) FROM (SELECT FROM {schema}.workflows LIMIT %(cap)s::int) AS capped)::int
           AS total,
       (WITH RECURSIVE running(workflow_id, found) AS (
            -- A skip scan of the index (as list_running_workflows): one probe a workflow.
            SELECT (SELECT jobs.workflow_id
                    FROM {schema}.jobs AS jobs
                    WHERE jobs.workflow_id IS NOT NULL
                      AND jobs.status IN ('waiting', 'pending', 'running')
                    ORDER BY jobs.workflow_id DESC
                    LIMIT 1), 1
            UNION ALL
            SELECT (SELECT jobs.workflow_id
                    FROM {schema}.jobs AS jobs
                    WHERE jobs.workflow_id IS NOT NULL
                      AND jobs.status IN ('waiting', 'pending', 'running')
                      AND jobs.workflow_id < running.workflow_id
                    ORDER BY jobs.workflow_id DESC
                    LIMIT 1), running.found + 1
            FROM running
            WHERE running.workflow_id IS NOT NULL AND running.found < %(cap)s::int
        )
        SELECT count(*) FROM running WHERE running.workflow_id IS NOT NULL)::int AS running;

-- name: get_workflow_steps :many
-- A workflow's jobs for its page (graph), the first %(limit)s by id (workflow_jobs: the
-- finished ones are in the days of jobs_history since it was made): links, state,
-- attempts, timings, the result as JSON text cut to %(max_result)s characters (a result
-- stored in over
-- %(max_result_bytes)s bytes is not rendered: result_size says how large it is) and the
-- last line of the error. A time that is not finite (a row edited by hand) reads as
-- NULL: thousands of rows load faster without the 'infinity' loader. The columns are in
-- the order of WorkflowStep's fields (read as tuples: a page reads thousands of rows).
SELECT id, workflow_step, task_name, queue, status, attempts, max_attempts, prev_ids,
       next_ids, waiting_for,
       CASE WHEN isfinite(created_at) THEN created_at END AS created_at,
       CASE WHEN isfinite(started_at) THEN started_at END AS started_at,
       CASE WHEN isfinite(finished_at) THEN finished_at END AS finished_at,
       CASE WHEN pg_column_size(result) <= %(max_result_bytes)s::int
            THEN left(result::text, %(max_result)s::int) END AS result_text,
       CASE WHEN pg_column_size(result) <= %(max_result_bytes)s::int
            THEN length(result::text) > %(max_result)s::int
            ELSE result IS NOT NULL END AS result_cut,
       left((regexp_match(rtrim(right(last_error, 2000), E' \n\r\t'), '[^\n]*$'))[1], 500)
           AS error_line,
       coalesce(pg_column_size(result), 0) AS result_size
FROM (
    SELECT steps.*
    FROM (SELECT %(id)s::bigint AS id) AS wanted
    LEFT JOIN {schema}.workflows AS made ON made.id = wanted.id
    CROSS JOIN LATERAL {schema}.workflow_jobs(wanted.id, coalesce(made.created_at, '-infinity'))
        AS steps
) AS jobs
ORDER BY id
LIMIT %(limit)s::int;

-- name: find_stuck_steps :many
-- Waiting steps to heal: none of their predecessors is unfinished (each is done, failed,
-- cancelled or gone). At most %(limit)s, oldest first, ids above %(after)s. A healthy
-- step is passed over at its first unfinished predecessor. (A job of a sequence waits
-- too, for its turn, outside any workflow: migration 0023 moves it on.)
SELECT steps.id
FROM {schema}.jobs AS steps
WHERE steps.status = 'waiting'
  AND steps.workflow_id IS NOT NULL
  AND steps.id > %(after)s::bigint
  AND NOT EXISTS (SELECT 1
                  FROM unnest(steps.prev_ids) AS p(id)
                  JOIN {schema}.jobs AS preds ON preds.id = p.id
                  WHERE preds.status IN ('waiting', 'pending', 'running'))
ORDER BY steps.id
LIMIT %(limit)s::int;

-- name: heal_step :one
-- The healing pass for one step (workflow_heal_step, migration workflow_progress).
SELECT {schema}.workflow_heal_step(%(id)s::bigint) AS outcome;

-- name: retry_workflow_step :one
-- Retry a cancelled step that never received its input (workflow_retry_step): outcome
-- waiting, pending, refused (detail says why) or not_applicable; its queue.
SELECT outcome, detail, queue FROM {schema}.workflow_retry_step(%(id)s::bigint);

-- name: get_workflow_health :one
-- For doctor: waiting steps stuck now (as find_stuck_steps), incidents of the last
-- %(since)s seconds by kind, and unhealable steps still waiting.
SELECT (SELECT count(*)::int
        FROM {schema}.jobs AS steps
        WHERE steps.status = 'waiting'
          AND steps.workflow_id IS NOT NULL
          AND NOT EXISTS (SELECT 1
                          FROM unnest(steps.prev_ids) AS p(id)
                          JOIN {schema}.jobs AS preds ON preds.id = p.id
                          WHERE preds.status IN ('waiting', 'pending', 'running'))) AS stuck,
       (SELECT count(*)::int FROM {schema}.workflow_incidents
        WHERE kind = 'healed' AND last_at >= now() - make_interval(secs => %(since)s::float8))
           AS healed,
       (SELECT count(*)::int FROM {schema}.workflow_incidents
        WHERE kind = 'tolerated' AND last_at >= now() - make_interval(secs => %(since)s::float8))
           AS tolerated,
       (SELECT count(*)::int FROM {schema}.workflow_incidents AS incidents
        JOIN {schema}.jobs AS jobs ON jobs.id = incidents.job_id
        WHERE incidents.kind = 'unhealable' AND jobs.status = 'waiting') AS unhealable;

-- name: list_workflow_incidents :many
-- Incidents newest first (of one workflow, or all): tolerated errors of the triggers,
-- steps the healing pass moved on or could not; %(kind)s keeps one kind.
SELECT id, kind, workflow_id, job_id, step, detail, sqlstate, occurrences, first_at, last_at
FROM {schema}.workflow_incidents
WHERE (%(workflow_id)s::bigint IS NULL OR workflow_id = %(workflow_id)s::bigint)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY last_at DESC, id DESC
LIMIT %(limit)s::int;

-- name: prune_workflow_incidents :one
-- Forget incidents last seen over %(older_than)s seconds ago.
WITH deleted AS (
    DELETE FROM {schema}.workflow_incidents
    WHERE last_at < now() - make_interval(secs => %(older_than)s::float8)
    RETURNING id
)
SELECT count(*)::int AS deleted FROM deleted;

-- name: lock_healer :one
-- Try to become the schema's healer (a session lock, released by unlock_healer).
SELECT pg_try_advisory_lock(%(lock_class)s::int, hashtext(%(schema)s::text)) AS locked;

-- name: unlock_healer :one
-- Stop being the schema's healer.
SELECT pg_advisory_unlock(%(lock_class)s::int, hashtext(%(schema)s::text)) AS unlocked;
