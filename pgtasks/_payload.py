"""JSON encoding of task arguments and results, with the size limit.

Pure module: no I/O. PostgreSQL's jsonb is stricter than Python's json module
(no NaN or Infinity, no NUL characters), so both are rejected here, before
anything reaches the database, with a message that names the bad argument.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._errors import (
    PayloadNotSerializableError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    ReservedMetaKeyError,
)

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024

#: Longest task, queue and schedule name in UTF-8 bytes. Queue names travel in NOTIFY
#: payloads (at most 8000 bytes) and every name is shown in tables and logs.
MAX_NAME_BYTES = 200
#: Longest idempotency key in UTF-8 bytes: it lives in a btree index, whose entries
#: cannot pass about 2700 bytes; a schedule's tick key is its name plus the tick.
MAX_KEY_BYTES = 1000

#: The deepest nesting of lists and dicts (JSON arrays and objects) in each JSON document
#: pgtasks stores: a job's args array, its kwargs object, its meta object, a result. The
#: args array and the kwargs object count as a level: an argument nests at most 99 deep.
#: Deeper values are refused when enqueued (PayloadTooDeepError), returned or written to
#: meta: decoding one takes a level of the decoding thread's stack per level, and a value
#: nested some hundreds deep exhausts Python's recursion limit on a worker's deeper stack.
MAX_JSON_DEPTH = 100
#: The deepest nesting a worker, the CLI and the dashboard decode from a stored row: a
#: workflow step's args wrap its predecessors' results two levels deeper than they were
#: stored. A row nested deeper (written by SQL or another tool) fails its own job
#: ("cannot decode its arguments"), read without recursion past this bound.
MAX_DECODE_DEPTH = 2 * MAX_JSON_DEPTH

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=True
)


#: An escaped NUL: \\u0000 preceded by an even number of backslashes.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


#: What ``check_name`` calls the names that refuse control characters (keys may hold any).
CONTROLLED_NAMES = frozenset({"queue", "task name", "schedule name"})
#: C0 control characters (tab and newline included), DEL and C1.
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_name(what: str, value: object, max_bytes: int = MAX_NAME_BYTES) -> str:
    """``value`` if it can be a name (or key) PostgreSQL stores and indexes, else a
    ValueError that says why: not a non-empty str, NUL, a lone surrogate, too long; a
    queue, task or schedule name (CONTROLLED_NAMES) with a C0 or C1 control character
    (names are shown in terminals, logs and NOTIFY payloads)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters, got {value[:100]!r}")
    if what in CONTROLLED_NAMES and _CONTROL_CHARACTER.search(value):
        raise ValueError(
            f"{what} must not contain control characters (C0, DEL or C1: escape sequences,"
            f" tabs, newlines), got {value[:100]!r}"
        )
    size = len(value)
    if not value.isascii():
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(
                f"{what} must be valid UTF-8 text (it holds a lone surrogate), got {value[:100]!r}"
            ) from None
    if size > max_bytes:
        raise ValueError(
            f"{what} is {size} bytes long in UTF-8, over the limit of {max_bytes} bytes,"
            f" got {value[:40]!r}…"
        )
    return value


#: Values that hold nothing to look into (most arguments): not walked.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _check_keys(value: Any) -> None:
    """json would turn non-str dict keys into strings silently: refuse them instead."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"dict key {key!r} is not a string (JSON keys are strings)")
            if type(item) not in _LEAVES:
                _check_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if type(item) not in _LEAVES:
                _check_keys(item)


#: A JSON string (its escapes included), whose brackets are text, not nesting.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
#: Anything but a bracket, once strings are gone.
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep ``text`` (valid JSON) nests arrays and objects: 0 for a scalar, 1 for
    ``[1, 2]``, 2 for ``[[1]]``. No recursion: a text of any depth is measured."""
    if '"' in text:
        text = _JSON_STRING.sub("", text)
    brackets = _NOT_BRACKET.sub("", text)
    return max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def nested_deeper_than(text: str, bound: int) -> bool:
    """Whether the JSON ``text`` nests arrays and objects more than ``bound`` levels deep.
    Most texts hold fewer brackets than ``bound`` and are not measured."""
    return text.count("[") + text.count("{") > bound and json_depth(text) > bound


class _TooDeep(ValueError):
    """A value nested past the bound (turned into PayloadTooDeepError by the callers)."""


def _depth_message(depth: int | None, bound: int) -> str:
    nested = f"is nested {depth} levels deep" if depth is not None else "is nested too deeply"
    return (
        f"{nested} (lists and dicts), past the limit of {bound}: pgtasks stores JSON nested"
        f" at most {MAX_JSON_DEPTH} levels deep, the args list, the kwargs dict and the meta"
        " dict counting as one; flatten the value, or store it elsewhere and pass a reference"
    )


def _dumps(value: Any, bound: int = MAX_JSON_DEPTH) -> str:
    try:
        text = _checked_dumps(value)
    except RecursionError:
        raise _TooDeep(_depth_message(None, bound)) from None
    if nested_deeper_than(text, bound):
        raise _TooDeep(_depth_message(json_depth(text), bound))
    return text


def _error_class(error: Exception) -> type[PayloadNotSerializableError]:
    return PayloadTooDeepError if isinstance(error, _TooDeep) else PayloadNotSerializableError


#: What an argument that is not JSON should be instead.
_JSON_TYPES = "; pass JSON types (str, int, float, bool, None, list, dict with str keys)"


def _advice(error: Exception) -> str:
    return "" if isinstance(error, _TooDeep) else _JSON_TYPES


def _checked_dumps(value: Any) -> str:
    text = _ENCODER.encode(value)
    if "\\u0000" in text and _ESCAPED_NUL.search(text):
        raise ValueError("contains a NUL character (\\u0000), which PostgreSQL's jsonb rejects")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "contains a lone surrogate character, which is not valid UTF-8"
            ) from None
    # Only a text with an object in it can hold a non-str key (json converts them silently).
    if "{" in text:
        _check_keys(value)
    return text


def _explain(value: Any, error: Exception) -> str:
    if isinstance(error, TypeError) and "is not a string" not in str(error):
        return f"{type(value).__name__} is not JSON-serializable"
    return str(error)


def encode_arguments(
    task_name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    parameter_names: Sequence[str] = (),
) -> tuple[str, str]:
    """Encode a task's arguments as two JSON texts (an array and an object).

    Raises PayloadNotSerializableError (a TypeError) naming the argument that is not
    JSON, and PayloadTooLargeError (a ValueError) when the two texts together exceed
    ``max_bytes`` in UTF-8.
    """
    try:
        # json writes a tuple as a list; a mapping other than a dict is copied to one.
        args_json = _dumps(args if type(args) in (list, tuple) else list(args)) if args else "[]"
        kwargs_json = _dumps(kwargs if type(kwargs) is dict else dict(kwargs)) if kwargs else "{}"
    except (TypeError, ValueError):
        _raise_for_culprit(task_name, args, kwargs, parameter_names)
        raise  # pragma: no cover - _raise_for_culprit always raises
    size = len(args_json) + len(kwargs_json)
    # Characters are at most 4 bytes in UTF-8: encode only when the limit may be passed.
    if size * 4 > max_bytes:
        size = len(args_json.encode()) + len(kwargs_json.encode())
        if size > max_bytes:
            raise PayloadTooLargeError(
                f"arguments of task {task_name!r} encode to {size} bytes of JSON, over the "
                f"limit of {max_bytes} bytes (App(max_payload_bytes=...)); store large data "
                "elsewhere and pass a reference"
            )
    return args_json, kwargs_json


#: Prefix of the meta keys pgtasks writes itself (progress, trace context).
RESERVED_META_PREFIX = "pgtasks."


def encode_meta(
    what: str,
    meta: Mapping[str, Any] | None,
    *,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    internal: bool = False,
) -> str | None:
    """Encode a job's meta (a JSON object) as JSON text; None for no meta (or empty).

    Keys must be strings; user code (``internal`` False) may not use keys starting with
    ``pgtasks.`` (ReservedMetaKeyError). Raises PayloadNotSerializableError for values
    that are not JSON and PayloadTooLargeError past ``max_bytes``.
    """
    if meta is None:
        return None
    if type(meta) is not dict and not isinstance(meta, Mapping):
        raise PayloadNotSerializableError(
            f"{what} must be a mapping (a JSON object), got {type(meta).__name__}"
        )
    if not meta:
        return None
    for key in meta:
        if not isinstance(key, str):
            raise PayloadNotSerializableError(
                f"{what} key {key!r} is not a string (JSON object keys are strings)"
            )
        if not internal and key.startswith(RESERVED_META_PREFIX):
            raise ReservedMetaKeyError(
                f"{what} key {key!r} starts with {RESERVED_META_PREFIX!r}, a prefix reserved"
                " for pgtasks (progress, trace context); choose another key"
            )
    try:
        text = _dumps(dict(meta))
    except (TypeError, ValueError) as error:
        for key, value in meta.items():
            try:
                _dumps(value, MAX_JSON_DEPTH - 1)
            except (TypeError, ValueError) as value_error:
                raise _error_class(value_error)(
                    f"{what}[{key!r}] cannot be stored as JSON: {_explain(value, value_error)}"
                ) from None
        raise _error_class(error)(f"{what} cannot be stored as JSON: {error}") from None
    if len(text) * 4 > max_bytes and len(text.encode()) > max_bytes:
        raise PayloadTooLargeError(
            f"{what} encodes to {len(text.encode())} bytes of JSON, over the limit of"
            f" {max_bytes} bytes (App(max_payload_bytes=...))"
        )
    return text


def _raise_for_culprit(
    task_name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    parameter_names: Sequence[str],
) -> None:
    for index, value in enumerate(args):
        try:
            _dumps(value, MAX_JSON_DEPTH - 1)
        except (TypeError, ValueError) as error:
            label = (
                f"argument {parameter_names[index]!r} (position {index})"
                if index < len(parameter_names)
                else f"positional argument {index}"
            )
            raise _error_class(error)(
                f"{label} of task {task_name!r} cannot be stored as JSON: "
                f"{_explain(value, error)}{_advice(error)}"
            ) from error
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise PayloadNotSerializableError(
                f"keyword argument names of task {task_name!r} must be strings, got {key!r}"
            )
        try:
            _dumps(value, MAX_JSON_DEPTH - 1)
        except (TypeError, ValueError) as error:
            raise _error_class(error)(
                f"argument {key!r} of task {task_name!r} cannot be stored as JSON: "
                f"{_explain(value, error)}{_advice(error)}"
            ) from error
    raise PayloadNotSerializableError(f"arguments of task {task_name!r} cannot be stored as JSON")


def encode_result(task_name: str, value: Any, *, max_bytes: int | None = None) -> str:
    """Encode a task's return value as JSON text, or raise PayloadNotSerializableError
    (PayloadTooLargeError when it is over ``max_bytes`` of UTF-8)."""
    try:
        text = _dumps(value)
    except (TypeError, ValueError) as error:
        raise _error_class(error)(
            f"the return value of task {task_name!r} cannot be stored as JSON: "
            f"{_explain(value, error)}"
        ) from error
    if max_bytes is not None and len(text) * 4 > max_bytes:
        size = len(text.encode())
        if size > max_bytes:
            raise PayloadTooLargeError(
                f"the return value of task {task_name!r} encodes to {size} bytes of JSON,"
                f" over the limit of {max_bytes} bytes (App(max_result_bytes=...)); store"
                " large results elsewhere and return a reference"
            )
    return text


_decode = json.JSONDecoder().decode


class Unreadable:
    """A stored JSON value that cannot be decoded (nested past MAX_DECODE_DEPTH, written
    by SQL or another tool), as operator reads return it: ``reason`` says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<unreadable: {self.reason}>"


#: A job row's JSON columns, and what each reads as when it cannot be decoded.
_EMPTY_JSON: dict[str, Callable[[], Any]] = {
    "args": list,
    "kwargs": dict,
    "result": lambda: None,
    "meta": dict,
    "attempt_errors": lambda: None,
}


def replace_unreadable(values: dict[str, Any]) -> str | None:
    """Replace the :class:`Unreadable` values of a job row's JSON columns in ``values``
    with empty ones (a row written by SQL, nested past what pgtasks decodes): why they
    could not be decoded, or None when every one was."""
    reasons = []
    for name, empty in _EMPTY_JSON.items():
        value = values.get(name)
        if isinstance(value, Unreadable):
            reasons.append(f"{name} is {value.reason}")
            values[name] = empty()
    return "; ".join(reasons) or None


def decode_stored(text: str, *, bound: int = MAX_DECODE_DEPTH) -> Any:
    """A stored JSON text (jsonb as text) decoded, or a ValueError that says why not: it
    nests arrays and objects past ``bound`` levels (measured without recursion, before
    decoding), or decoding it failed (RecursionError included). Never anything else."""
    if nested_deeper_than(text, bound):
        raise ValueError(
            f"nested {json_depth(text)} levels deep (lists and dicts), past the"
            f" {bound} levels pgtasks decodes (values enqueued by pgtasks nest at most"
            f" {MAX_JSON_DEPTH}: the row was written by SQL or another tool)"
        )
    try:
        return _decode(text)
    except RecursionError:
        raise ValueError("nested too deeply to decode here") from None
    except ValueError as error:
        raise ValueError(f"not valid JSON ({error})") from None
