-- pgtasks 0022: limits changed at runtime and the audit of operators' actions
-- (docs/howto/operations.md, "Change limits at runtime"; docs/howto/dashboard.md).
-- Placeholders: {schema} (quoted identifier).
--
-- * A stored limit remembers what the app declares (declared_*, written by every worker at
--   start) beside what applies (concurrency, rate_count, rate_period, burst, read by the
--   claim as before). An operator's change (`pgtasks limits set`, `control rate_limit`,
--   the dashboard) writes what applies and marks the row overridden: a worker starting
--   later updates the declared values only, and `pgtasks limits reset` copies them back.
-- * A limit an operator sets on a task or queue that the app does not declare is stored
--   with declared = false. The jobs of that task or queue carry it (pending and running
--   ones when it is set; new ones through the trigger below, enabled only while such a
--   limit exists, so an enqueue pays nothing otherwise).
-- * A paused limit has concurrency 0: no job under it starts (the claim's arithmetic takes
--   0 as "no room"); resume restores what applied before.
-- * audit_log: who did what to which limit or job, when, and the values before and after.
--
-- Online: one transaction of catalog changes on the small limits and workers tables, a new
-- table and a disabled trigger (the jobs table's lock is taken for a catalog change only),
-- then a step that validates the limits' new check (it reads that small table).

-- pgtasks:step transaction
ALTER TABLE {schema}.limits
    ADD COLUMN declared             boolean NOT NULL DEFAULT true,
    ADD COLUMN declared_concurrency integer,
    ADD COLUMN declared_rate_count  integer,
    ADD COLUMN declared_rate_period double precision,
    ADD COLUMN declared_burst       double precision,
    ADD COLUMN overridden_by        text,
    ADD COLUMN overridden_at        timestamptz,
    ADD COLUMN paused_concurrency   integer,
    ADD COLUMN paused               boolean NOT NULL DEFAULT false;

UPDATE {schema}.limits
SET declared_concurrency = concurrency, declared_rate_count = rate_count,
    declared_rate_period = rate_period, declared_burst = burst;

-- 0 is a paused limit's concurrency (the check is validated in the last step).
ALTER TABLE {schema}.limits DROP CONSTRAINT IF EXISTS limits_concurrency_check;
ALTER TABLE {schema}.limits
    ADD CONSTRAINT limits_concurrency_check CHECK (concurrency IS NULL OR concurrency >= 0)
    NOT VALID;

CREATE TABLE {schema}.audit_log (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL,
    before jsonb,
    after  jsonb
);
CREATE INDEX audit_log_target_idx ON {schema}.audit_log (target, id);

-- New jobs of a task or queue under a limit the app does not declare carry it.
CREATE FUNCTION {schema}.stamp_runtime_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_names text[];
BEGIN
    SELECT array_agg(name) INTO v_names
    FROM {schema}.limits
    WHERE NOT declared
      AND name IN ('task:' || NEW.task_name, 'queue:' || NEW.queue)
      AND NOT coalesce(name = ANY(NEW.limit_groups), false);
    IF v_names IS NOT NULL THEN
        NEW.limit_groups := ARRAY(
            SELECT DISTINCT g FROM unnest(coalesce(NEW.limit_groups, ARRAY[]::text[]) || v_names)
                 AS g ORDER BY 1);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_runtime_limits BEFORE INSERT ON {schema}.jobs
    FOR EACH ROW EXECUTE FUNCTION {schema}.stamp_runtime_limits();
ALTER TABLE {schema}.jobs DISABLE TRIGGER jobs_runtime_limits;

-- A worker's pool of thread and event-loop slots resized at runtime (`pgtasks control
-- pool_grow|pool_shrink`): the bounds it started with, and the size an operator asked
-- for until the worker applies it (NULL then; NULL bounds: a worker that takes no resize).
ALTER TABLE {schema}.workers
    ADD COLUMN concurrency_min    integer,
    ADD COLUMN concurrency_max    integer,
    ADD COLUMN concurrency_wanted integer;

-- pgtasks:step transaction
ALTER TABLE {schema}.limits VALIDATE CONSTRAINT limits_concurrency_check;
