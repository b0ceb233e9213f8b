"""LWIR, the Little Workflow IR: the workflow document model and everything about it.

Owns the pydantic models of a workflow and its step kinds (also the Python builder),
loading JSON/YAML safely, validation with errors that point into the document, the
``definitionHash``, the ``${...}`` template language, and step paths
(``review-candidates[cand_123].worker.visit[0]``). It runs nothing: the runtime does.
See ``docs/lwir.md``.
"""

from __future__ import annotations

from little_workflow.errors import (
    InvalidStepPathError,
    LwirError,
    LwirLoadError,
    LwirSyntaxError,
    LwirTooLargeError,
    LwirValidationError,
    Problem,
    TemplateError,
    TemplateSyntaxError,
)
from little_workflow.lwir._hash import canonical_definition, definition_hash, workflow_version_id
from little_workflow.lwir._load import (
    MAX_DOCUMENT_BYTES,
    MAX_NESTING_DEPTH,
    MAX_YAML_NODES,
    load_workflow,
    parse_workflow,
    read_document,
)
from little_workflow.lwir._models import (
    DEFAULT_CONCURRENCY,
    STEP_KINDS,
    AgentStep,
    DecisionAgent,
    DecisionStep,
    ExecuteStep,
    FixerPolicy,
    MapStep,
    OutputStep,
    RetryPolicy,
    SideEffectPolicy,
    SleepStep,
    Step,
    StepBase,
    SubWorkflowStep,
    ToolStep,
    WaitStep,
    Workflow,
)
from little_workflow.lwir._paths import (
    MAX_BRANCH_KEY_LENGTH,
    BranchSegment,
    StepPath,
    StepSegment,
    branch_key,
    format_step_path,
    parse_step_path,
)
from little_workflow.lwir._template import (
    Index,
    Key,
    Reference,
    Template,
    Text,
    parse_template,
    referenced_step_ids,
    render,
)
from little_workflow.lwir._validate import effective_next

__all__ = [
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
