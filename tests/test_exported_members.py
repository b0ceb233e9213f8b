"""The public surface is deliberate: this test pins it."""

from __future__ import annotations

import little_workflow
from little_workflow import storage


def _isort_style(name: str) -> tuple[int, str]:
    # The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions and dunders.
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_package_all_is_sorted_and_complete() -> None:
    names = little_workflow.__all__
    assert names == sorted(names, key=_isort_style)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(little_workflow, name), name


def test_public_names_are_pinned() -> None:
    assert set(little_workflow.__all__) == {
        "DEFAULT_STEP_LEDGER_RETENTION",
        "AckBeyondLastSeqError",
        "AgentHarness",
        "AgentStep",
        "ArtifactManifest",
        "ArtifactNotFoundError",
        "ArtifactStore",
        "AwaitingAnswerError",
        "BlobNotFoundError",
        "CapabilityDriftError",
        "CheckpointSnapshot",
        "CheckpointStore",
        "CodeDriftError",
        "ConfigError",
        "EventPayloadError",
        "EventRefusedError",
        "RunWaitingError",
        "ConflictError",
        "Context",
        "CorruptDataError",
        "DataDirPermissionsError",
        "DecisionStep",
        "EventLog",
        "ExecuteStep",
        "FrameError",
        "FrameTooLargeError",
        "FunctionNotAllowedError",
        "Happened",
        "HarnessEnvironment",
        "HarnessStorage",
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
        "JsonValue",
        "LittleWorkflowError",
        "LeaseLostError",
        "Limit",
        "LockTimeoutError",
        "LwirError",
        "LwirLoadError",
        "LwirSyntaxError",
        "LwirTooLargeError",
        "LwirValidationError",
        "MapStep",
        "MemoMismatchError",
        "MissingExtraError",
        "MemoryStore",
        "ModelPrice",
        "ModelProviderError",
        "ModelSlot",
        "OutputStep",
        "PayloadTooLargeError",
        "PlannerError",
        "Rate",
        "RecordedFailure",
        "ReplayResult",
        "RunDelta",
        "DeltaStream",
        "RestoreContextOptions",
        "RetryPolicy",
        "RunFailedError",
        "RunInputError",
        "workflow",
        "step",
        "current_step",
        "WorkflowContext",
        "Decision",
        "StepFailedError",
        "NonDeterminismError",
        "OutputValidationError",
        "RunInfo",
        "RunResult",
        "RunState",
        "Runtime",
        "RuntimeSetup",
        "SchemaVersionError",
        "SequenceGapError",
        "StepContext",
        "StepLedgerRetention",
        "StorageAdapter",
        "StorageBusyError",
        "StorageError",
        "StorageUnavailableError",
        "SubWorkflowStep",
        "SubprocessError",
        "SupervisorError",
        "TemplateError",
        "TemplateSyntaxError",
        "Tool",
        "ToolArgumentsError",
        "ToolCallError",
        "ToolDefinitionError",
        "ToolStep",
        "UnknownEventTypeError",
        "UnknownFrameTypeError",
        "UsageReport",
        "UsageTotals",
        "Worker",
        "Workflow",
        "__version__",
        "agent",
        "side_effect",
        "canonical_json",
        "create_checkpoint_store",
        "create_durable_outbound_queue",
        "create_file_storage",
        "create_in_memory_event_log",
        "create_in_memory_storage",
        "create_local_subprocess_adapter",
        "definition_hash",
        "load_workflow",
        "new_id",
        "open_event_log",
        "open_storage",
        "parse_workflow",
        "read_usage",
        "reattach_live_children",
        "sha256_digest",
        "tool",
        "validate_id",
    }


def test_storage_all_is_sorted() -> None:
    assert storage.__all__ == sorted(storage.__all__, key=_isort_style)
    for name in storage.__all__:
        assert hasattr(storage, name), name


def test_importing_the_package_does_not_import_psycopg() -> None:
    import subprocess
    import sys

    code = "import sys, little_workflow; print('psycopg' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_durable_harness_names_of_the_seed_come_from_the_root() -> None:
    """The seed imports ``createCheckpointStore`` and ``DEFAULT_STEP_LEDGER_RETENTION`` from
    the core package: they, and what its durable example builds, are the same objects here."""
    from little_workflow import durable, harness

    for name in (
        "DEFAULT_STEP_LEDGER_RETENTION",
        "CheckpointSnapshot",
        "CheckpointStore",
        "StepLedgerRetention",
        "create_checkpoint_store",
    ):
        assert getattr(little_workflow, name) is getattr(durable, name), name
    for name in ("HarnessEnvironment", "HarnessStorage", "RestoreContextOptions"):
        assert getattr(little_workflow, name) is getattr(harness, name), name


def test_runtime_public_names_are_pinned() -> None:
    from little_workflow import runtime

    assert runtime.__all__ == sorted(runtime.__all__, key=_isort_style)
    assert set(runtime.__all__) == {
        "CRASH_ENV",
        "CRASH_EXIT_CODE",
        "FAULT_ENV",
        "CancelOutcome",
        "Continue",
        "Cycle",
        "CycleRecord",
        "DataDir",
        "Done",
        "GcReport",
        "Happened",
        "KeptRun",
        "OuterLoopManifest",
        "OuterLoopOutcome",
        "ReplayResult",
        "RunDelta",
        "DeltaStream",
        "RunResult",
        "RunState",
        "Runtime",
        "RuntimeSetup",
        "Schedule",
        "SideEffect",
        "Site",
        "StepContext",
        "StepRecord",
        "Worker",
        "WorkerReport",
        "WorkflowVersion",
        "apply",
        "fold",
        "load_setup",
        "side_effect",
        "WorkflowContext",
        "Decision",
        "current_step",
        "step",
        "workflow",
    }
    for name in runtime.__all__:
        assert hasattr(runtime, name), name
