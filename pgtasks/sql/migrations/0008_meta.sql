-- pgtasks 0008: job metadata, progress and attempt history.
-- Placeholders: {schema} (quoted identifier).
--
-- meta: a JSON object set at enqueue (apply_async(meta=...)) and merged into by the
-- running attempt (JobContext.update_meta / set_progress, fenced by the lease). Keys
-- starting with "pgtasks." are written by pgtasks only (progress, trace context).
-- started_at: when the job's first attempt was claimed (set by the claim, kept after).
-- attempt_errors: one entry per attempt that ended with an error (retry, failure,
-- timeout, lost worker), appended by the finishing write; NULL until the first one.
-- Adding columns with constant defaults rewrites no rows; the check is added NOT VALID
-- (a catalog change) and validated in a step of its own, which reads the table while
-- writes go on.

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs
    ADD COLUMN meta jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    ADD COLUMN started_at timestamptz,
    ADD COLUMN attempt_errors jsonb;

ALTER TABLE {schema}.jobs
    ADD CONSTRAINT jobs_meta_check CHECK (jsonb_typeof(meta) = 'object') NOT VALID;

-- pgtasks:step transaction
ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_meta_check;
