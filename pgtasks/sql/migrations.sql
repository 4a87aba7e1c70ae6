-- The migrator's statements (pgtasks/_store/migrator.py) and the migrations table's.
-- Placeholders: {schema} (identifier). Parameters are named (%(name)s).

-- name: lock_migrations_session :one
-- Try to become the schema's migrator for this session (held until unlocked or disconnect).
SELECT pg_try_advisory_lock(%(lock_class)s, hashtext(%(schema)s)) AS locked;

-- name: wait_migrations_session :exec
-- Wait for the schema's migration lock, then hold it for this session.
SELECT pg_advisory_lock(%(lock_class)s, hashtext(%(schema)s));

-- name: unlock_migrations_session :one
-- Stop being the schema's migrator.
SELECT pg_advisory_unlock(%(lock_class)s, hashtext(%(schema)s)) AS unlocked;

-- name: configure_migration_session :one
-- No statement or lock timeout on the migrator's connection (a concurrent index build must
-- never be cancelled midway); returns the previous values, to be put back afterwards.
SELECT current_setting('statement_timeout') AS statement_timeout,
       current_setting('lock_timeout') AS lock_timeout,
       set_config('statement_timeout', '0', %(local)s),
       set_config('lock_timeout', '0', %(local)s);

-- name: restore_migration_session :exec
-- Put back the settings configure_migration_session found.
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false);

-- name: set_step_lock_timeout :exec
-- The longest wait for a lock in this transaction (a transactional migration step).
SELECT set_config('lock_timeout', %(lock_timeout)s, true);

-- name: get_migration_tables :one
-- Which of the schema's migration tables exist (the plan reads without creating them).
SELECT to_regclass(format('%%I.migrations', %(schema)s::text)) IS NOT NULL AS migrations,
       to_regclass(format('%%I.migration_steps', %(schema)s::text)) IS NOT NULL AS steps;

-- name: get_applied_steps :many
-- Steps done of migrations not finished yet (a migrator stopped in the middle of one).
SELECT version, step FROM {schema}.migration_steps ORDER BY version, step;

-- name: record_migration_step :exec
-- A step of an unfinished migration is done.
INSERT INTO {schema}.migration_steps (version, step) VALUES (%(version)s, %(step)s)
ON CONFLICT DO NOTHING;

-- name: clear_migration_steps :exec
-- Forget the steps of a migration once its version is recorded.
DELETE FROM {schema}.migration_steps WHERE version = %(version)s;

-- name: get_index_state :one
-- Whether an index of the schema exists and is valid (a failed concurrent build leaves
-- an invalid one behind).
SELECT i.indisvalid AS valid
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = %(name)s;

-- name: get_lock_holders :many
-- Sessions that hold locks on these relations of the schema, oldest transaction first:
-- what a migration step waited for.
SELECT a.pid, a.application_name, a.state, l.mode,
       extract(epoch FROM now() - a.xact_start)::float8 AS transaction_seconds,
       left(a.query, 120) AS query
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.granted
  AND l.pid <> pg_backend_pid()
  AND l.relation IN (SELECT to_regclass(format('%%I.%%I', %(schema)s::text, name))
                     FROM unnest(%(relations)s::text[]) AS name)
ORDER BY a.xact_start NULLS LAST
LIMIT 5;

-- name: get_partitions :many
-- The partitions under the table %(table)s of the schema, parents before their
-- partitions (empty: the table is not partitioned).
SELECT c.relname AS name, p.relname AS parent, t.isleaf AS leaf
FROM pg_partition_tree(format('%%I.%%I', %(schema)s::text, %(table)s::text)::regclass) AS t
JOIN pg_class AS c ON c.oid = t.relid
JOIN pg_class AS p ON p.oid = t.parentrelid
WHERE t.level > 0
ORDER BY t.level, c.relname;

-- name: get_table_indexes :many
-- The indexes of the table %(table)s of the schema: whether each is valid, its
-- definition without its name and table (what two partitions' indexes share), and the
-- index of the parent table it is attached to, if any.
SELECT ci.relname AS name, i.indisvalid AS valid,
       regexp_replace(pg_get_indexdef(i.indexrelid), '^CREATE (UNIQUE )?INDEX \S+ ON (ONLY )?\S+ ',
                      '\1') AS definition,
       (SELECT pc.relname FROM pg_inherits AS h JOIN pg_class AS pc ON pc.oid = h.inhparent
        WHERE h.inhrelid = i.indexrelid) AS attached_to
FROM pg_index AS i
JOIN pg_class AS ci ON ci.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = %(schema)s AND t.relname = %(table)s
ORDER BY ci.relname;
-- name: create_migrations_table :exec
-- Create the schema, the migration version table and the table of the steps done of an
-- unfinished migration, if they are missing.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.migration_steps (
    version    integer     NOT NULL,
    step       integer     NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (version, step)
);

-- name: get_applied_migrations :many
-- Versions applied so far.
SELECT version FROM {schema}.migrations ORDER BY version;

-- name: record_migration :exec
-- Record a version, in the transaction of its last step (or of the whole migration).
INSERT INTO {schema}.migrations (version, name) VALUES (%(version)s, %(name)s);
