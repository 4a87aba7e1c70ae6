-- pgtasks migration shared_notify_gate (numbered by its file name): notify="auto" spaces
-- the notifications of a queue across every process of the database, not per process.
-- Placeholders: {schema} (quoted identifier).
--
-- PostgreSQL runs the commits of transactions that sent a NOTIFY one at a time (a lock on
-- the notification queue, held through the commit's WAL flush). Before, "auto" let each
-- process notify a queue once per notify_interval: 64 producer processes still made a few
-- hundred notifying commits a second and met that lock again. Now a one-job enqueue of an
-- "auto" App notifies only when no transaction notified its queue within the interval,
-- decided here: the queue's row of notify_gates is locked FOR UPDATE SKIP LOCKED when its
-- last notification is older than the interval, then stamped. A producer that finds the
-- row locked (another is notifying right now) or stamped recently sends nothing, without
-- waiting, and the rows of different queues are independent. (Only a queue's very first
-- gated enqueues, which insert its row, may wait for one another's insert to commit.)
--
-- The table is UNLOGGED (a stamp writes no WAL; after a crash it is empty and the next
-- enqueue of each queue notifies and stamps anew) and holds one row per queue that was
-- enqueued to by an "auto" App. A rolled-back enqueue rolls its stamp back with it.

-- pgtasks:step transaction
CREATE UNLOGGED TABLE {schema}.notify_gates (
    queue text PRIMARY KEY,
    notified_at timestamptz NOT NULL
);

-- Whether the caller's transaction may notify ``gate_queue`` now: true when no other
-- transaction notified it within ``spacing`` seconds (and none is notifying it right
-- now); the gate is then stamped in the caller's transaction.
CREATE FUNCTION {schema}.notify_gate_open(gate_queue text, spacing float8) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    since timestamptz := clock_timestamp() - make_interval(secs => spacing);
BEGIN
    PERFORM 1 FROM {schema}.notify_gates
    WHERE queue = gate_queue AND notified_at <= since
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE {schema}.notify_gates SET notified_at = clock_timestamp()
        WHERE queue = gate_queue;
        RETURN true;
    END IF;
    IF EXISTS (SELECT FROM {schema}.notify_gates WHERE queue = gate_queue) THEN
        RETURN false;  -- notified within the interval, or being notified now
    END IF;
    -- The queue's first gated enqueue (or the first since a crash emptied the table).
    INSERT INTO {schema}.notify_gates (queue, notified_at)
    VALUES (gate_queue, clock_timestamp())
    ON CONFLICT (queue) DO NOTHING;
    RETURN FOUND;
END;
$$;
