"""The input check every way of starting a run makes first: ``check_input``.

For an LWIR workflow, ``lwir._input`` (its ``input:`` schema, the fields every completed
run reads); for a code-first one, ``_input_types`` (the body's parameters and hints).
Nothing is opened or written here (docs/lwir.md, "Input validation").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from little_workflow.lwir import Workflow
from little_workflow.lwir._input import check_run_input
from little_workflow.runtime._code_api import workflow_spec
from little_workflow.runtime._code_program import code_workflow
from little_workflow.runtime._input_types import check_code_input
from little_workflow.runtime._lwir_program import load_model

__all__ = ["check_input"]


def check_input(
    workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
    input: object,
    *,
    shown: str | None = None,
) -> None:
    """``RunInputError`` if ``input`` does not fit ``workflow`` (a model, a file, a
    ``@workflow`` or a ``module:function``); ``shown`` names a model's file."""
    code = code_workflow(workflow)
    if code is not None:
        spec = workflow_spec(code)
        check_code_input(code, input, where=repr(spec.qualified if spec else code))
    elif not callable(workflow):
        model, source = load_model(workflow)
        check_run_input(model, input, source=shown or (None if source is None else str(workflow)))
