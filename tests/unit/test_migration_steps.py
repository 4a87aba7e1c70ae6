"""Migration steps and the locks their statements take (parsing only, no database)."""

from __future__ import annotations

import pytest

from pgtasks.sql import Migration, load_migrations
from pgtasks.sql.steps import parse_steps, split_statements, statement_locks, step_locks


def locks_of(statement: str, new_tables: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    return [
        (lock.relation, lock.mode, lock.effect) for lock in statement_locks(statement, new_tables)
    ]


# -- parsing ---------------------------------------------------------------------------------------
def test_a_file_without_markers_is_one_transaction_step() -> None:
    steps = parse_steps(
        "-- header\nCREATE TABLE {schema}.a (id int);\nALTER TABLE {schema}.a ADD b int;"
    )

    assert [(step.number, step.kind) for step in steps] == [(1, "transaction")]
    assert len(steps[0].statements) == 2


def test_markers_split_a_file_into_numbered_steps_of_their_kind() -> None:
    text = (
        "-- pgtasks 9999: header comments only\n\n"
        "-- pgtasks:step concurrently\n"
        "CREATE UNIQUE INDEX CONCURRENTLY jobs_x ON {schema}.jobs (task_name);\n"
        "-- pgtasks:step transaction\n"
        "ALTER TABLE {schema}.jobs ADD COLUMN x int;\n"
        "-- pgtasks:step batched table=jobs size=500\n"
        "UPDATE {schema}.jobs SET x = 1 WHERE id >= %(start)s AND id < %(stop)s;\n"
    )

    steps = parse_steps(text)

    assert [(step.number, step.kind) for step in steps] == [
        (1, "concurrently"),
        (2, "transaction"),
        (3, "batched"),
    ]
    assert steps[0].index_name() == "jobs_x" and steps[0].builds_index
    assert (steps[2].table_name(), steps[2].size) == ("jobs", 500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- pgtasks:step sometimes\nSELECT 1;", "unknown step kind 'sometimes'"),
        (
            "-- pgtasks:step concurrently\nCREATE INDEX CONCURRENTLY a ON {schema}.jobs (id);"
            " CREATE INDEX CONCURRENTLY b ON {schema}.jobs (id);",
            "exactly one statement",
        ),
        ("-- pgtasks:step concurrently\nCREATE INDEX a ON {schema}.jobs (id);", "CONCURRENTLY"),
        ("-- pgtasks:step batched\nUPDATE {schema}.jobs SET x = 1;", "table=<name>"),
        (
            "-- pgtasks:step batched table=jobs\nUPDATE {schema}.jobs SET x = 1;",
            "%(start)s <= id < %(stop)s",
        ),
        ("-- pgtasks:step transaction\n-- nothing\n", "no statement"),
    ],
)
def test_a_malformed_step_is_refused_when_the_file_is_read(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Migration(9999, "broken", text)


def test_the_statement_splitter_keeps_quoted_text_and_function_bodies_whole() -> None:
    text = (
        "-- a comment; with a semicolon\n"
        "INSERT INTO t VALUES ('a;b', 'it''s');\n"
        'CREATE TABLE "odd;name" (x int);\n'
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$\n"
        "BEGIN\n  -- inside; kept\n  RETURN 1;\nEND;\n$body$;\n"
        "/* block; comment */ SELECT 2"
    )

    statements = split_statements(text)

    assert statements[0] == "INSERT INTO t VALUES ('a;b', 'it''s')"
    assert statements[1] == 'CREATE TABLE "odd;name" (x int)'
    assert "-- inside; kept\n  RETURN 1;" in statements[2]
    assert statements[3] == "SELECT 2"


def test_in_transaction_text_drops_concurrently_and_runs_a_batch_over_every_id() -> None:
    concurrently, batched = parse_steps(
        "-- pgtasks:step concurrently\nCREATE INDEX CONCURRENTLY a ON {schema}.jobs (id);\n"
        "-- pgtasks:step batched table=jobs size=10\n"
        "UPDATE {schema}.jobs SET x = 1 WHERE id >= %(start)s AND id < %(stop)s AND x %% 2 = 0;"
    )

    assert concurrently.in_transaction_text() == "CREATE INDEX a ON {schema}.jobs (id);"
    text = batched.in_transaction_text()
    assert "%(start)s" not in text and "(-9223372036854775807 - 1)" in text
    assert "9223372036854775807" in text and "x % 2" in text


# -- locks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (
            "CREATE INDEX CONCURRENTLY i ON {schema}.jobs (x)",
            ("jobs", "SHARE UPDATE EXCLUSIVE", "online"),
        ),
        ("CREATE UNIQUE INDEX i ON {schema}.jobs (x)", ("jobs", "SHARE", "blocking")),
        ("ALTER TABLE {schema}.jobs ADD COLUMN x int", ("jobs", "ACCESS EXCLUSIVE", "brief")),
        (
            "ALTER TABLE {schema}.jobs ADD COLUMN x jsonb NOT NULL DEFAULT '{{}}'",
            ("jobs", "ACCESS EXCLUSIVE", "brief"),
        ),
        (
            "ALTER TABLE {schema}.jobs ADD COLUMN x uuid DEFAULT gen_random_uuid()",
            ("jobs", "ACCESS EXCLUSIVE", "blocking"),
        ),
        (
            "ALTER TABLE {schema}.jobs ADD CONSTRAINT c CHECK (x > 0)",
            ("jobs", "ACCESS EXCLUSIVE", "blocking"),
        ),
        (
            "ALTER TABLE {schema}.jobs ADD CONSTRAINT c CHECK (x > 0) NOT VALID",
            ("jobs", "ACCESS EXCLUSIVE", "brief"),
        ),
        (
            "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT c",
            ("jobs", "SHARE UPDATE EXCLUSIVE", "online"),
        ),
        (
            "ALTER TABLE {schema}.jobs ALTER COLUMN x SET NOT NULL",
            ("jobs", "ACCESS EXCLUSIVE", "blocking"),
        ),
        (
            "ALTER TABLE {schema}.jobs ALTER COLUMN x TYPE bigint",
            ("jobs", "ACCESS EXCLUSIVE", "blocking"),
        ),
        (
            "ALTER TABLE {schema}.jobs SET (fillfactor = 70)",
            ("jobs", "SHARE UPDATE EXCLUSIVE", "online"),
        ),
        (
            "CREATE TRIGGER t AFTER UPDATE OF status ON {schema}.jobs"
            " FOR EACH ROW EXECUTE FUNCTION f()",
            ("jobs", "SHARE ROW EXCLUSIVE", "brief"),
        ),
        ("UPDATE {schema}.jobs SET x = 1", ("jobs", "ROW EXCLUSIVE", "blocking")),
        # A table of a few rows (one per declared limit): its rows' locks are brief.
        ("UPDATE {schema}.limits SET tokens = 0", ("limits", "ROW EXCLUSIVE", "brief")),
        ("DELETE FROM {schema}.workers WHERE pid = 0", ("workers", "ROW EXCLUSIVE", "blocking")),
        ("VACUUM {schema}.jobs", ("?", "ACCESS EXCLUSIVE", "blocking")),
    ],
)
def test_statement_locks_name_the_mode_and_what_it_blocks(
    statement: str, expected: tuple[str, str, str]
) -> None:
    assert locks_of(statement) == [expected]


def test_a_table_the_migration_creates_disturbs_nobody() -> None:
    assert locks_of("CREATE TABLE {schema}.fresh (id int)") == []
    assert locks_of("CREATE TYPE {schema}.pair AS (a int, b text)") == []
    assert locks_of("CREATE INDEX i ON {schema}.fresh (id)", ("fresh",)) == [
        ("fresh", "SHARE", "none")
    ]


def test_a_scan_after_a_write_blocking_lock_in_the_same_transaction_blocks_for_the_scan() -> None:
    (step,) = parse_steps(
        "ALTER TABLE {schema}.jobs ADD CONSTRAINT c CHECK (x > 0) NOT VALID;\n"
        "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT c;"
    )

    planned = step_locks(step, set())

    assert [lock.effect for statement in planned for lock in statement.locks] == [
        "brief",
        "blocking",
    ]
    assert "while this transaction holds ACCESS EXCLUSIVE" in planned[1].locks[0].note


def test_a_copy_from_a_table_after_a_trigger_on_it_in_the_same_transaction_blocks() -> None:
    """INSERT … SELECT reads its source (ACCESS SHARE): after CREATE TRIGGER on that table
    in the same transaction, writes and claims wait for the whole read."""
    (step,) = parse_steps(
        "CREATE TRIGGER t AFTER INSERT ON {schema}.jobs FOR EACH ROW EXECUTE FUNCTION f();\n"
        "INSERT INTO {schema}.keys (id) SELECT id FROM {schema}.jobs WHERE key IS NOT NULL;"
    )

    planned = step_locks(step, set())

    copy = planned[1].locks
    assert [(lock.relation, lock.effect) for lock in copy] == [
        ("keys", "online"),
        ("jobs", "blocking"),
    ]
    assert "while this transaction holds SHARE ROW EXCLUSIVE" in copy[1].note


def test_a_batched_copy_reads_one_batch_of_its_table_at_a_time() -> None:
    (step,) = parse_steps(
        "-- pgtasks:step batched table=jobs size=100\n"
        "INSERT INTO {schema}.keys (id) SELECT id FROM {schema}.jobs"
        " WHERE id >= %(start)s AND id < %(stop)s;"
    )

    (statement,) = step_locks(step, {"keys"})

    assert [(lock.relation, lock.mode, lock.effect) for lock in statement.locks] == [
        ("keys", "ROW EXCLUSIVE", "none"),
        ("jobs", "ACCESS SHARE", "online"),
    ]


def test_a_batched_update_locks_one_batch_at_a_time() -> None:
    (step,) = parse_steps(
        "-- pgtasks:step batched table=jobs size=100\n"
        "UPDATE {schema}.jobs SET x = 1 WHERE id >= %(start)s AND id < %(stop)s;"
    )

    (statement,) = step_locks(step, set())

    assert [(lock.mode, lock.effect) for lock in statement.locks] == [("ROW EXCLUSIVE", "online")]


def test_no_step_of_a_shipped_migration_blocks_the_queue_for_longer_than_a_catalog_change() -> None:
    """Every index on an existing table is built concurrently, every check on one is
    validated in a step of its own, and no statement is one the plan cannot name."""
    blocking = []
    for migration in load_migrations():
        new_tables: set[str] = set()
        for step in migration.steps:
            for statement in step_locks(step, new_tables):
                blocking += [
                    (migration.label, step.number, statement.summary, lock.note)
                    for lock in statement.locks
                    if lock.effect == "blocking"
                ]

    assert blocking == []
