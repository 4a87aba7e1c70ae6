-- pgtasks migration sequence_handed_with_claim (numbered by its file name): the jobs a
-- worker’s finish handed over (migration sequence_handover) come back with its claim’s
-- rows (docs/howto/flow-control.md, "Sequences"). Placeholders: {schema} (quoted
-- identifier).
--
-- Before, a round trip that ended sequence jobs and claimed sent two statements more
-- than a plain one: the taker’s set_config before its finish, and a SELECT of the handed
-- jobs after it. Now the finish statement sets the taker itself (its flag CTE), and the
-- plain claims read the handed jobs through this function in the same statement
-- (pgtasks/_store/base.py, the claims’ _handing form): one statement a round trip where
-- there were three. A limited claim’s round trip still reads them with a statement of
-- its own.
--
-- Online: one function created.

-- pgtasks:step transaction
-- The jobs noted in pgtasks.sequence_handed (this transaction’s turn handovers) still
-- running under p_worker’s lease, with the columns a claim returns but claimed_at (the
-- caller adds its clock), run_at and created_at within what Python’s datetime holds, as
-- the claims write them. Plain SQL, STABLE, no SET clause: the planner inlines it into
-- the claim that calls it.
CREATE FUNCTION {schema}.sequence_handed_jobs(p_worker bigint)
RETURNS TABLE (id bigint, task_name text, queue text, priority integer, args jsonb,
               kwargs jsonb, attempts integer, max_attempts integer, meta jsonb,
               run_at timestamptz, created_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT jobs.id, jobs.task_name, jobs.queue, jobs.priority, jobs.args, jobs.kwargs,
           jobs.attempts, jobs.max_attempts, jobs.meta,
           greatest(jobs.run_at, '0002-01-01 00:00:00+00'),
           least(greatest(jobs.created_at, '0002-01-01 00:00:00+00'),
                 '9000-01-01 00:00:00+00')
    FROM {schema}.jobs AS jobs
    WHERE jobs.id = ANY(string_to_array(
              nullif(current_setting('pgtasks.sequence_handed', true), ''), ',')::bigint[])
      AND jobs.status = 'running' AND jobs.locked_by = p_worker
    ORDER BY jobs.id
$$;
