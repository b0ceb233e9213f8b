"""The one error hierarchy of little-workflow.

Every error carries a stable ``code`` (a string that scripts and tests may match on,
never reworded) and a message that says what happened, to what, and what to do. Driver
errors (``sqlite3``, ``psycopg``, ``OSError``) are translated at the boundary with
``raise ... from exc`` so the original stays visible in the traceback.

::

    LittleWorkflowError                      little_workflow_error
    ├── ConfigError                          config_error (and seed codes such as
    │                                          CHECKPOINT_SCHEMA_MISMATCH)
    ├── InvalidInputError                    invalid_input
    │   ├── InvalidIdError                   invalid_id
    │   ├── InvalidKeyError                  invalid_key
    │   ├── InvalidValueError                invalid_value
    │   └── InvalidStoreUrlError             invalid_store_url
    ├── StorageError                         storage_error
    │   ├── StorageUnavailableError          storage_unavailable
    │   ├── StorageBusyError                 storage_busy
    │   ├── ConflictError                    conflict
    │   ├── CorruptDataError                 corrupt_data
    │   ├── SchemaVersionError               schema_version
    │   └── UnknownEventTypeError            unknown_event_type
    ├── LockTimeoutError                     lock_timeout
    └── RunFailedError                       run_failed (carries ``cause_code``)

Later layers (runtime, harness, durable) add their errors here, under this root, so a
caller can catch ``LittleWorkflowError`` once.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConflictError",
    "CorruptDataError",
    "InvalidIdError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidStoreUrlError",
    "InvalidValueError",
    "LittleWorkflowError",
    "LockTimeoutError",
    "RunFailedError",
    "SchemaVersionError",
    "StorageBusyError",
    "StorageError",
    "StorageUnavailableError",
    "UnknownEventTypeError",
]


class LittleWorkflowError(Exception):
    """Root of every error the library raises on purpose.

    ``code`` is stable across versions; the message is for people and may improve.
    A subclass sets a default ``code``; a raise site may pass a more specific one
    (the seed's ``CHECKPOINT_SCHEMA_MISMATCH`` is a ``ConfigError`` with that code).
    """

    code: str = "little_workflow_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The human-readable message, without the code."""
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ConfigError(LittleWorkflowError):
    """The program was configured or called in a way that cannot work."""

    code = "config_error"


class InvalidInputError(LittleWorkflowError):
    """Input from outside (an id, a key, a value, a URL, a file) was rejected at the boundary.

    Nothing was written when this is raised.
    """

    code = "invalid_input"


class InvalidIdError(InvalidInputError):
    """An id that would become part of a path or a storage key is not acceptable."""

    code = "invalid_id"


class InvalidKeyError(InvalidInputError):
    """A storage key is empty, absolute, escapes its root, or holds a forbidden character."""

    code = "invalid_key"


class InvalidValueError(InvalidInputError):
    """A value cannot be stored: it is not plain JSON (NaN, bytes, a custom object, ...)."""

    code = "invalid_value"


class InvalidStoreUrlError(InvalidInputError):
    """A store URL names no known backend or is malformed."""

    code = "invalid_store_url"


class StorageError(LittleWorkflowError):
    """A storage backend failed to read or write."""

    code = "storage_error"


class StorageUnavailableError(StorageError):
    """The backend could not be reached or opened (server down, permission denied, ...)."""

    code = "storage_unavailable"


class ConflictError(StorageError):
    """A write lost a race it asked to detect: another writer got there first.

    Raised, for example, by an event-log append made with ``expected_seq`` when the
    run's last sequence number is no longer the expected one. Nothing was written.
    """

    code = "conflict"


class StorageBusyError(StorageError):
    """Another process held the database past the configured busy timeout.

    The write did not happen and may be retried; raise the store's ``busy_timeout``
    if this is expected under the load at hand.
    """

    code = "storage_busy"


class CorruptDataError(StorageError):
    """Stored data failed validation: truncated, altered, or not what this program wrote.

    The message names the file, key or run. Corrupt data is reported, never skipped
    and never overwritten.
    """

    code = "corrupt_data"


class SchemaVersionError(StorageError):
    """Stored data or a database schema carries a version this program does not know."""

    code = "schema_version"


class UnknownEventTypeError(StorageError):
    """An event read back from a log has a type this program has no model for."""

    code = "unknown_event_type"


class LockTimeoutError(LittleWorkflowError):
    """Another live process held a lock (a run, an outer loop) past the caller's timeout.

    Nothing was done. The message names the holder's pid where it is known.
    """

    code = "lock_timeout"


class RunFailedError(LittleWorkflowError):
    """A workflow run ended in failure.

    ``cause_code`` says why in a stable, machine-matchable way (``runtime_config_error``,
    ``step_failed``, ``max_visits_exceeded``, ...); ``reason`` refines it where the
    design names one (``outer_loop_input_mismatch``, ...).
    """

    code = "run_failed"

    def __init__(
        self,
        message: str,
        *,
        cause_code: str,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cause_code = cause_code
        self.run_id = run_id
        self.reason = reason
