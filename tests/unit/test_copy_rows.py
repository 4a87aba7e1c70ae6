"""The rows a large batch of plain jobs is copied as (params.copy_text), and the JobSpecs
built without the dataclass's ``__init__`` (no database)."""

from __future__ import annotations

import dataclasses

import pytest

from pgtasks._jobs import JobBatch, JobSpec, new_job_spec, spec_of
from pgtasks._store.params import copy_chunks, copy_text

FIELDS = ("task", "q", 3, "[1]", '{"a":2}', 5, None, None, None, None, None, None)


def test_a_spec_built_fast_is_an_ordinary_jobspec() -> None:
    fast = new_job_spec(*FIELDS)
    copied = spec_of({**fast.__dict__, "args_json": "[2]"})

    assert fast == JobSpec(*FIELDS)
    assert hash(fast) == hash(JobSpec(*FIELDS))
    assert type(fast) is JobSpec and type(copied) is JobSpec
    assert copied == dataclasses.replace(fast, args_json="[2]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.queue = "other"  # type: ignore[misc]


def test_copy_rows_escape_what_copy_text_format_gives_a_meaning() -> None:
    plain = JobSpec("shop.send", "emails", -2, "[]", "{}", 5)
    hostile = JobSpec(
        "tab\tand\\backslash",
        "line\nbreak\rreturn",
        7,
        '["a\\\\b", "\\u00e9"]',
        '{"k": "\\t"}',
        1,
        meta_json='{"p": "C:\\\\x"}',
    )

    text = copy_text([10, 11, 12], [plain, hostile, plain])

    lines = text.split("\n")
    assert lines[-1] == ""  # every row ends with a newline
    assert lines[0] == "10\t[]\t{}\t{}\tshop.send\temails\t-2\t5"
    assert lines[1] == (
        '11\t["a\\\\\\\\b", "\\\\u00e9"]\t{"k": "\\\\t"}\t{"p": "C:\\\\\\\\x"}'
        "\ttab\\tand\\\\backslash\tline\\nbreak\\rreturn\t7\t1"
    )
    assert lines[2] == "12\t[]\t{}\t{}\tshop.send\temails\t-2\t5"
    assert all(line.count("\t") == 7 for line in lines[:-1])


def test_copy_rows_come_in_pieces_sent_as_they_are_built() -> None:
    specs = [JobSpec("t", "q", 0, f"[{n}]", "{}", 1) for n in range(5)]

    pieces = list(copy_chunks(range(5), specs, rows=2))

    assert [piece.count("\n") for piece in pieces] == [2, 2, 1]
    assert "".join(pieces) == copy_text(range(5), specs)
    with pytest.raises(ValueError):
        list(copy_chunks(range(4), specs))  # one id per spec (the COPY fails: no row)


def test_a_batch_reads_as_the_specs_of_its_jobs_and_slices_as_a_batch() -> None:
    shared = JobSpec("t", "q", 2, "[]", "{}", 3, meta_json='{"m": 1}')
    batch = JobBatch(shared, [(f"[{n}]", "{}") for n in range(4)])

    specs = list(batch)
    tail = batch[2:]

    assert len(batch) == 4 and [spec.args_json for spec in specs] == ["[0]", "[1]", "[2]", "[3]"]
    assert specs[1] == dataclasses.replace(shared, args_json="[1]") and batch[1] is specs[1]
    assert type(tail) is JobBatch and tail.shared is shared
    assert tail.arguments == [("[2]", "{}"), ("[3]", "{}")]
