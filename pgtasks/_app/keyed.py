"""Fair queuing by key and sequences (strict order per key): ``@app.task(fair_key=,
sequence_key=, sequence_on_failure=)`` and the enqueue options of the same names.

A job's fair key and sequence key live in its meta under reserved keys, which the
database's triggers read (docs/howto/flow-control.md): nothing else of a
job row, and nothing of a plain job, changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .._errors import LimitKeyError, TaskRegistrationError
from .._payload import MAX_KEY_BYTES, check_name

#: The reserved meta keys (read by the database's triggers and the claim).
FAIR_KEY = "pgtasks.fair_key"
FAIR_RANK = "pgtasks.fair_rank"
SEQUENCE_KEY = "pgtasks.sequence"
SEQUENCE_ON_FAILURE = "pgtasks.sequence_on_failure"

#: What a failed job of a sequence does to the jobs after it: "hold" (they wait until it
#: is retried and done, or the sequence is released), "continue" (the next one starts),
#: "cancel" (they are cancelled).
SequenceOnFailure = Literal["hold", "continue", "cancel"]
ON_FAILURE_MODES: tuple[str, ...] = ("hold", "continue", "cancel")

#: A key: a str or int, or a function of the task's arguments returning one.
KeySource = str | int | Callable[..., Any]


def _check_source(task: str, option: str, value: object) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TaskRegistrationError(
            f"task {task!r}: {option}= must be a str, an int or a function of the task's"
            f" arguments returning one, got {value!r}"
        )
    try:
        check_name(option, str(value), MAX_KEY_BYTES)
    except ValueError as error:
        raise TaskRegistrationError(f"task {task!r}: {error}") from None


def check_on_failure(value: object, what: str = "sequence_on_failure=") -> str:
    if value not in ON_FAILURE_MODES:
        raise ValueError(f"{what} must be one of {', '.join(ON_FAILURE_MODES)}, got {value!r}")
    return str(value)


@dataclasses.dataclass(frozen=True)
class KeyedOptions:
    """A task's fair key and sequence key (each a value or a function of its arguments)."""

    task: str
    fair_key: KeySource | None = None
    sequence_key: KeySource | None = None
    on_failure: str = "hold"

    @classmethod
    def from_options(cls, task: str, options: Mapping[str, Any]) -> KeyedOptions:
        fair_key = options.get("fair_key")
        sequence_key = options.get("sequence_key")
        _check_source(task, "fair_key", fair_key)
        _check_source(task, "sequence_key", sequence_key)
        try:
            on_failure = check_on_failure(
                options.get("sequence_on_failure", "hold"), "task option sequence_on_failure="
            )
        except ValueError as error:
            raise TaskRegistrationError(f"task {task!r}: {error}") from None
        return cls(task, fair_key, sequence_key, on_failure)

    @property
    def declared(self) -> bool:
        return self.fair_key is not None or self.sequence_key is not None

    def meta(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        fair_key: KeySource | None = None,
        sequence_key: KeySource | None = None,
        on_failure: str | None = None,
    ) -> dict[str, str]:
        """The reserved meta entries of one job (empty for a job with neither key); a key
        given at enqueue replaces the task's. LimitKeyError (a ValueError) when a key
        cannot be computed; nothing is written then."""
        entries: dict[str, str] = {}
        fair = fair_key if fair_key is not None else self.fair_key
        if fair is not None:
            entries[FAIR_KEY] = self._key("fair_key", fair, args, kwargs)
        sequence = sequence_key if sequence_key is not None else self.sequence_key
        if sequence is not None:
            entries[SEQUENCE_KEY] = self._key("sequence_key", sequence, args, kwargs)
            mode = self.on_failure if on_failure is None else check_on_failure(on_failure)
            if mode != "hold":
                entries[SEQUENCE_ON_FAILURE] = mode
        elif on_failure is not None:
            raise ValueError("sequence_on_failure= needs a sequence_key= (task or enqueue option)")
        return entries

    def _key(
        self, option: str, source: KeySource, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str:
        value: Any = source
        if callable(source):
            try:
                value = source(*args, **kwargs)
            except Exception as error:
                raise LimitKeyError(
                    f"task {self.task!r}: {option} raised {type(error).__name__}: {error}"
                    " (it is called with the job's arguments at enqueue; nothing was written)"
                ) from error
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise LimitKeyError(
                f"task {self.task!r}: {option} must be (or return) a str or an int, got"
                f" {value!r} ({type(value).__name__}); nothing was written"
            )
        try:
            return check_name(option, str(value), MAX_KEY_BYTES)
        except ValueError as error:
            raise LimitKeyError(f"task {self.task!r}: {error}; nothing was written") from None
