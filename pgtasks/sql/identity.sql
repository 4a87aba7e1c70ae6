-- A store's identity (migration store_identity): its number and uid, for an App of
-- several stores.
-- Headers, placeholders and parameters as in queries.sql.

-- name: get_store_identity :one
-- The store's number, its uid, and whether it issued any job or workflow id yet (a store
-- that did keeps its number: its ids name it).
SELECT i.store_no, i.uid::text AS uid,
       (SELECT is_called FROM {schema}.jobs_id_seq)
       OR (SELECT is_called FROM {schema}.workflows_id_seq)
       OR EXISTS (SELECT 1 FROM {schema}.jobs) AS issued_ids
FROM {schema}.instance AS i;

-- name: lock_store_identity :one
-- In the renumbering transaction: the row locked, and whether ids were issued meanwhile.
SELECT i.store_no,
       (SELECT is_called FROM {schema}.jobs_id_seq)
       OR (SELECT is_called FROM {schema}.workflows_id_seq)
       OR EXISTS (SELECT 1 FROM {schema}.jobs) AS issued_ids
FROM {schema}.instance AS i FOR UPDATE;

-- name: set_store_number :exec
-- Give the store another number (its sequences are restarted in the same transaction).
UPDATE {schema}.instance SET store_no = %(store_no)s;

-- name: has_store_identity :one
-- Whether this connection's database holds the store's schema at all (checked before
-- reading its uid, so that a caller's transaction is never aborted by a missing table).
SELECT to_regclass(%(table)s) IS NOT NULL AS present;

-- name: get_store_uid :one
-- The store's uid (a caller's connection to it sees the same one).
SELECT uid::text AS uid FROM {schema}.instance;

-- name: count_stranded_jobs :many
-- Unfinished jobs by queue (doctor: those whose queue routes to another store now).
SELECT queue, count(*) AS jobs
FROM {schema}.jobs
WHERE status IN ('waiting', 'pending', 'running')
GROUP BY queue
ORDER BY queue;
