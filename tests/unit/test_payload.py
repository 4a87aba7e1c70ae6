"""JSON encoding of arguments and results: pgtasks._payload (pure, no database)."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

import pytest

from pgtasks import PayloadError, PayloadNotSerializableError, PayloadTooLargeError
from pgtasks._payload import DEFAULT_MAX_PAYLOAD_BYTES, encode_arguments, encode_result

TASK = "shop.send_receipt"


def test_encodes_arguments_as_compact_json_array_and_object() -> None:
    args_json, kwargs_json = encode_arguments(
        TASK, (1, "é", None, [True, 2.5]), {"to": "a@example.com", "meta": {"n": 1}}
    )

    assert args_json == '[1,"é",null,[true,2.5]]'
    assert kwargs_json == '{"to":"a@example.com","meta":{"n":1}}'
    assert json.loads(args_json) == [1, "é", None, [True, 2.5]]


def test_encodes_no_arguments_as_empty_array_and_object() -> None:
    assert encode_arguments(TASK, (), {}) == ("[]", "{}")


def test_default_size_limit_is_one_mebibyte() -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 1024 * 1024


def test_names_a_bad_positional_argument_by_its_parameter_name() -> None:
    with pytest.raises(PayloadNotSerializableError) as caught:
        encode_arguments(TASK, (1, object()), {}, parameter_names=("order_id", "customer"))

    message = str(caught.value)
    assert "'customer'" in message
    assert "position 1" in message
    assert TASK in message
    assert "object is not JSON-serializable" in message
    assert "'order_id'" not in message


def test_names_a_bad_extra_positional_argument_by_its_position() -> None:
    with pytest.raises(PayloadNotSerializableError, match="positional argument 2"):
        encode_arguments(TASK, (1, 2, {3}), {}, parameter_names=("a", "b"))


def test_names_a_bad_keyword_argument_by_its_key() -> None:
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)

    with pytest.raises(PayloadNotSerializableError) as caught:
        encode_arguments(TASK, ("ok",), {"fine": 1, "when": when}, parameter_names=("x",))

    message = str(caught.value)
    assert "'when'" in message
    assert "datetime is not JSON-serializable" in message
    assert "'fine'" not in message


def test_not_serializable_error_is_a_type_error_and_a_payload_error() -> None:
    with pytest.raises(TypeError) as caught:
        encode_arguments(TASK, (Decimal("1.5"),), {})

    assert isinstance(caught.value, PayloadError)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_rejects_nan_and_infinity_which_jsonb_cannot_store(value: float) -> None:
    with pytest.raises(PayloadNotSerializableError, match="'ratio'"):
        encode_arguments(TASK, (), {"ratio": [1.0, value]})


@pytest.mark.parametrize(
    "value",
    ["a\x00b", ["ok", {"nested": "\x00"}], {"key\x00": 1}],
    ids=["string", "nested-value", "dict-key"],
)
def test_rejects_nul_characters_which_jsonb_cannot_store(value: Any) -> None:
    with pytest.raises(PayloadNotSerializableError, match="NUL") as caught:
        encode_arguments(TASK, (value,), {}, parameter_names=("note",))

    assert "'note'" in str(caught.value)


def test_accepts_a_literal_backslash_u0000_which_is_not_a_nul() -> None:
    text = "\\u0000"  # six characters: a backslash, then u0000

    args_json, _ = encode_arguments(TASK, (text,), {})

    assert json.loads(args_json) == [text]


def test_names_an_argument_holding_a_lone_surrogate_which_utf8_cannot_encode() -> None:
    with pytest.raises(PayloadNotSerializableError, match="'title'"):
        encode_arguments(TASK, (), {"title": "broken \ud800 text"})


@pytest.mark.parametrize(
    ("args", "kwargs", "culprit"),
    [((), {1: "one"}, "1"), (({1: "one"},), {}, "'lookup'")],
    ids=["keyword-name", "nested-dict-key"],
)
def test_rejects_dict_keys_that_are_not_strings(
    args: tuple[Any, ...], kwargs: dict[Any, Any], culprit: str
) -> None:
    with pytest.raises(PayloadNotSerializableError, match=culprit):
        encode_arguments(TASK, args, kwargs, parameter_names=("lookup",))


def test_rejects_keyword_names_json_cannot_hold() -> None:
    with pytest.raises(PayloadNotSerializableError, match=r"must be strings, got \(1, 2\)"):
        encode_arguments(TASK, (), {(1, 2): "pair"})  # type: ignore[dict-item]


def test_names_an_argument_holding_a_dict_with_keys_json_cannot_hold() -> None:
    with pytest.raises(PayloadNotSerializableError, match="'mapping'"):
        encode_arguments(TASK, (), {"mapping": {(1, 2): "pair"}})


def test_names_an_argument_holding_a_circular_reference() -> None:
    loop: list[Any] = []
    loop.append(loop)

    with pytest.raises(PayloadNotSerializableError, match="'tree'"):
        encode_arguments(TASK, (loop,), {}, parameter_names=("tree",))


def payload_of_size(total_bytes: int, unit: str = "x") -> tuple[str, ...]:
    """One string argument whose encoded payload ('["…"]' plus '{}') is ``total_bytes``."""
    overhead = len('[""]') + len("{}")
    unit_bytes = len(unit.encode())
    count, remainder = divmod(total_bytes - overhead, unit_bytes)
    return ("x" * remainder + unit * count,)


def test_accepts_a_payload_of_exactly_the_limit() -> None:
    args = payload_of_size(100)

    args_json, kwargs_json = encode_arguments(TASK, args, {}, max_bytes=100)

    assert len(args_json.encode()) + len(kwargs_json.encode()) == 100


def test_rejects_a_payload_one_byte_over_the_limit() -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        encode_arguments(TASK, payload_of_size(101), {}, max_bytes=100)

    message = str(caught.value)
    assert "101 bytes" in message
    assert "limit of 100 bytes" in message
    assert "max_payload_bytes" in message
    assert TASK in message
    assert isinstance(caught.value, ValueError)


def test_counts_keyword_arguments_towards_the_limit() -> None:
    encode_arguments(TASK, (), {"k": "x" * 90}, max_bytes=100)  # [] + {"k":"x…"} = 100 bytes

    with pytest.raises(PayloadTooLargeError):
        encode_arguments(TASK, ("x",), {"k": "x" * 90}, max_bytes=100)


@pytest.mark.parametrize("unit", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
def test_counts_the_limit_in_utf8_bytes_not_characters(unit: str) -> None:
    at_limit = payload_of_size(120, unit)
    over_limit = payload_of_size(121, unit)
    assert len(at_limit[0]) < 120  # fewer characters than bytes

    encode_arguments(TASK, at_limit, {}, max_bytes=120)
    with pytest.raises(PayloadTooLargeError, match="121 bytes"):
        encode_arguments(TASK, over_limit, {}, max_bytes=120)


def test_encodes_a_result_as_compact_json() -> None:
    assert encode_result(TASK, {"sent": True, "to": ["é"]}) == '{"sent":true,"to":["é"]}'
    assert encode_result(TASK, None) == "null"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (object(), "object is not JSON-serializable"),
        (float("nan"), "Out of range"),
        ("\x00", "NUL"),
    ],
    ids=["object", "nan", "nul"],
)
def test_rejects_a_result_that_is_not_json_and_says_why(value: Any, reason: str) -> None:
    with pytest.raises(PayloadNotSerializableError) as caught:
        encode_result(TASK, value)

    assert "return value" in str(caught.value)
    assert TASK in str(caught.value)
    assert reason in str(caught.value)
