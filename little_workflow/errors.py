"""The one error hierarchy of little-workflow.

Every error carries a stable ``code`` (a string that scripts and tests may match on,
never reworded) and a message that says what happened, to what, and what to do. Driver
errors (``sqlite3``, ``psycopg``, ``OSError``) are translated at the boundary with
``raise ... from exc`` so the original stays visible in the traceback.

::

    LittleWorkflowError                      little_workflow_error
    ├── ConfigError                          config_error (and seed codes such as
    │   │                                      CHECKPOINT_SCHEMA_MISMATCH)
    │   ├── ToolDefinitionError              tool_definition_error
    │   ├── MissingExtraError                missing_extra (an optional dependency is not
    │   │                                      installed: names the extra to install)
    │   └── FunctionNotAllowedError          function_not_allowed (a computed workflow
    │                                          names a function the runtime was not given)
    ├── InvalidInputError                    invalid_input
    │   ├── InvalidIdError                   invalid_id
    │   ├── InvalidKeyError                  invalid_key
    │   ├── InvalidValueError                invalid_value
    │   │   ├── PayloadTooLargeError         payload_too_large (a step's payload over the limit)
    │   │   └── RunInputError                run_input_invalid (the input does not fit the
    │   │                                      workflow; checked before a run exists)
    │   ├── InvalidStoreUrlError             invalid_store_url
    │   ├── LwirError                        lwir_error
    │   │   ├── LwirValidationError          lwir_invalid (lists every problem)
    │   │   └── LwirLoadError                lwir_load_error (unreadable, unknown suffix)
    │   │       ├── LwirSyntaxError          lwir_syntax (malformed JSON/YAML: file:line)
    │   │       └── LwirTooLargeError        lwir_too_large (size, aliases, depth)
    │   ├── TemplateError                    template_error (missing key, wrong type)
    │   │   └── TemplateSyntaxError          template_syntax
    │   ├── InvalidStepPathError             invalid_step_path (and invalid_branch_key)
    │   ├── InvalidForkPointError            invalid_fork_point (fork_unknown_step, ...)
    │   ├── ToolArgumentsError               tool_arguments_invalid
    │   ├── FrameError                       ipc_frame_invalid (a frame on the IPC wire)
    │   │   ├── FrameTooLargeError           ipc_frame_too_large
    │   │   └── UnknownFrameTypeError        ipc_frame_unknown_type
    │   ├── IpcProtocolError                 ipc_protocol_error (and a server's bye codes)
    │   ├── AckBeyondLastSeqError            ipc_ack_beyond_last_seq
    │   └── InvalidAddressError              ipc_address_invalid
    ├── StorageError                         storage_error
    │   ├── StorageUnavailableError          storage_unavailable
    │   │   └── DataDirPermissionsError      data_dir_permissions (others can read; not ours)
    │   ├── StorageBusyError                 storage_busy
    │   ├── ConflictError                    conflict
    │   ├── CorruptDataError                 corrupt_data
    │   ├── BlobNotFoundError                blob_not_found
    │   ├── SchemaVersionError               schema_version
    │   └── UnknownEventTypeError            unknown_event_type
    ├── ModelProviderError                   model_provider_error (status, retryable)
    ├── CapabilityDriftError                 capability_drift (resume refused: config changed)
    ├── CodeDriftError                       code_drift (resume refused: code changed, strict)
    ├── ToolCallError                        tool_call_failed (a tool raised; told to the model)
    ├── RecordedFailure                      recorded_failure (a recorded failure, replayed)
    ├── PlannerError                         planner_gave_up (no valid workflow in its turns)
    ├── OutputValidationError                output_invalid (no answer matched the output schema)
    ├── SupervisorError                      supervise_failed (supervise() raised)
    ├── AwaitingAnswerError                  awaiting_answer (suspended on an ask-user prompt)
    ├── RunWaitingError                      run_waiting (the run waits for an event or a timer)
    ├── EventRefusedError                    not_waiting (the run finished, or its wait timed out)
    │   └── EventPayloadError                invalid_event_payload (fails the wait's schema)
    ├── SubprocessError                      subprocess_error (child_failed, child_lost)
    ├── IpcError                             ipc_error (ipc_listen_failed, ipc_address_in_use)
    │   ├── IpcConnectionError               ipc_connection_failed (and ipc_connection_lost)
    │   ├── IpcAuthError                     ipc_auth_failed
    │   └── SequenceGapError                 ipc_sequence_gap
    ├── LockTimeoutError                     lock_timeout
    ├── LeaseLostError                       lease_lost (a worker's lease on a run ended)
    ├── ArtifactNotFoundError                artifact_not_found
    ├── MemoMismatchError                    memo_identity_mismatch
    ├── NonDeterminismError                  non_determinism (code-first body and log disagree)
    ├── StepFailedError                      step_failed (a code-first step failed for good)
    └── RunFailedError                       run_failed (carries ``cause_code``)

Later layers (runtime, harness, durable) add their errors here, under this root, so a
caller can catch ``LittleWorkflowError`` once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "AckBeyondLastSeqError",
    "ArtifactNotFoundError",
    "AwaitingAnswerError",
    "BlobNotFoundError",
    "CapabilityDriftError",
    "CodeDriftError",
    "ConfigError",
    "ConflictError",
    "CorruptDataError",
    "DataDirPermissionsError",
    "EventPayloadError",
    "EventRefusedError",
    "FrameError",
    "FrameTooLargeError",
    "FunctionNotAllowedError",
    "InvalidAddressError",
    "InvalidForkPointError",
    "InvalidIdError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidStepPathError",
    "InvalidStoreUrlError",
    "InvalidValueError",
    "IpcAuthError",
    "IpcConnectionError",
    "IpcError",
    "IpcProtocolError",
    "LeaseLostError",
    "LittleWorkflowError",
    "LockTimeoutError",
    "LwirError",
    "LwirLoadError",
    "LwirSyntaxError",
    "LwirTooLargeError",
    "LwirValidationError",
    "MemoMismatchError",
    "MissingExtraError",
    "ModelProviderError",
    "NonDeterminismError",
    "OutputValidationError",
    "PayloadTooLargeError",
    "PlannerError",
    "Problem",
    "RecordedFailure",
    "RunFailedError",
    "RunInputError",
    "RunWaitingError",
    "SchemaVersionError",
    "SequenceGapError",
    "StepFailedError",
    "StorageBusyError",
    "StorageError",
    "StorageUnavailableError",
    "SubprocessError",
    "SupervisorError",
    "TemplateError",
    "TemplateSyntaxError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolDefinitionError",
    "UnknownEventTypeError",
    "UnknownFrameTypeError",
    "shown",
]

#: The longest a value quoted in a message gets, in characters (``shown``).
SHOWN_LIMIT = 80


def shown(value: object, *, limit: int = SHOWN_LIMIT) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters with ``...``.

    Every message that echoes a value a user gave (an id, a step path, a key) quotes it
    through here: a 10,000-character id is a typing accident or an attack, and printing
    it whole, once per mention, buries the message.
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


class ToolDefinitionError(ConfigError):
    """A Python callable cannot be a tool: a parameter's type has no JSON schema, ..."""

    code = "tool_definition_error"


class MissingExtraError(ConfigError):
    """A feature needs an optional dependency that is not installed.

    ``extra`` names the ``little-workflow[extra]`` that installs it; the message says the
    one command to run. Raised before anything is written.
    """

    code = "missing_extra"

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class FunctionNotAllowedError(ConfigError):
    """A workflow computed at run time names a function this runtime was not given.

    A document a model wrote (a planner's answer, any ``definition:`` a step computed) is
    data: its ``fn`` may name only a function registered with the runtime, never one to
    import. ``step_path`` is where the document names it, ``function`` the reference.
    Nothing was imported or called.
    """

    code = "function_not_allowed"

    def __init__(self, message: str, *, step_path: str, function: str) -> None:
        super().__init__(message)
        self.step_path = step_path
        self.function = function


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


class PayloadTooLargeError(InvalidValueError):
    """A payload (a step's output, a tool result, a model request, ...) exceeds the store's
    limit (``Runtime(max_payload_bytes=...)``, 64 MiB by default).

    Raised at the step that produced it, before anything of it is written: the run stays
    resumable, and completes once the limit is raised. ``where`` names the step path or
    call, ``size`` and ``limit`` are bytes of the payload's JSON.
    """

    code = "payload_too_large"

    def __init__(self, message: str, *, where: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.where = where
        self.size = size
        self.limit = limit


class RunInputError(InvalidValueError):
    """A run's input does not fit its workflow, found before the run exists.

    Checked against the workflow's ``input:`` JSON Schema, the ``${input...}`` references
    every completed run evaluates, or a code-first workflow's parameters and type hints
    (docs/lwir.md, "Input validation"). ``problems`` lists each one at its field of the
    input (``input.query``, ``input.items[0]``); ``field`` is the first one's, and
    ``workflow`` names the workflow (its file when it has one). Nothing was written.
    """

    code = "run_input_invalid"

    def __init__(self, problems: Iterable[Problem], *, workflow: str) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.workflow = workflow
        self.field = self.problems[0].path if self.problems else "input"
        count = len(self.problems)
        head = f"the input does not fit workflow {workflow}"
        if count == 1:
            text = f"{head}: {self.problems[0]}; no run was started"
        else:
            lines = [f"{head} ({count} problems; no run was started):"]
            lines.extend(f"  {problem}" for problem in self.problems[:_MAX_LISTED_PROBLEMS])
            if count > _MAX_LISTED_PROBLEMS:
                lines.append(f"  ... and {count - _MAX_LISTED_PROBLEMS} more")
            text = "\n".join(lines)
        super().__init__(text)


class InvalidStoreUrlError(InvalidInputError):
    """A store URL names no known backend or is malformed."""

    code = "invalid_store_url"


# A document with hundreds of problems is usually one mistake repeated; the first ones
# say enough and the message stays readable.
_MAX_LISTED_PROBLEMS = 50


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a workflow document, at a place in it.

    ``path`` uses the document's own field names (``steps[3].body[0].fn``); it is
    ``document`` when the problem is the document as a whole.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class LwirError(InvalidInputError):
    """A workflow document (LWIR) was rejected: it is unreadable or invalid."""

    code = "lwir_error"


class LwirValidationError(LwirError):
    """A workflow document is well-formed JSON/YAML but not a valid workflow.

    ``problems`` holds every problem found (not only the first), each pointing at its
    place in the document; the message lists them one per line as ``<path>: <message>``.
    """

    code = "lwir_invalid"

    def __init__(self, problems: Iterable[Problem], *, source: str | None = None) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.source = source
        where = f" in {source}" if source else ""
        count = len(self.problems)
        lines = [f"invalid LWIR workflow{where} ({count} problem{'s' if count != 1 else ''}):"]
        lines.extend(f"  {problem}" for problem in self.problems[:_MAX_LISTED_PROBLEMS])
        if count > _MAX_LISTED_PROBLEMS:
            lines.append(f"  ... and {count - _MAX_LISTED_PROBLEMS} more")
        super().__init__("\n".join(lines))

    def with_source(self, source: str | None) -> LwirValidationError:
        """The same problems, with the message naming ``source`` (a file name)."""
        return LwirValidationError(self.problems, source=source)


class LwirLoadError(LwirError):
    """A workflow file could not be read: missing, unreadable, or of an unknown format."""

    code = "lwir_load_error"


class LwirSyntaxError(LwirLoadError):
    """A workflow document is not well-formed JSON or YAML (or uses YAML outside JSON).

    ``source``, ``line`` and ``column`` (1-based) say where, when known.
    """

    code = "lwir_syntax"

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        place = source or "<document>"
        if line is not None:
            place += f":{line}"
            if column is not None:
                place += f":{column}"
        super().__init__(f"{place}: {message}")


class LwirTooLargeError(LwirLoadError):
    """A workflow document exceeds a limit: bytes, expanded YAML nodes, or nesting depth.

    Raised before the whole document is materialized, so a hostile document (a YAML
    "billion laughs") costs little.
    """

    code = "lwir_too_large"


class TemplateError(InvalidInputError):
    """A ``${...}`` template could not be evaluated: a missing key, a wrong type, ...

    ``reference`` is the ``${...}`` text at fault and ``where`` the place of the
    template in the document (``steps[0].with.query``), when known.
    """

    code = "template_error"

    def __init__(
        self,
        message: str,
        *,
        reference: str | None = None,
        where: str | None = None,
        code: str | None = None,
    ) -> None:
        self.reference = reference
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(prefix + message, code=code)


class TemplateSyntaxError(TemplateError):
    """A template string is not well-formed (``${steps.}``, an unclosed ``${``, ...).

    ``position`` is the 0-based offset in the template where parsing stopped.
    """

    code = "template_syntax"

    def __init__(
        self,
        message: str,
        *,
        template: str,
        position: int,
        where: str | None = None,
    ) -> None:
        self.template = template
        self.position = position
        self.bare_message = message
        super().__init__(message, reference=template, where=where)


class InvalidStepPathError(InvalidInputError):
    """A step path (``review-candidates[cand_123].worker.visit[0]``) or branch key is invalid.

    The code is ``invalid_step_path`` for a malformed path and ``invalid_branch_key``
    for a map item whose key field is missing or not a string or integer.
    """

    code = "invalid_step_path"


class InvalidForkPointError(InvalidInputError):
    """A fork (``Runtime.fork``) cannot start at the step path it was given.

    Codes: ``fork_unknown_step`` (the source run's workflow has no such step),
    ``fork_point_not_reached`` (the source run never got there, or left a step before it
    unfinished), ``fork_step_changed`` (a step the fork would keep differs in the new
    workflow). ``fork_at`` is the path that would work instead, when there is one.
    """

    code = "invalid_fork_point"

    def __init__(
        self, message: str, *, code: str | None = None, run_id: str, at: str, fork_at: str | None
    ) -> None:
        super().__init__(message, code=code)
        self.run_id = run_id
        self.at = at
        self.fork_at = fork_at


class StorageError(LittleWorkflowError):
    """A storage backend failed to read or write."""

    code = "storage_error"


class StorageUnavailableError(StorageError):
    """The backend could not be reached or opened (server down, permission denied, ...)."""

    code = "storage_unavailable"


class DataDirPermissionsError(StorageUnavailableError):
    """A path in the data directory lets other users in, and this process cannot make it
    private: it is owned by another user, or its file system refuses ``chmod``.

    ``path`` is the path; the message gives the ``chmod`` command that fixes it.
    """

    code = "data_dir_permissions"

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


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


class BlobNotFoundError(StorageError):
    """A blob an event refers to (or a caller asked for) is not in the blob store."""

    code = "blob_not_found"


class SchemaVersionError(StorageError):
    """Stored data or a database schema carries a version this program does not know."""

    code = "schema_version"


class UnknownEventTypeError(StorageError):
    """An event read back from a log has a type this program has no model for."""

    code = "unknown_event_type"


class ToolArgumentsError(InvalidInputError):
    """A model asked for a tool call whose arguments do not match the tool's schema.

    The message says which argument and why; the harness hands it back to the model.
    """

    code = "tool_arguments_invalid"


class ModelProviderError(LittleWorkflowError):
    """A model call failed: the transport, an HTTP status, or an answer that is not valid.

    ``status`` is the HTTP status when there was one; ``retryable`` says whether the same
    request may succeed later (429, 5xx, a dropped connection). ``rate_limited`` says the
    provider refused for the rate of calls (HTTP 429 or a ``rate_limit_error`` body, but
    not a spent quota, which waiting does not cure), as opposed to a failure of the call;
    ``retry_after`` is the wait in seconds the provider asked for (``Retry-After`` or
    ``retry-after-ms``), as asked, when it asked. Messages never contain the API key.
    """

    code = "model_provider_error"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        rate_limited: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.rate_limited = rate_limited
        self.retry_after = retry_after


class CapabilityDriftError(LittleWorkflowError):
    """A run's harness session was started with another configuration than it has now.

    Raised on resume, before any model or tool is called. ``changes`` lists each changed
    manifest field as ``(path, old, new)``; the message says how to get out: restore the
    prior state, start fresh with a new run id, or fork the resumed run at ``fork_at``
    (the first step that cannot be kept) to keep the work done before it.
    """

    code = "capability_drift"

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        scope: str,
        changes: list[tuple[str, object, object]],
        fork_at: str | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.scope = scope
        self.changes = changes
        self.fork_at = fork_at


class CodeDriftError(LittleWorkflowError):
    """A code-first run's code changed since it was pinned, and the resume was told to
    refuse that (``Runtime(on_code_drift="refuse")``, ``--on-code-drift refuse``).

    Raised on resume before anything runs or is written. ``changes`` lists each changed
    function as ``(name, old hash, new hash)``, the workflow's first; the message says
    how to get out.
    """

    code = "code_drift"

    def __init__(self, message: str, *, run_id: str, changes: list[tuple[str, str, str]]) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.changes = changes


class ToolCallError(LittleWorkflowError):
    """A tool raised: recorded as ``harness.tool_call.failed`` and sent back to the model.

    ``error_code`` is the tool's error code (its ``code``, else its class name).
    """

    code = "tool_call_failed"

    def __init__(self, message: str, *, error_code: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class RecordedFailure(LittleWorkflowError):
    """A unit whose failure is recorded, replayed as that failure: the call is not made."""

    code = "recorded_failure"

    def __init__(self, message: str, *, error_code: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class SubprocessError(LittleWorkflowError):
    """A child started through a ``SubprocessAdapter`` did not give a result.

    Code ``child_failed``: its target raised (``error_type`` and the message are the
    child's). Code ``child_lost``: it died without recording a result (killed, crashed).
    """

    code = "subprocess_error"

    def __init__(
        self, message: str, *, code: str | None = None, handle_id: str, error_type: str = ""
    ) -> None:
        super().__init__(message, code=code)
        self.handle_id = handle_id
        self.error_type = error_type


class IpcError(LittleWorkflowError):
    """An IPC connection or listener failed.

    Raise sites pass a more specific code where one helps a caller decide what to do:
    ``ipc_listen_failed`` (the socket could not be bound) and ``ipc_address_in_use``
    (another live server holds the socket path or port).
    """

    code = "ipc_error"


class IpcConnectionError(IpcError):
    """A connection could not be made, or was lost.

    The code says which: ``ipc_connection_failed`` or ``ipc_connection_lost``.
    A ``DurableClient`` retries these per its ``ReconnectPolicy`` before raising one.
    """

    code = "ipc_connection_failed"


class IpcAuthError(IpcError):
    """The server refused the ``hello``: the token was missing or wrong.

    Not retried: the same token would be refused again.
    """

    code = "ipc_auth_failed"


class SequenceGapError(IpcError):
    """A client received a durable frame past the next expected seq: frames are missing.

    They were compacted after another client acked them, or the queue's storage was
    discarded while the client kept its ack store. Never skipped silently: the client
    must decide (start over with a fresh ``client_id``, or give up). ``expected`` and
    ``received`` are the seqs involved when the client saw the gap itself (``None`` when
    the server refused a resume point behind its compacted frames).
    """

    code = "ipc_sequence_gap"

    def __init__(
        self, message: str, *, expected: int | None = None, received: int | None = None
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.received = received


class FrameError(InvalidInputError):
    """Bytes or a JSON object on the wire are not a valid frame; the message says why."""

    code = "ipc_frame_invalid"


class FrameTooLargeError(FrameError):
    """A frame is longer than the connection's ``max_frame_bytes``.

    On a stream the length prefix is checked before the body is read, so an oversize
    frame costs its four header bytes, not its claimed size.
    """

    code = "ipc_frame_too_large"


class UnknownFrameTypeError(FrameError):
    """A frame's ``type`` is not one the connection's protocol version knows."""

    code = "ipc_frame_unknown_type"


class IpcProtocolError(InvalidInputError):
    """Valid frames in an order or state the protocol does not allow.

    For example a ``durable`` frame before ``hello``, a second ``durableResume``, or an
    ``ack`` on a connection that negotiated protocol v1. A ``bye`` from a server that
    closed the connection over bad input surfaces as this error with the server's code.
    """

    code = "ipc_protocol_error"


class AckBeyondLastSeqError(InvalidInputError):
    """An ack names a seq that was never appended (or never delivered, on a client).

    Nothing changed: the queue's ``acked_through`` and its frames are as they were.
    """

    code = "ipc_ack_beyond_last_seq"


class InvalidAddressError(InvalidInputError):
    """An IPC address is malformed: an unknown scheme, a bad port, a socket path too long."""

    code = "ipc_address_invalid"


class PlannerError(LittleWorkflowError):
    """A planner session ended without a valid workflow (its turns ran out)."""

    code = "planner_gave_up"


class OutputValidationError(LittleWorkflowError):
    """An agent asked for structured output gave no answer matching its schema.

    ``tries`` is how many answers were refused (0 when its turns ran out first, each
    spent on tool calls). Every try was a committed model call: a resumed run does not
    pay for them again.
    """

    code = "output_invalid"

    def __init__(self, message: str, *, tries: int) -> None:
        super().__init__(message)
        self.tries = tries


class SupervisorError(LittleWorkflowError):
    """An outer loop's ``supervise()`` raised (anything, ``SystemExit`` included).

    Nothing is recorded for the cycle: once the supervisor is fixed, running the loop
    again asks it again about the same cycle, whose run is kept.
    """

    code = "supervise_failed"


class AwaitingAnswerError(LittleWorkflowError):
    """An execution suspended on a question to the person; answer it, then resume.

    ``prompt_id`` names the prompt for ``harness.answer()`` and ``little-workflow answer``.
    """

    code = "awaiting_answer"

    def __init__(
        self, message: str, *, execution_id: str, prompt_id: str, question: object
    ) -> None:
        super().__init__(message)
        self.execution_id = execution_id
        self.prompt_id = prompt_id
        self.question = question


class LockTimeoutError(LittleWorkflowError):
    """Another live process held a lock (a run, an outer loop) past the caller's timeout.

    Nothing was done. The message names the holder's pid where it is known.
    """

    code = "lock_timeout"


class RunWaitingError(LittleWorkflowError):
    """The run stopped cleanly at a wait: for an event (``send`` answers it) or a timer.

    Nothing failed and no process or lock holds the run: a ``send``, or the timer, makes it
    runnable again (a worker wakes it; ``resume`` continues it by hand). ``waits`` lists what
    it waits for: ``{"path", "event", "since", "wakeAt"}`` each (``event`` is ``None`` for a
    timer; ``wakeAt`` is a timer's time or a wait's timeout, seconds since the epoch).
    """

    code = "run_waiting"

    def __init__(self, message: str, *, run_id: str, waits: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.waits = waits


class EventRefusedError(LittleWorkflowError):
    """A ``send`` that was refused, with nothing written.

    Code ``not_waiting``: the run no longer waits for the event (it finished, or the wait
    timed out); ``invalid_event_payload`` (``EventPayloadError``): the payload fails the
    wait's schema.
    """

    code = "not_waiting"


class EventPayloadError(EventRefusedError):
    """An event's payload fails the JSON Schema of the wait it is sent to."""

    code = "invalid_event_payload"


class LeaseLostError(LittleWorkflowError):
    """A worker's lease on a run expired or was taken over; its write was refused.

    Nothing of the refused write was committed. The worker stops driving the run; the
    worker holding the newer lease (or the next to claim the run) resumes it by replay.
    """

    code = "lease_lost"


class ArtifactNotFoundError(LittleWorkflowError):
    """No artifact has this id in this data directory (``little-workflow artifacts`` lists them)."""

    code = "artifact_not_found"


class MemoMismatchError(LittleWorkflowError):
    """A recorded result sits at this path, but it was recorded for something else."""

    code = "memo_identity_mismatch"

    def __init__(self, message: str, *, path: str, recorded: str, current: str) -> None:
        super().__init__(message)
        self.path = path
        self.recorded = recorded
        self.current = current


class NonDeterminismError(LittleWorkflowError):
    """A code-first workflow asked, at a recorded place, for another step than the log holds.

    ``path`` is where the log and the code part ways; ``recorded`` is what the log holds
    there and ``requested`` what the code asked for (each a step's identity: qualified
    name and call position, see docs/code-first.md). Nothing was written for it: the run
    stays as it was, resumable by the code that made it, or forked with ``fork`` (the
    command that keeps the most work).
    """

    code = "non_determinism"

    def __init__(
        self, message: str, *, path: str, recorded: str, requested: str, fork: str
    ) -> None:
        super().__init__(message)
        self.path = path
        self.recorded = recorded
        self.requested = requested
        self.fork = fork


class StepFailedError(LittleWorkflowError):
    """A code-first step failed for good (its retries spent), raised into the workflow body.

    ``path`` is the step's path, ``cause_code`` the stable reason (``step_failed``,
    ``invalid_output``, ``reconcile_failed``, ``sub_run_failed``, ...) and ``message``
    what happened. The failure is in the run's log: a resume raises the same error at the
    same place without calling the step again. A body that does not catch it fails the run.
    """

    code = "step_failed"

    def __init__(self, message: str, *, path: str, cause_code: str) -> None:
        super().__init__(message)
        self.path = path
        self.cause_code = cause_code


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
