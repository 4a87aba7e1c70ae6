-- Counters of how often the guarantees were exercised (migration 0014; see
-- docs/howto/metrics.md). Headers, placeholders and parameters as in queries.sql.

-- name: add_counters :exec
-- Add %(value)s[i] to counter %(name)s[i]: one row each (rows are summed when read).
INSERT INTO {schema}.counters (name, value)
SELECT name, value
FROM unnest(%(name)s::text[], %(value)s::bigint[]) AS added(name, value)
WHERE value <> 0;

-- name: get_counters :many
-- Every counter's total, by name (a name never counted has no row).
SELECT name, sum(value)::bigint AS value
FROM {schema}.counters
GROUP BY name
ORDER BY name;

-- name: fold_counters :execrows
-- Fold the rows of each counter into one (the pruner, now and then): rows added
-- meanwhile are left for the next fold, and of two folds at once the second skips the
-- rows the first removed, so no count is lost or doubled.
WITH removed AS (
    DELETE FROM {schema}.counters
    RETURNING name, value
)
INSERT INTO {schema}.counters (name, value)
SELECT name, sum(value)
FROM removed
GROUP BY name;
