"""The SQL files and the Store that runs them (no database: parsing and rendering only)."""

from __future__ import annotations

import ast
import inspect
import re
from importlib import resources
from pathlib import Path

import pytest

from pgtasks._store.base import PARSE_CACHED_LENGTH, without_inner_comments
from pgtasks._store.store import Store, notification_channel
from pgtasks.sql import load_migrations, load_queries, parse_queries

STORE_SOURCE = Path(inspect.getfile(Store))
PRODUCER_METHODS = ("insert_jobs", "get_job", "get_job_status", "get_schema_version")
UNUSUAL_SCHEMAS = ("MySchema", "select", "order_2", "Order", "_x1")


def store_query_usages() -> list[tuple[str, str]]:
    """(method name, query name) for every ``self._rows(conn, "<name>", …)`` (or ``_made``,
    …) in Store.

    Store's methods live in ``pgtasks/_store/``: ``store.py`` and its per-area mixins.
    """
    methods = []
    for source in sorted(STORE_SOURCE.parent.glob("*.py")):
        tree = ast.parse(source.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                methods.extend(node.body)
    usages = []
    for method in methods:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(method):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("_rows", "_arows", "_made", "_copy", "_acopy", "_claimed")
            ):
                name_argument = node.args[1]
                assert isinstance(name_argument, ast.Constant), ast.dump(node)
                assert isinstance(name_argument.value, str)
                usages.append((method.name, name_argument.value))
    return usages


def test_queries_file_parses_into_named_queries_with_descriptions() -> None:
    queries = load_queries()

    assert len(queries) >= 10
    for name, query in queries.items():
        assert query.name == name
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", name), name
        assert query.cardinality in ("one", "many", "exec", "execrows")
        assert query.description, f"{name} has no one-line description"
        assert not query.description.startswith("name:")
        assert query.text.rstrip().endswith(";"), name


def test_query_parser_rejects_a_name_defined_twice() -> None:
    source = "-- name: get_job :one\n-- A.\nSELECT 1;\n-- name: get_job :one\n-- B.\nSELECT 2;\n"

    with pytest.raises(ValueError, match="'get_job' is defined twice"):
        parse_queries(source)


def test_query_parser_keeps_text_between_headers_only() -> None:
    source = (
        "-- preamble, not a query\n\n"
        "-- name: first_query :one\n-- Read one.\nSELECT 1;\n\n"
        "-- name: second_query :exec\n-- Do it.\nSELECT\n  2;\n"
    )

    queries = parse_queries(source)

    assert list(queries) == ["first_query", "second_query"]
    assert queries["first_query"].description == "Read one."
    assert queries["first_query"].text == "-- Read one.\nSELECT 1;"
    assert queries["second_query"].cardinality == "exec"


def test_every_store_usage_of_a_query_is_in_a_method_of_the_same_name() -> None:
    usages = store_query_usages()

    assert usages, "found no self._rows(...) calls in Store"
    for method, query in usages:
        assert method in (query, f"a{query}"), f"Store.{method} runs query {query!r}"


def test_every_query_in_the_file_is_used_by_store_and_store_uses_no_other() -> None:
    used = {query for _, query in store_query_usages()}

    assert used == set(load_queries())


def test_every_query_has_a_store_method_of_its_name() -> None:
    for name in load_queries():
        assert callable(getattr(Store, name, None)), f"Store has no method {name}"


@pytest.mark.parametrize("name", PRODUCER_METHODS)
def test_producer_store_methods_have_async_twins_with_the_same_parameters(name: str) -> None:
    sync_method = getattr(Store, name)
    async_method = getattr(Store, f"a{name}")
    sync_signature = inspect.signature(sync_method)
    async_signature = inspect.signature(async_method)

    assert inspect.iscoroutinefunction(async_method)
    assert not inspect.iscoroutinefunction(sync_method)
    assert list(sync_signature.parameters) == list(async_signature.parameters)
    for sync_parameter, async_parameter in zip(
        sync_signature.parameters.values(), async_signature.parameters.values(), strict=True
    ):
        assert sync_parameter.kind == async_parameter.kind
        assert sync_parameter.default == async_parameter.default
        if sync_parameter.name == "conn":
            assert sync_parameter.annotation == "psycopg.Connection[Any]"
            assert async_parameter.annotation == "psycopg.AsyncConnection[Any]"
        else:
            assert sync_parameter.annotation == async_parameter.annotation
    assert sync_signature.return_annotation == async_signature.return_annotation


def test_migrations_are_numbered_one_to_n_without_gaps() -> None:
    migrations = load_migrations()

    assert [migration.version for migration in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[0].name == "initial"


def test_every_file_in_the_migrations_folder_is_a_numbered_migration() -> None:
    folder = resources.files("pgtasks.sql").joinpath("migrations")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))

    assert names == [f"{m.version:04d}_{m.name}.sql" for m in load_migrations()]


def placeholder_count(text: str) -> int:
    return text.count("{schema}")


@pytest.mark.parametrize("schema", UNUSUAL_SCHEMAS)
def test_every_statement_quotes_an_unusual_schema_name(schema: str) -> None:
    store = Store(schema)

    for name, query in load_queries().items():
        rendered = store._statements[name].decode()
        assert "{" not in rendered and "}" not in rendered, f"{name}: placeholder left"
        assert rendered.count(f'"{schema}"') == placeholder_count(query.text), name
        # Channel names are string literals that contain the schema name: skip literals
        # (after the comments, whose apostrophes would pair with a literal's quotes).
        code = re.sub(r"'[^']*'", "''", re.sub(r"--[^\n]*", "", rendered))
        unquoted = re.findall(rf'(?<!")\b{re.escape(schema)}\b(?!")\.', code)
        assert not unquoted, f"{name}: schema not quoted in {rendered}"
        parameters = set(re.findall(r"%\((\w+)\)s", query.text))
        assert parameters == set(re.findall(r"%\((\w+)\)s", rendered)), name


@pytest.mark.parametrize("schema", UNUSUAL_SCHEMAS)
def test_every_migration_quotes_an_unusual_schema_name(schema: str) -> None:
    store = Store(schema)

    for migration in load_migrations():
        rendered = store._render(migration.text).decode()
        assert "{schema}" not in rendered and "{channel}" not in rendered
        assert rendered.count(f'"{schema}"') == placeholder_count(migration.text)
        code = re.sub(r"'[^']*'", "''", rendered)
        unquoted = re.findall(rf'(?<!")\b{re.escape(schema)}\b(?!")\.', code)
        assert not unquoted


def test_notification_channel_is_rendered_as_a_string_literal() -> None:
    store = Store("MySchema")

    assert store.channel == notification_channel("MySchema") == "pgtasks.MySchema"
    assert "pg_notify('pgtasks.MySchema', %(queue)s)" in store._statements["notify_queue"].decode()
    migration = store._render(load_migrations()[0].text).decode()
    assert "pg_notify('pgtasks.MySchema'" in migration


def test_a_schema_name_with_a_quote_cannot_break_out_of_the_identifier() -> None:
    store = Store('evil"; DROP TABLE users; --')

    rendered = store._statements["get_job_status"].decode()

    assert '"evil""; DROP TABLE users; --".jobs' in rendered


def test_every_statement_is_short_enough_for_psycopg_to_keep_its_parse() -> None:
    # psycopg splits a longer statement into its parts anew on every execution: the
    # finish statement of every round trip did so while its comments made it longer.
    from psycopg import _queries

    assert PARSE_CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH
    store = Store("pgtasks")
    for statements in (store._statements, store._binary_statements):
        for name, statement in statements.items():
            assert len(statement) <= PARSE_CACHED_LENGTH, f"{name}: {len(statement)} bytes"


def test_statements_keep_their_header_comment_and_drop_the_comment_lines_inside() -> None:
    store = Store("pgtasks")
    query = load_queries()["finish_jobs"]

    rendered = store._statements["finish_jobs"].decode()

    header = [line for line in query.text.splitlines() if line.startswith("--")][:2]
    assert rendered.splitlines()[:2] == header
    assert not [line for line in rendered.splitlines()[2:] if line.lstrip().startswith("--")]
    assert "RETURNING jobs.id, jobs.status, jobs.limit_groups" in rendered


def test_comment_lines_inside_strings_quoted_names_and_dollar_quotes_are_kept() -> None:
    statement = "\n".join(
        [
            "-- The header.",
            "-- Its second line.",
            "SELECT 'a multi-line",
            "-- string', E'it''s \\' still",
            "-- one', \"a",
            '-- name", $tag$ dollar',
            "-- text $tag$, /* a block",
            "-- comment */ 1 -- a comment after code stays",
            "  -- a comment line goes",
            "FROM t",
            "--another goes too",
            "WHERE x = '--' -- '",
            "-- and this one",
        ]
    )

    assert without_inner_comments(statement).splitlines() == [
        "-- The header.",
        "-- Its second line.",
        "SELECT 'a multi-line",
        "-- string', E'it''s \\' still",
        "-- one', \"a",
        '-- name", $tag$ dollar',
        "-- text $tag$, /* a block",
        "-- comment */ 1 -- a comment after code stays",
        "FROM t",
        "WHERE x = '--' -- '",
    ]
