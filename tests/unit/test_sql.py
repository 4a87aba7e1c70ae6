"""The SQL files and the Queries that runs them (no database: parsing and rendering only)."""

from __future__ import annotations

import ast
import inspect
import re
from importlib import resources
from pathlib import Path

import pytest

from pgtasks._store.base import (
    ANNOUNCED_CLAIMS,
    HANDING_CLAIMS,
    HEADER_LINES,
    PARSE_CACHED_LENGTH,
    without_inner_comments,
)
from pgtasks._store.migrator import head_version
from pgtasks._store.queries import Queries, notification_channel
from pgtasks.sql import (
    IN_FLIGHT,
    check_versions,
    load_fragments,
    load_migrations,
    load_queries,
    migration_versions,
    parse_fragments,
    parse_queries,
)

STORE_SOURCE = Path(inspect.getfile(Queries))
PRODUCER_METHODS = ("insert_jobs", "get_job", "get_job_status", "get_schema_version")
UNUSUAL_SCHEMAS = ("MySchema", "select", "order_2", "Order", "_x1")


def store_query_usages(*, pipelined: bool = False) -> list[tuple[str, str]]:
    """(method name, query name) for every ``self._rows(conn, "<name>", …)`` (or ``_made``,
    …) in Queries; ``pipelined``: also every statement a round trip sends in a pipeline
    (``self._statements["<name>"]``).

    Queries's methods live in ``pgtasks/_store/``: ``queries.py`` and its per-area mixins.
    """
    return [
        usage
        for source in sorted(STORE_SOURCE.parent.glob("*.py"))
        for usage in module_query_usages(source, pipelined=pipelined)
    ]


def module_query_usages(source: Path, *, pipelined: bool = False) -> list[tuple[str, str]]:
    """(method name, query name) for every query the classes of module ``source`` run."""
    methods = []
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
            elif (
                # A statement sent in a pipeline: self._statements["<name>"].
                pipelined
                and isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr in ("_statements", "_binary_statements")
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
            ):
                usages.append((method.name, node.slice.value))
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


def test_a_fragment_ends_the_query_before_it_and_is_no_query_itself() -> None:
    source = (
        "-- fragment: some_filter\n-- What it keeps.\n(a = 1)\n  AND (b = 2)\n\n"
        "-- name: first_query :many\n-- Read.\nSELECT 1 WHERE {some_filter};\n\n"
        "-- fragment: other_filter\n-- Another.\n(c = 3)\n"
    )

    assert list(parse_queries(source)) == ["first_query"]
    assert parse_queries(source)["first_query"].text == "-- Read.\nSELECT 1 WHERE {some_filter};"
    assert parse_fragments(source) == {
        "some_filter": "(a = 1)\n  AND (b = 2)",
        "other_filter": "(c = 3)",
    }


def test_a_fragment_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="fragment 'f' is defined twice"):
        parse_fragments("-- fragment: f\n(a)\n-- fragment: f\n(b)\n")


#: The statements that filter jobs with the dashboard's job filter, written once.
JOB_FILTERED = (
    "list_jobs_page",
    "list_finished_jobs_page",
    "list_unfinished_jobs_page",
    "list_workflow_jobs_page",
    "list_jobs_scan",
    "count_filtered_jobs",
    "retry_filtered_jobs",
    "cancel_filtered_jobs",
)


def test_the_job_filter_is_written_once_and_composed_into_each_filtered_statement() -> None:
    fragment = load_fragments()["job_filter"]
    queries = load_queries()
    store = Queries("pgtasks")
    rendered_filter = without_inner_comments(fragment)

    assert "%(due)s::boolean" in fragment and "--" not in fragment
    for name in JOB_FILTERED:
        assert "{job_filter}" in queries[name].text, name
        assert "%(queue)s::text IS NULL" not in queries[name].text, f"{name} spells the filter"
        assert rendered_filter in store._statements[name].decode(), name
    spelled = [name for name, query in queries.items() if "ILIKE %(log)s::text" in query.text]
    assert spelled == ["retry_filtered_steps"]  # no due condition: its own block


def test_every_fragment_is_composed_into_a_statement_and_holds_no_comment() -> None:
    texts = "\n".join(query.text for query in load_queries().values())

    assert set(load_fragments()) >= {"job_filter", "job_list_columns", "deep_payload_checks"}
    for name, fragment in load_fragments().items():
        assert f"{{{name}}}" in texts, f"fragment {name} is used by no statement"
        assert fragment and "--" not in fragment, name


def every_statement_name() -> list[str]:
    """The named queries and the claims' announced and handing forms (base.ANNOUNCED_CLAIMS,
    base.HANDING_CLAIMS)."""
    return [
        *load_queries(),
        *(f"{name}_announced" for name in ANNOUNCED_CLAIMS),
        *(f"{name}_handing" for name in HANDING_CLAIMS),
    ]


def test_no_statement_keeps_a_placeholder_unrendered() -> None:
    store = Queries("pgtasks")

    for name in every_statement_name():
        assert not re.search(rb"\{\w+\}", store._statements[name]), name


def test_statements_are_rendered_on_first_use_each_once_and_unknown_names_refused() -> None:
    store = Queries("pgtasks")

    assert not store._statements and not store._binary_statements  # nothing rendered yet
    claim = store._statements["claim_jobs"]
    assert store._statements["claim_jobs"] is claim  # kept
    assert store._statements["claim_jobs_announced"] == store._announced(claim) != claim
    assert store._statements["claim_jobs_handing"] == store._handing(claim) != claim
    assert b"%(queues)b" in store._binary_statements["claim_jobs"]
    assert b"%(queues)s" in claim
    for name in every_statement_name():
        text = store._statements[name]
        assert store._binary_statements[name] == re.sub(rb"(?<!%)%\((\w+)\)s", rb"%(\1)b", text)
    with pytest.raises(KeyError):
        store._statements["no_such_query"]
    with pytest.raises(KeyError):
        store._statements["no_such_query_announced"]


def test_every_store_usage_of_a_query_is_in_a_method_of_the_same_name() -> None:
    usages = store_query_usages()

    assert usages, "found no self._rows(...) calls in Queries"
    for method, query in usages:
        assert method in (query, f"a{query}"), f"Queries.{method} runs query {query!r}"


def test_every_query_in_the_file_is_used_by_store_and_store_uses_no_other() -> None:
    used = {query for _, query in store_query_usages(pipelined=True)}

    assert used == set(load_queries())


#: Statements of queries.sql are Queries' own: queries.py's, and QueriesBase's (base.py:
#: the shared root every mixin may call).
QUERIES_OWN = ("queries.py", "base.py")


def test_each_sql_file_pairs_with_the_store_module_that_runs_its_statements() -> None:
    sql_files = {
        entry.name.removesuffix(".sql"): parse_queries(entry.read_text("utf-8"))
        for entry in resources.files("pgtasks.sql").iterdir()
        if entry.name.endswith(".sql")
    }
    run_by = {
        source.name: {query for _, query in module_query_usages(source, pipelined=True)}
        for source in sorted(STORE_SOURCE.parent.glob("*.py"))
    }

    misplaced = {}
    for area, queries in sql_files.items():
        modules = QUERIES_OWN if area == "queries" else (f"{area}.py",)
        assert set(modules) <= set(run_by), f"sql/{area}.sql has no _store/{area}.py"
        runs = set().union(*(run_by[module] for module in modules))
        if stray := sorted(set(queries) - runs):
            misplaced[f"sql/{area}.sql"] = {
                name: [module for module, names in run_by.items() if name in names]
                for name in stray
            }
    assert not misplaced, (
        "move each statement to sql/<area>.sql of the _store/<area>.py that runs it"
        f" (statement: the modules that run it): {misplaced}"
    )
    without_sql = sorted(
        module
        for module, names in run_by.items()
        if names and module.removesuffix(".py") not in sql_files and module not in QUERIES_OWN
    )
    assert not without_sql, (
        f"these store modules run statements but have no sql file: {without_sql}"
    )


def test_the_pairing_check_sees_the_statements_a_module_runs(tmp_path: Path) -> None:
    source = (
        "class Mixin:\n"
        "    def claim_jobs(self, conn):\n"
        "        return self._rows(conn, 'claim_jobs', None)\n"
        "    async def aget_job(self, conn):\n"
        "        return await self._arows(conn, 'get_job', None)\n"
    )
    module = tmp_path / "probe.py"
    module.write_text(source)

    assert module_query_usages(module) == [("claim_jobs", "claim_jobs"), ("aget_job", "get_job")]


def test_every_query_has_a_store_method_of_its_name() -> None:
    for name in load_queries():
        assert callable(getattr(Queries, name, None)), f"Queries has no method {name}"


@pytest.mark.parametrize("name", PRODUCER_METHODS)
def test_producer_store_methods_have_async_twins_with_the_same_parameters(name: str) -> None:
    sync_method = getattr(Queries, name)
    async_method = getattr(Queries, f"a{name}")
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


def test_migrations_are_numbered_from_one_each_number_once() -> None:
    migrations = load_migrations()
    versions = [migration.version for migration in migrations]

    assert sorted([*versions, *IN_FLIGHT]) == list(range(1, len(versions) + len(IN_FLIGHT) + 1))
    assert migrations[0].name == "initial"


def test_the_versions_read_from_file_names_are_the_migrations_versions() -> None:
    # A worker checks its schema's version against migration_versions() without parsing
    # a migration.
    assert migration_versions() == tuple(migration.version for migration in load_migrations())
    assert head_version() == load_migrations()[-1].version


def test_versions_in_flight_are_still_missing() -> None:
    landed = sorted(IN_FLIGHT & {migration.version for migration in load_migrations()})

    assert not landed, f"remove {landed} from IN_FLIGHT (pgtasks/sql/__init__.py): they landed"


def test_a_version_in_flight_is_no_gap_and_any_other_missing_one_is() -> None:
    check_versions([1, 2, 4], frozenset({3}))

    with pytest.raises(RuntimeError, match=re.escape("missing 0002 (before 0003)")):
        check_versions([1, 3, 5], frozenset({4}))


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ([1, 2, 4, 5], "missing 0003 (before 0004)"),
        ([2, 3], "missing 0001 (before 0002)"),
        ([1, 4, 7], "missing 0002, 0003, 0005, 0006 (before 0004)"),
        ([1, 2, 2, 3], "0002 appear more than once"),
    ],
)
def test_migration_versions_with_a_gap_or_a_repeat_are_refused_by_name(
    versions: list[int], message: str
) -> None:
    with pytest.raises(RuntimeError, match=re.escape(message)):
        check_versions(versions)


def test_every_file_in_the_migrations_folder_is_a_numbered_migration() -> None:
    folder = resources.files("pgtasks.sql").joinpath("migrations")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))

    assert names == [f"{m.version:04d}_{m.name}.sql" for m in load_migrations()]


def placeholder_count(text: str) -> int:
    return text.count("{schema}")


@pytest.mark.parametrize("schema", UNUSUAL_SCHEMAS)
def test_every_statement_quotes_an_unusual_schema_name(schema: str) -> None:
    store = Queries(schema)

    for name, query in load_queries().items():
        rendered = store._statements[name].decode()
        assert "{" not in rendered and "}" not in rendered, f"{name}: placeholder left"
        assert rendered.count(f'"{schema}"') == placeholder_count(query.text), name
        # Channel names are string literals that contain the schema name: skip literals
        # (after the comments, whose apostrophes would pair with a literal's quotes).
        code = re.sub(r"'[^']*'", "''", re.sub(r"--[^\n]*", "", rendered))
        unquoted = re.findall(rf'(?<!")\b{re.escape(schema)}\b(?!")\.', code)
        assert not unquoted, f"{name}: schema not quoted in {rendered}"
        composed = [load_fragments().get(part, "") for part in re.findall(r"\{(\w+)\}", query.text)]
        parameters = set(re.findall(r"%\((\w+)\)s", "\n".join([query.text, *composed])))
        assert parameters == set(re.findall(r"%\((\w+)\)s", rendered)), name


@pytest.mark.parametrize("schema", UNUSUAL_SCHEMAS)
def test_every_migration_quotes_an_unusual_schema_name(schema: str) -> None:
    store = Queries(schema)

    for migration in load_migrations():
        rendered = store._render(migration.text).decode()
        assert "{schema}" not in rendered and "{channel}" not in rendered
        assert rendered.count(f'"{schema}"') == placeholder_count(migration.text)
        code = re.sub(r"'[^']*'", "''", rendered)
        unquoted = re.findall(rf'(?<!")\b{re.escape(schema)}\b(?!")\.', code)
        assert not unquoted


def test_notification_channel_is_rendered_as_a_string_literal() -> None:
    store = Queries("MySchema")

    assert store.channel == notification_channel("MySchema") == "pgtasks.MySchema"
    assert "pg_notify('pgtasks.MySchema', %(queue)s)" in store._statements["notify_queue"].decode()
    migration = store._render(load_migrations()[0].text).decode()
    assert "pg_notify('pgtasks.MySchema'" in migration


def test_a_schema_name_with_a_quote_cannot_break_out_of_the_identifier() -> None:
    store = Queries('evil"; DROP TABLE users; --')

    rendered = store._statements["get_job_status"].decode()

    assert '"evil""; DROP TABLE users; --".all_jobs' in rendered


#: What jobs' rows look like wherever they are (migration jobs_history): jobs_history
#: and each of its class and default partitions (day partitions are made LIKE
#: jobs_history), and the all_jobs view over both.
JOB_RELATIONS = (
    "jobs_history",
    "jobs_history_done",
    "jobs_history_failed",
    "jobs_history_done_default",
    "jobs_history_failed_default",
    "all_jobs",
)
#: The columns finish_jobs writes anew as it moves a job into jobs_history; it copies
#: every other column of jobs as it is (meta: a durable job's steps go into it).
FINISH_REWRITES = frozenset(
    {"status", "last_error", "result", "updated_at", "finished_at", "attempt_errors", "meta"}
)


def snapshot_columns(relation: str) -> list[tuple[str, str]]:
    """(name, type) of each column of ``relation`` in tests/schema.sql, in order (the
    snapshot lists a relation's columns by position and matches the migrations: see
    tests/migration/test_schema_snapshot.py)."""
    snapshot = (Path(__file__).parent.parent / "schema.sql").read_text()
    pattern = rf"^column {relation}\.(\w+) (.+?)(?: NOT NULL| DEFAULT .*| GENERATED .*)*$"
    return [(name, kind) for name, kind in re.findall(pattern, snapshot, re.MULTILINE)]


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses and string literals, each part
    stripped of its SQL comments."""
    text = re.sub(r"--[^\n]*", "", text)
    parts, depth, quoted, current = [], 0, False, []
    for char in text:
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [" ".join(part.split()) for part in parts]


def test_jobs_history_its_partitions_and_all_jobs_have_the_columns_of_jobs_in_order() -> None:
    """Statements move rows between jobs and jobs_history by position (INSERT … SELECT *,
    NEW.*, RETURNING *): a migration that adds a column to jobs adds it to jobs_history
    (ALTER TABLE: its partitions follow) and to all_jobs (CREATE OR REPLACE VIEW, the
    column last), in jobs' order and type."""
    jobs = snapshot_columns("jobs")

    assert len(jobs) >= 30
    for relation in JOB_RELATIONS:
        assert snapshot_columns(relation) == jobs, (
            f"{relation} does not have jobs' columns in jobs' order: migration jobs_history"
            " keeps them equal (see docs/reference/schema.md)"
        )


def test_the_finish_moves_every_column_of_jobs_into_jobs_history_by_name() -> None:
    """finish_jobs lists jobs' columns for its INSERT INTO jobs_history and selects each
    one from the deleted row by its own name, but for those it writes anew: a column
    added to jobs and not to this statement would reach the history empty."""
    jobs = [name for name, _ in snapshot_columns("jobs")]
    finish = load_queries()["finish_jobs"].text
    moved = re.search(
        r"INSERT INTO \{schema\}\.jobs_history\s*\((?P<columns>[^)]*)\)\s*SELECT(?P<values>.*?)"
        r"\s+FROM ended\b",
        finish,
        re.DOTALL,
    )
    assert moved is not None, "finish_jobs no longer moves the rows of ended"
    inserted = split_top_level(moved["columns"])
    values = split_top_level(moved["values"])

    assert inserted == jobs, "finish_jobs' column list is not jobs' (in jobs' order)"
    assert len(values) == len(inserted), (len(values), len(inserted))
    rewritten = {column for column, value in zip(inserted, values, strict=True) if value != column}
    assert rewritten == FINISH_REWRITES, (
        "finish_jobs copies each column of jobs by its name but for "
        f"{sorted(FINISH_REWRITES)}; these differ: {sorted(rewritten ^ FINISH_REWRITES)}"
    )


def test_every_statement_is_short_enough_for_psycopg_to_keep_its_parse() -> None:
    # psycopg splits a longer statement into its parts anew on every execution: the
    # finish statement of every round trip did so while its comments made it longer.
    from psycopg import _queries

    assert PARSE_CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH
    store = Queries("pgtasks")
    for statements in (store._statements, store._binary_statements):
        for name, statement in statements.items():
            assert len(statement) <= PARSE_CACHED_LENGTH, f"{name}: {len(statement)} bytes"


def test_statements_keep_their_header_comment_and_drop_the_comment_lines_inside() -> None:
    store = Queries("pgtasks")
    query = load_queries()["finish_jobs"]

    rendered = store._statements["finish_jobs"].decode()

    header = [line for line in query.text.splitlines() if line.startswith("--")][:HEADER_LINES]
    assert rendered.splitlines()[:HEADER_LINES] == header
    body = rendered.splitlines()[HEADER_LINES:]
    assert not [line for line in body if line.lstrip().startswith("--")]
    assert not [line for line in body if line != line.strip()]
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
            "    FROM t, $f$",
            "    indented inside dollar quotes $f$  ",
            "--another goes too",
            "WHERE x = '--' -- '",
            "-- and this one",
        ]
    )

    assert without_inner_comments(statement).splitlines() == [
        "-- The header.",
        "SELECT 'a multi-line",
        "-- string', E'it''s \\' still",
        "-- one', \"a",
        '-- name", $tag$ dollar',
        "-- text $tag$, /* a block",
        "-- comment */ 1 -- a comment after code stays",
        "FROM t, $f$",
        "    indented inside dollar quotes $f$  ",
        "WHERE x = '--' -- '",
    ]


def test_each_statement_is_stripped_once_whatever_the_number_of_schemas() -> None:
    """An App per schema, a view per store: the comment scan is not paid again each time."""
    first = Queries("test_strip_first")
    for name in load_queries():
        first._statements[name]
    before = without_inner_comments.cache_info()
    second = Queries("test_strip_second")
    for name in load_queries():
        second._statements[name]
    after = without_inner_comments.cache_info()
    assert after.misses == before.misses
    assert after.hits - before.hits == len(load_queries()) + len(load_fragments())
