-- pgtasks 0015: the failed and cancelled jobs of workflows, indexed.
-- Placeholders: {schema} (quoted identifier).
--
-- A workflow's state is computed from its jobs (running while any is unfinished, then
-- failed, cancelled or done). Listing the workflows in one state (`pgtasks workflows
-- list --status`, the dashboard's workflows list) read every job of every workflow until
-- a page was full: with a rare state, every workflow job of the table. With this index
-- (and jobs_workflow_unfinished_idx, migration workflow_progress) a workflow's state is
-- three index probes that read no job row, and the failed and cancelled workflows are
-- found newest first from the index itself. It holds an entry per failed or cancelled
-- job of a workflow only: the jobs that succeed, and the jobs of no workflow, add none.
--
-- Online: built concurrently (reads, writes and claims go on while it is built).

-- pgtasks:step concurrently
CREATE INDEX CONCURRENTLY jobs_workflow_unsuccessful_idx ON {schema}.jobs (workflow_id, status)
    WHERE workflow_id IS NOT NULL AND status IN ('failed', 'cancelled');
