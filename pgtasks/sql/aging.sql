-- Priority aging (App(priority_aging=), app.queue(name, priority_aging=);
-- docs/howto/flow-control.md). Headers, placeholders and parameters as in queries.sql.

-- name: claim_jobs_aged :many
-- claim_jobs where a due job's priority rises by one level per interval it has waited
-- since it was due: %(aging)s seconds (NULL: no aging), or its queue's own interval
-- (%(aged_queues)s, %(aged_seconds)s; NULL: none for that queue). It claims by effective
-- priority (then run_at, id), so a low-priority job's wait is bounded under any stream
-- of higher-priority work. Within one stored priority and one interval the oldest due
-- job has the highest effective priority, so each level of each interval is read in
-- claim order through jobs_claim_idx, at most %(limit)s rows (the levels found by a skip
-- scan of that index, at most 100 of them, highest first), and the rows of every level
-- are merged by effective priority. Rows read but not taken stay locked by this
-- transaction only until it ends (other claimers skip them).
WITH RECURSIVE levels(priority) AS (
    (SELECT j.priority FROM {schema}.jobs AS j
     WHERE j.status = 'pending'
     ORDER BY j.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM {schema}.jobs AS j
            WHERE j.status = 'pending' AND j.priority < levels.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM levels
    WHERE levels.priority IS NOT NULL
), classes(seconds, queues) AS (
    -- Queues by their own interval; the last class (queues NULL) is every other queue.
    SELECT q.seconds, array_agg(q.queue)
    FROM unnest(%(aged_queues)s::text[], %(aged_seconds)s::float8[]) AS q(queue, seconds)
    WHERE q.queue IS NOT NULL
    GROUP BY q.seconds
    UNION ALL
    SELECT %(aging)s::float8, NULL::text[]
), candidates AS (
    SELECT due.id, due.run_at,
           -- Seconds waited from the job's due time; a run_at written by hand as
           -- '-infinity' counts as very long, never as an error.
           least(level.priority + coalesce(floor(greatest(
               extract(epoch FROM now()) - extract(epoch FROM due.run_at), 0)
               / class.seconds), 0), 1e9) AS effective
    FROM (SELECT priority FROM levels WHERE priority IS NOT NULL LIMIT 100) AS level
    CROSS JOIN classes AS class
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at
        FROM {schema}.jobs AS j
        WHERE j.status = 'pending'
          AND j.priority = level.priority
          AND CASE WHEN class.queues IS NULL
                   THEN j.queue <> ALL(coalesce(%(aged_queues)s::text[], ARRAY[]::text[]))
                   ELSE j.queue = ANY(class.queues) END
          AND j.run_at <= now()
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]))
          AND (%(excluded_queues)s::text[] IS NULL
               OR j.queue <> ALL(%(excluded_queues)s::text[]))
          AND (%(task_names)s::text[] IS NULL OR j.task_name = ANY(%(task_names)s::text[]))
          AND j.limit_groups IS NULL
          AND j.attempts < 2147483647
          AND (NOT j.meta ? 'pgtasks.expires'
               OR j.meta -> 'pgtasks.expires' > to_jsonb(extract(epoch FROM now())))
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS due
), picked AS (
    SELECT id FROM candidates ORDER BY effective DESC, run_at, id LIMIT %(limit)s
)
UPDATE {schema}.jobs AS jobs
SET status = 'running',
    attempts = jobs.attempts + 1,
    max_attempts = greatest(jobs.max_attempts, jobs.attempts + 1),
    locked_by = %(worker_id)s,
    locked_at = now(),
    started_at = coalesce(jobs.started_at, now()),
    updated_at = now()
FROM picked
WHERE jobs.id = picked.id
RETURNING jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
          jobs.attempts, jobs.max_attempts, jobs.meta,
          greatest(jobs.run_at, '0002-01-01 00:00:00+00') AS run_at,
          least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'), '9000-01-01 00:00:00+00')
              AS created_at,
          clock_timestamp() AS claimed_at;
