"""little-workflow: durable execution for LLM-agent workflows.

Kill the process at any instant, restart it, and the run continues from where its
durable log ends: no completed step runs again, no model or tool call whose answer was
committed is paid for twice.

The public API is re-exported here; sub-packages hold the layers: ``lwir`` (the
workflow document), ``runtime`` (runs), ``durable`` (locks, memoization), ``storage``
(KV stores and event logs), ``platform`` (process identity), and the data model
(``errors``, ``ids``, ``codec``, ``events``).
"""

from __future__ import annotations

from little_workflow.codec import JsonValue, canonical_json, sha256_digest
from little_workflow.errors import (
    CapabilityDriftError,
    ConfigError,
    ConflictError,
    CorruptDataError,
    InvalidIdError,
    InvalidInputError,
    InvalidKeyError,
    InvalidStepPathError,
    InvalidStoreUrlError,
    InvalidValueError,
    LittleWorkflowError,
    LockTimeoutError,
    LwirError,
    LwirLoadError,
    LwirSyntaxError,
    LwirTooLargeError,
    LwirValidationError,
    MemoMismatchError,
    ModelProviderError,
    PlannerError,
    RecordedFailure,
    RunFailedError,
    SchemaVersionError,
    StorageBusyError,
    StorageError,
    StorageUnavailableError,
    TemplateError,
    TemplateSyntaxError,
    ToolArgumentsError,
    ToolCallError,
    ToolDefinitionError,
    UnknownEventTypeError,
)
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import (
    DecisionStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    RetryPolicy,
    SubWorkflowStep,
    ToolStep,
    Workflow,
    definition_hash,
    load_workflow,
    parse_workflow,
)
from little_workflow.runtime import (
    ReplayResult,
    RunResult,
    RunState,
    Runtime,
    StepContext,
)
from little_workflow.storage import (
    EventLog,
    RunInfo,
    StorageAdapter,
    create_file_storage,
    create_in_memory_event_log,
    create_in_memory_storage,
    open_event_log,
    open_storage,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "CapabilityDriftError",
    "ConfigError",
    "ConflictError",
    "CorruptDataError",
    "DecisionStep",
    "EventLog",
    "ExecuteStep",
    "InvalidIdError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidStepPathError",
    "InvalidStoreUrlError",
    "InvalidValueError",
    "JsonValue",
    "LittleWorkflowError",
    "LockTimeoutError",
    "LwirError",
    "LwirLoadError",
    "LwirSyntaxError",
    "LwirTooLargeError",
    "LwirValidationError",
    "MapStep",
    "MemoMismatchError",
    "ModelProviderError",
    "OutputStep",
    "PlannerError",
    "RecordedFailure",
    "ReplayResult",
    "RetryPolicy",
    "RunFailedError",
    "RunInfo",
    "RunResult",
    "RunState",
    "Runtime",
    "SchemaVersionError",
    "StepContext",
    "StorageAdapter",
    "StorageBusyError",
    "StorageError",
    "StorageUnavailableError",
    "SubWorkflowStep",
    "TemplateError",
    "TemplateSyntaxError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolDefinitionError",
    "ToolStep",
    "UnknownEventTypeError",
    "Workflow",
    "__version__",
    "canonical_json",
    "create_file_storage",
    "create_in_memory_event_log",
    "create_in_memory_storage",
    "definition_hash",
    "load_workflow",
    "new_id",
    "open_event_log",
    "open_storage",
    "parse_workflow",
    "sha256_digest",
    "validate_id",
]
