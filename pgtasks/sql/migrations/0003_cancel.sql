-- pgtasks 0003: cancellation of running jobs.
-- A running job cannot be stopped from the database: cancel() flags it, the worker
-- that holds it is told (NOTIFY, and its heartbeat reads the flag), and the job's
-- fenced finish records it as cancelled whatever the attempt's outcome.

ALTER TABLE {schema}.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
