-- pgtasks 0002: state of periodic schedules, kept by beat.
-- Placeholders: {schema} (quoted identifier).

-- One row per schedule name. Every tick at or before processed_until has been
-- handled (enqueued, or passed over by the schedule's catch-up policy); a row is
-- created when beat first sees the schedule, at the database's now(), so a new
-- schedule enqueues nothing for the past. Rows of schedules removed from code stay
-- and are ignored.
CREATE TABLE {schema}.periodic (
    name            text        PRIMARY KEY,
    processed_until timestamptz NOT NULL,
    -- The latest tick a job was enqueued for, and that job (it may be pruned since).
    last_tick       timestamptz,
    last_job_id     bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
) WITH (
    -- Beat rewrites processed_until about once a second: leave room for HOT updates.
    fillfactor = 50
);
