-- The batch service's own statements (docs/howto/flow-control.md, "Batches"); its claims
-- are claim_jobs (queries.sql) for its tasks.
-- Placeholders: {schema} (quoted identifier).

-- name: release_orphaned_batch_jobs :many
-- After a batch claim failed with the connection: jobs of these (batch) tasks running
-- under this worker that its batch service does not hold (the claim committed, its reply
-- was lost) go back to pending with their attempt returned; they never started. The
-- claim loop never holds a batch task's job, so nothing of it is touched.
UPDATE {schema}.jobs AS jobs
SET status = 'pending',
    attempts = jobs.attempts - 1,
    run_at = now(),
    updated_at = now()
WHERE jobs.status = 'running'
  AND jobs.locked_by = %(worker_id)s
  AND jobs.task_name = ANY(%(task_names)s::text[])
  AND jobs.id <> ALL(%(known_ids)s::bigint[])
RETURNING jobs.id;
