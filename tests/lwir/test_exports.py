"""Pins the public names of ``little_workflow.lwir`` and the codes of its errors."""

from __future__ import annotations

import little_workflow.lwir as lwir
from little_workflow.errors import InvalidInputError

EXPECTED = [
    "DEFAULT_CONCURRENCY",
    "MAX_BRANCH_KEY_LENGTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING_DEPTH",
    "MAX_YAML_NODES",
    "STEP_KINDS",
    "AgentStep",
    "BranchSegment",
    "DecisionAgent",
    "DecisionStep",
    "ExecuteStep",
    "FixerPolicy",
    "Index",
    "InvalidStepPathError",
    "Key",
    "LwirError",
    "LwirLoadError",
    "LwirSyntaxError",
    "LwirTooLargeError",
    "LwirValidationError",
    "MapStep",
    "OutputStep",
    "Problem",
    "Reference",
    "RetryPolicy",
    "SideEffectPolicy",
    "SleepStep",
    "Step",
    "StepBase",
    "StepPath",
    "StepSegment",
    "SubWorkflowStep",
    "Template",
    "TemplateError",
    "TemplateSyntaxError",
    "Text",
    "ToolStep",
    "WaitStep",
    "Workflow",
    "branch_key",
    "canonical_definition",
    "definition_hash",
    "effective_next",
    "format_step_path",
    "load_workflow",
    "parse_step_path",
    "parse_template",
    "parse_workflow",
    "read_document",
    "referenced_step_ids",
    "render",
    "workflow_version_id",
]


def test_public_names_are_pinned() -> None:
    assert lwir.__all__ == EXPECTED
    for name in EXPECTED:
        assert getattr(lwir, name) is not None


def test_public_names_have_docstrings() -> None:
    for name in EXPECTED:
        value = getattr(lwir, name)
        if callable(value) and not name.isupper() and name != "Step":
            assert value.__doc__, name


def test_error_codes_are_stable() -> None:
    codes: dict[type[InvalidInputError], str] = {
        lwir.LwirError: "lwir_error",
        lwir.LwirValidationError: "lwir_invalid",
        lwir.LwirLoadError: "lwir_load_error",
        lwir.LwirSyntaxError: "lwir_syntax",
        lwir.LwirTooLargeError: "lwir_too_large",
        lwir.TemplateError: "template_error",
        lwir.TemplateSyntaxError: "template_syntax",
        lwir.InvalidStepPathError: "invalid_step_path",
    }
    for error, code in codes.items():
        assert error.code == code
        assert issubclass(error, InvalidInputError)
