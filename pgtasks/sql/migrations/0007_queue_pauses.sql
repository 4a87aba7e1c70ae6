-- pgtasks 0007: paused queues (`pgtasks queues pause|resume`, app.pause_queue()).
-- Placeholders: {schema} (quoted identifier).
--
-- A queue named here is not claimed by any worker: workers read this table on their
-- listener connection (at least once per poll interval) and leave its queues out of
-- their claims. Jobs of a paused queue that are already running finish. The table holds
-- a row per paused queue only, so reading it costs a worker nothing while none is.

CREATE TABLE {schema}.queue_pauses (
    queue     text        PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now()
);
