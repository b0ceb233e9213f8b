"""The JSON Schema of an LWIR document, generated from the models so it cannot drift.

``little-workflow schema`` prints it; ``docs/lwir.schema.json`` is a committed copy that
editors read (a workflow file's first line ``# yaml-language-server:
$schema=../docs/lwir.schema.json``), and ``tests/lwir/test_schema.py`` fails when the copy
differs from what this module generates. Regenerate it with::

    little-workflow schema > docs/lwir.schema.json

pydantic writes the shapes and types. What it cannot see is added here, generically over
``STEP_KINDS`` (so a new step kind needs nothing here): a step's ``kind`` is required in a
document (the models default it, the loader does not), so is ``lwir``, and the syntax of
step ids, ``fn`` references and tool names is written as ``pattern``s, so an editor flags
them as you type. Everything else (the graph: unknown ``next`` targets, loops, templates)
is checked by ``little-workflow validate``, not by the schema.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

from little_workflow.lwir._models import STEP_KINDS, Workflow

__all__ = ["lwir_json_schema", "lwir_json_schema_text"]

_STEP_ID = "^[A-Za-z0-9][A-Za-z0-9_-]*$"
_IDENT = "[A-Za-z_][A-Za-z0-9_]*"
_FN = f"^{_IDENT}(\\.{_IDENT})*:{_IDENT}(\\.{_IDENT})*$"
_TOOL = "^[A-Za-z0-9_-]{1,64}$"
#: Field → pattern, for every step kind that has the field as a plain string.
_PATTERNS = {"id": _STEP_ID, "fn": _FN, "tool": _TOOL, "slot": _STEP_ID}


def lwir_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an LWIR document, as a new dict."""
    return copy.deepcopy(_generated())


def lwir_json_schema_text() -> str:
    """The schema as ``little-workflow schema`` prints it (and the committed copy holds)."""
    return json.dumps(_generated(), indent=2, ensure_ascii=False) + "\n"


@lru_cache(maxsize=1)
def _generated() -> dict[str, Any]:
    generated = Workflow.model_json_schema(by_alias=True, mode="validation")
    definitions: dict[str, Any] = generated.get("$defs", {})
    for cls in STEP_KINDS.values():
        step = definitions.get(cls.__name__)
        if step is None:
            continue
        required = step.setdefault("required", [])
        if "kind" not in required:
            required.insert(0, "kind")
        for name, pattern in _PATTERNS.items():
            field = step.get("properties", {}).get(name)
            if isinstance(field, dict) and field.get("type") == "string":
                field["pattern"] = pattern
    generated.setdefault("required", []).insert(0, "lwir")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **generated,
        "title": "LWIR workflow (lwir: 1)",
    }
