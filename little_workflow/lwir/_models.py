"""The LWIR document model: one frozen pydantic model per step kind, and ``Workflow``.

Stored and written field names are camelCase (``maxVisits``, ``retryOn``) like the
seed's JSON; Python uses snake_case (``max_visits``), and both spellings are accepted
when building a model, so the models are also the Python builder::

    Workflow(name="greet", steps=[ExecuteStep(id="hi", fn="pkg.mod:hi"), OutputStep(...)])

Adding a step kind is one new class: subclass ``StepBase``, give it a ``kind`` literal,
override what validation reads (``targets``, ``template_values``, ``body_steps``,
``visit_limit`` and the class flags ``falls_through``, ``is_output``,
``chooses_route``), and add it to the ``Step`` union.
Nothing in validation, hashing or paths names a kind.

``Workflow`` validates its whole graph when it is built (see ``_validate``) and raises
``LwirValidationError`` listing every problem; shape errors come from pydantic and
``parse_workflow`` turns them into the same error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from little_workflow.ids import MAX_ID_LENGTH, is_valid_id

__all__ = [
    "DEFAULT_CONCURRENCY",
    "MAX_STEP_ID_LENGTH",
    "STEP_KINDS",
    "TRUSTED_GRAPH",
    "AgentStep",
    "DecisionAgent",
    "DecisionStep",
    "ExecuteStep",
    "FixerPolicy",
    "MapStep",
    "OutputStep",
    "RetryPolicy",
    "SleepStep",
    "Step",
    "StepBase",
    "SubWorkflowStep",
    "ToolStep",
    "WaitStep",
    "Workflow",
]

#: Validation-context key: the graph was validated before (a pinned, hash-checked copy).
TRUSTED_GRAPH = "little_workflow.trusted_graph"
#: Default bound on the branches of one map step that run at the same time.
DEFAULT_CONCURRENCY = 8
MAX_STEP_ID_LENGTH = 100
MAX_VISITS = 10_000
MAX_CONCURRENCY = 1024
MAX_ATTEMPTS = 100
MAX_TURNS = 1000

# Step ids appear in step paths, where '.', '[' and ']' are syntax.
_STEP_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_FN_RE = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*")
# What model providers accept as a function name (OpenAI and Anthropic alike).
_TOOL_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ERROR_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
_WORKFLOW_FILE_SUFFIXES = (".json", ".yaml", ".yml")
_PATH_PART_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

Seconds = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


def _check_step_id(value: str, what: str = "step id") -> str:
    if len(value) > MAX_STEP_ID_LENGTH or not _STEP_ID_RE.fullmatch(value):
        raise ValueError(
            f"invalid {what} {value!r}: use letters, digits, '_' and '-', starting with a "
            f"letter or digit, at most {MAX_STEP_ID_LENGTH} characters ('.', '[' and ']' "
            "are step-path syntax)"
        )
    return value


def _check_fn(value: str) -> str:
    if not _FN_RE.fullmatch(value):
        raise ValueError(
            f"invalid callable reference {value!r}: write 'package.module:function' "
            "(or 'package.module:Class.method')"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        # Schemas are built on first use, not at import: see ``little_workflow.events``.
        defer_build=True,
    )


class RetryPolicy(_Model):
    """How a failed attempt of a step is retried. The default makes one attempt only.

    The wait before attempt ``n`` (``n >= 2``) is
    ``min(maxBackoff, backoff * multiplier ** (n - 2))`` seconds, without jitter so a
    replayed schedule is the recorded one.
    """

    #: Attempts in all, the first included; 1 means never retry.
    attempts: StrictInt = Field(default=1, ge=1, le=MAX_ATTEMPTS)
    #: Seconds to wait before the second attempt.
    backoff: Seconds = 1.0
    #: Factor applied to the wait after each further failure.
    multiplier: Annotated[float, Field(strict=True, ge=1, allow_inf_nan=False)] = 2.0
    #: Upper bound on any one wait, in seconds.
    max_backoff: Seconds = 60.0
    #: Error codes or exception class names that are retried; empty retries any error.
    retry_on: tuple[StrictStr, ...] = ()

    @field_validator("retry_on")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ERROR_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"invalid error name {name!r}: give an error code (step_failed) or an "
                    "exception class name (TimeoutError, httpx.ReadTimeout)"
                )
        return value

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (1-based; 0 for the first)."""
        if attempt <= 1:
            return 0.0
        try:
            delay = self.backoff * self.multiplier ** (attempt - 2)
        except OverflowError:
            delay = math.inf
        return min(self.max_backoff, delay)

    def retries(self, error_names: Iterable[str]) -> bool:
        """Whether an error known by ``error_names`` (its code, class names) is retried."""
        if not self.retry_on:
            return True
        wanted = set(self.retry_on)
        return any(name in wanted for name in error_names)


class FixerPolicy(_Model):
    """A fixer session consulted when the step fails for good (its retries used up).

    The fixer model sees the step, its arguments and the error, and answers
    ``{"action": "retry", "with": {corrected arguments}}`` (the step runs once more with
    them) or ``{"action": "give_up", "reason": "..."}`` (the step fails as it would
    have). At most ``maxFixes`` fixes per step visit.
    """

    slot: StrictStr
    instructions: StrictStr | None = None
    max_fixes: StrictInt = Field(default=1, ge=1, le=10)


class SideEffectPolicy(_Model):
    """The step acts on the outside world: dispatch it through the outbox.

    Before each attempt an intent is committed (``SideEffectIntended``), after it the
    outcome; the callable receives the key (``ctx.side_effect_key``) to deduplicate at the
    far end. A resume that finds an intent without an outcome (a crash mid-dispatch)
    asks the callable's ``reconcile`` hook whether it happened before calling again
    (docs/runtime.md, "Side effects").
    """

    #: A template for the key; default ``<run id>/<step path>`` (the path names the visit).
    key: StrictStr | None = None


class StepBase(_Model):
    """Fields and graph behaviour shared by every step kind."""

    #: Whether, without ``next``, the step continues to the one after it in its list.
    falls_through: ClassVar[bool] = True
    #: Whether the step ends its scope with a value (the run's output at top level).
    is_output: ClassVar[bool] = False
    #: Whether the step records a chosen route (``${steps.<id>.route}``).
    chooses_route: ClassVar[bool] = False

    #: The step kind; each subclass narrows it to its own literal (the union's tag).
    kind: str
    #: Unique within its steps list; used in step paths and ``${steps.<id>...}``.
    id: StrictStr
    #: A note for people (and planners); part of the definition hash.
    description: StrictStr | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _check_step_id(value)

    def targets(self) -> list[tuple[str, str]]:
        """Explicit successors as ``(field, step id)``: ``("next", ...)``, ``("routes.x", ...)``."""
        return []

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """Fields holding templates, as ``(field, value)``; evaluated in the step's scope."""
        return []

    def body_steps(self) -> tuple[Step, ...]:
        """Steps of a nested scope (a map's body); empty for other kinds."""
        return ()

    @property
    def visit_limit(self) -> int:
        """How many times the step may run in one scope (its ``maxVisits``, else 1)."""
        return 1


class _ActionStep(StepBase):
    """A step that runs one thing with arguments and then goes on (execute, tool, workflow)."""

    #: Arguments, rendered through the template language before the call.
    with_: dict[str, JsonValue] = Field(default_factory=dict, alias="with")
    #: The step that follows; omitted means the next one in the list (or the end).
    next: StrictStr | None = None
    #: Visits allowed in one scope; above 1 the step may sit on a loop.
    max_visits: StrictInt = Field(default=1, ge=1, le=MAX_VISITS)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    #: Where the run goes when the step fails for good (its retries spent), instead of
    #: failing: a step of the same list, which reads the failure as
    #: ``${steps.<id>.error}`` (``{code, message, path}``).
    on_error: StrictStr | None = None

    def targets(self) -> list[tuple[str, str]]:
        """``next``, when given, and ``onError``, when given."""
        found = [] if self.next is None else [("next", self.next)]
        return found if self.on_error is None else [*found, ("onError", self.on_error)]

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """The ``with`` arguments."""
        return [("with", dict(self.with_))]

    @property
    def visit_limit(self) -> int:
        """``maxVisits``."""
        return self.max_visits


def _with_side_effect_key(
    values: list[tuple[str, JsonValue]], policy: SideEffectPolicy | None
) -> list[tuple[str, JsonValue]]:
    if policy is None or policy.key is None:
        return values
    return [*values, ("sideEffect.key", policy.key)]


class ExecuteStep(_ActionStep):
    """Calls a Python callable (sync or async) with the rendered ``with`` as keyword arguments."""

    kind: Literal["execute"] = "execute"
    #: ``package.module:function``, resolved through the runtime's registry.
    fn: StrictStr
    fixer: FixerPolicy | None = None
    side_effect: SideEffectPolicy | None = None

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """The ``with`` arguments, and the side-effect key."""
        return _with_side_effect_key(super().template_values(), self.side_effect)

    @field_validator("fn")
    @classmethod
    def _fn(cls, value: str) -> str:
        return _check_fn(value)


class ToolStep(_ActionStep):
    """Makes one tool call with the rendered ``with`` as its arguments."""

    kind: Literal["tool"] = "tool"
    #: The registered tool's name.
    tool: StrictStr
    fixer: FixerPolicy | None = None
    side_effect: SideEffectPolicy | None = None

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """The ``with`` arguments, and the side-effect key."""
        return _with_side_effect_key(super().template_values(), self.side_effect)

    @field_validator("tool")
    @classmethod
    def _tool(cls, value: str) -> str:
        if not _TOOL_RE.fullmatch(value):
            raise ValueError(
                f"invalid tool name {value!r}: 1 to 64 letters, digits, '_' or '-' (what "
                "model providers accept)"
            )
        return value


class SubWorkflowStep(_ActionStep):
    """Runs another workflow as a sub-run (its own run and log); its output is the step's.

    The workflow is named (``workflow``: a registered name or a relative file), or given
    as a document computed by the run (``definition``: a template, such as a planner's
    output), which is validated and pinned when the step starts.
    """

    kind: Literal["workflow"] = "workflow"
    #: A registered workflow name, or a relative ``.json``/``.yaml``/``.yml`` file path
    #: (resolved against the referring file's directory; no ``..``, not absolute).
    workflow: StrictStr | None = None
    #: An LWIR document, usually ``${steps.<planner>.output}``; instead of ``workflow``.
    definition: JsonValue = None

    @model_validator(mode="after")
    def _one_source(self) -> SubWorkflowStep:
        if (self.workflow is None) == (self.definition is None):
            raise ValueError("give exactly one of workflow (a name or file) and definition")
        return self

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """The ``with`` arguments, and ``definition`` when given."""
        values = super().template_values()
        if self.definition is not None:
            values.append(("definition", self.definition))
        return values

    @field_validator("workflow")
    @classmethod
    def _workflow(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value.endswith(_WORKFLOW_FILE_SUFFIXES) or "/" in value:
            parts = value.split("/")
            if not all(_PATH_PART_RE.fullmatch(part) and ".." not in part for part in parts):
                raise ValueError(
                    f"invalid workflow file {value!r}: a relative path of plain names "
                    "separated by '/', without '..' or a leading '/'"
                )
            if not value.endswith(_WORKFLOW_FILE_SUFFIXES):
                raise ValueError(f"workflow file {value!r} must end in .json, .yaml or .yml")
        elif not is_valid_id(value):
            raise ValueError(
                f"invalid workflow name {value!r}: letters, digits and . _ : -, starting "
                f"with a letter or digit, no '..', at most {MAX_ID_LENGTH} characters"
            )
        return value

    @property
    def is_file(self) -> bool:
        """Whether ``workflow`` names a file rather than a registered workflow."""
        reference = self.workflow or ""
        return reference.endswith(_WORKFLOW_FILE_SUFFIXES) or "/" in reference


class AgentStep(_ActionStep):
    """Runs a harness session: a model with tools, until it answers (Layer C durable).

    ``role`` picks the session kind: ``worker`` (the default: the standard agent over
    ``tools``), ``orchestrator`` (also gets a ``start_workflow`` tool over ``workflows``,
    each run as a sub-run), or ``planner`` (answers with an LWIR workflow, validated,
    and sent back with the errors when invalid). ``prompt`` is the session's input (a
    template); ``instructions`` its system prompt. The output is the final answer: its
    text, or (``output: json``) the JSON it holds.
    """

    kind: Literal["agent"] = "agent"
    role: Literal["worker", "orchestrator", "planner"] = "worker"
    #: The model slot, by name (``Runtime(model_slots={...})``).
    slot: StrictStr
    instructions: StrictStr | None = None
    prompt: JsonValue = None
    #: Images and files sent with the prompt, in order: each a template whose value is a
    #: part, ``{"type": "image" | "file", "mediaType": ..., "data": <base64> | "url": ...,
    #: "filename": ...}`` (a file's name optional). Rendered like the prompt, checked when
    #: the step runs (``InvalidValueError`` naming the step and the attachment).
    attachments: tuple[JsonValue, ...] = ()
    #: Tools offered, by name (``Runtime(tools=[...])``).
    tools: tuple[StrictStr, ...] = ()
    #: For an orchestrator: the workflows ``start_workflow`` may start (registered names
    #: or relative files, as a ``workflow`` step names them).
    workflows: tuple[StrictStr, ...] = ()
    max_turns: StrictInt = Field(default=8, ge=1, le=MAX_TURNS)
    output: Literal["text", "json"] = "text"
    #: Structured output: the answer must be JSON matching this schema (the provider's
    #: native mode is asked for it; an answer that does not match is sent back with what
    #: is wrong, at most ``outputTries`` answers in all). The output is the JSON value.
    output_schema: dict[str, JsonValue] | None = None
    output_tries: StrictInt = Field(default=3, ge=1, le=MAX_TURNS)
    #: Offer the model an ``ask_user`` tool: its call parks the run as a wait for the event
    #: ``ask_user:<step path>`` (docs/waits.md), whose payload is the answer (a string).
    ask_user: StrictBool = False
    #: How long an ``ask_user`` question waits (a duration); then the model is told that no
    #: answer came. Omitted: no timeout.
    ask_user_timeout: StrictStr | None = None

    @field_validator("ask_user_timeout")
    @classmethod
    def _ask_user_timeout(cls, value: str | None) -> str | None:
        return None if value is None else _check_duration(value)

    @field_validator("slot")
    @classmethod
    def _slot(cls, value: str) -> str:
        return _check_step_id(value, "model slot name")

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _TOOL_RE.fullmatch(name):
                raise ValueError(f"invalid tool name {name!r}: 1 to 64 letters, digits, '_' or '-'")
        return value

    @field_validator("workflows")
    @classmethod
    def _workflows(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for reference in value:
            SubWorkflowStep._workflow(reference)
        return value

    @model_validator(mode="after")
    def _role_fields(self) -> AgentStep:
        if self.workflows and self.role != "orchestrator":
            raise ValueError("only an orchestrator has workflows to start; set role: orchestrator")
        if self.ask_user_timeout is not None and not self.ask_user:
            raise ValueError("askUserTimeout needs askUser: true")
        if self.output_schema is not None:
            if self.role == "planner":
                raise ValueError("a planner answers with a workflow: it takes no outputSchema")
            check_json_schema(self.output_schema)
        return self

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """``prompt``, ``attachments``, ``instructions`` and ``with``."""
        values: list[tuple[str, JsonValue]] = [("prompt", self.prompt)]
        values += [(f"attachments[{i}]", item) for i, item in enumerate(self.attachments)]
        if self.instructions is not None:
            values.append(("instructions", self.instructions))
        values.append(("with", dict(self.with_)))
        return values


class DecisionAgent(_Model):
    """A model that decides a ``decision`` step: a worker session that answers a route."""

    slot: StrictStr
    instructions: StrictStr | None = None
    #: What to decide on (a template); the routes are listed for the model.
    prompt: JsonValue = None
    tools: tuple[StrictStr, ...] = ()
    max_turns: StrictInt = Field(default=4, ge=1, le=MAX_TURNS)


class DecisionStep(StepBase):
    """Calls ``fn`` (or asks ``agent``), which returns a route name; the run goes on there.

    A decision has ``routes`` instead of ``next``. With ``maxVisits > 1`` it may sit on
    a loop (judge → revise → judge); each visit is its own durability unit. An ``agent``
    decision is a harness session (Layer C durable) that answers with a route name, or
    with ``{"route": name, "output": value}``.
    """

    falls_through: ClassVar[bool] = False
    chooses_route: ClassVar[bool] = True

    kind: Literal["decision"] = "decision"
    fn: StrictStr | None = None
    agent: DecisionAgent | None = None
    #: Route name (what ``fn`` returns) → step id in the same steps list.
    routes: dict[StrictStr, StrictStr] = Field(min_length=1)
    with_: dict[str, JsonValue] = Field(default_factory=dict, alias="with")
    max_visits: StrictInt = Field(default=1, ge=1, le=MAX_VISITS)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)

    @field_validator("fn")
    @classmethod
    def _fn(cls, value: str | None) -> str | None:
        return None if value is None else _check_fn(value)

    @model_validator(mode="after")
    def _one_decider(self) -> DecisionStep:
        if (self.fn is None) == (self.agent is None):
            raise ValueError("give exactly one of fn (a function) and agent (a model)")
        return self

    @field_validator("routes")
    @classmethod
    def _routes(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _check_step_id(name, "route name")
        return value

    def targets(self) -> list[tuple[str, str]]:
        """Every route's target."""
        return [(f"routes.{name}", target) for name, target in self.routes.items()]

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """The ``with`` arguments, and the agent's prompt and instructions."""
        values: list[tuple[str, JsonValue]] = [("with", dict(self.with_))]
        if self.agent is not None:
            values.append(("agent.prompt", self.agent.prompt))
            if self.agent.instructions is not None:
                values.append(("agent.instructions", self.agent.instructions))
        return values

    @property
    def visit_limit(self) -> int:
        """``maxVisits``."""
        return self.max_visits


class MapStep(StepBase):
    """Runs ``body`` once per item, concurrently (at most ``concurrency`` at a time).

    Each branch has the path ``<map id>[<key>]`` and its own scope: body steps see
    ``${item}``, their siblings in the same branch, and the steps of enclosing scopes.
    The map's output is the list of branch results, in item order; a branch's result is
    the value of the body's ``output`` step if it reached one, else the output of the
    body step that ended the branch.
    """

    kind: Literal["map"] = "map"
    #: A single ``${...}`` that evaluates to a list, or a literal list.
    items: JsonValue
    #: The item field whose value names the branch; omitted means the item's index.
    key: StrictStr | None = Field(default=None, min_length=1)
    body: tuple[Step, ...] = Field(min_length=1)
    concurrency: StrictInt = Field(default=DEFAULT_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    next: StrictStr | None = None
    max_visits: StrictInt = Field(default=1, ge=1, le=MAX_VISITS)

    @field_validator("items")
    @classmethod
    def _items(cls, value: JsonValue) -> JsonValue:
        if not isinstance(value, str | list):
            # ValueError, not TypeError: pydantic turns only ValueError into a field error.
            raise ValueError(  # noqa: TRY004
                "must be a ${...} reference that evaluates to a list, or a list"
            )
        return value

    def targets(self) -> list[tuple[str, str]]:
        """``next``, when given."""
        return [] if self.next is None else [("next", self.next)]

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """``items`` (evaluated in the map's own scope, not the body's)."""
        return [("items", self.items)]

    def body_steps(self) -> tuple[Step, ...]:
        """The body."""
        return self.body

    @property
    def visit_limit(self) -> int:
        """``maxVisits``."""
        return self.max_visits


class OutputStep(StepBase):
    """Ends its scope with a value: the run's output at top level, a branch's result in a map."""

    falls_through: ClassVar[bool] = False
    is_output: ClassVar[bool] = True

    kind: Literal["output"] = "output"
    #: A template (``${steps.judge.output}``) or any JSON with templates inside.
    value: JsonValue

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """``value``."""
        return [("value", self.value)]


_DURATION_TEXT = re.compile(r"^\s*(\d+(\.\d+)?\s*(ms|s|m|h|d|w)\s*)+$")


def _check_duration(value: str) -> str:
    if not _DURATION_TEXT.match(value):
        raise ValueError(
            f"{value!r} is not a duration; write a number and a unit, such as 90s, 15m, 2h, "
            "1h30m or 2d (units: ms, s, m, h, d, w)"
        )
    return value


def check_json_schema(schema: dict[str, JsonValue]) -> None:
    """Raise ``ValueError`` if ``schema`` is not a JSON Schema this project can check
    (``lwir/_jsonschema.py``: the one validator, for run inputs and event payloads)."""
    from little_workflow.lwir._jsonschema import schema_problems

    problems = schema_problems(schema, where="schema")
    if problems:
        raise ValueError(f"not a valid JSON Schema: {'; '.join(map(str, problems))}")


class _WaitBase(StepBase):
    """A step that stops the run until something happens (docs/waits.md)."""

    #: The step that follows; omitted means the next one in the list (or the end).
    next: StrictStr | None = None
    max_visits: StrictInt = Field(default=1, ge=1, le=MAX_VISITS)

    def targets(self) -> list[tuple[str, str]]:
        """``next``, when given."""
        return [] if self.next is None else [("next", self.next)]

    @property
    def visit_limit(self) -> int:
        """``maxVisits``."""
        return self.max_visits


class WaitStep(_WaitBase):
    """Waits for an event sent to the run (``little-workflow send``); its payload is the output.

    With ``timeout``, a run that got no event by then goes to ``onTimeout`` (or, without
    it, on to the next step with output ``null``); the route says which (``event`` or
    ``timeout``). ``schema``, a JSON Schema, is checked by ``send`` before anything is
    written.
    """

    chooses_route: ClassVar[bool] = True

    kind: Literal["wait"] = "wait"
    #: The event's name (what ``send RUN_ID EVENT`` names).
    event: StrictStr
    schema_: dict[str, JsonValue] | None = Field(default=None, alias="schema")
    #: ``2h``, ``1h30m``, ``2d``: counted from when the run reaches the wait.
    timeout: StrictStr | None = None
    #: Where the run goes when the timeout passes first (a step of the same list).
    on_timeout: StrictStr | None = None

    @field_validator("event")
    @classmethod
    def _event(cls, value: str) -> str:
        if not is_valid_id(value):
            raise ValueError(
                f"invalid event name {value!r}: letters, digits and . _ : -, starting with a "
                "letter or digit"
            )
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        return None if value is None else _check_duration(value)

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        if value is not None:
            check_json_schema(value)
        return value

    @model_validator(mode="after")
    def _on_timeout_needs_timeout(self) -> WaitStep:
        if self.on_timeout is not None and self.timeout is None:
            raise ValueError("onTimeout needs a timeout")
        return self

    def targets(self) -> list[tuple[str, str]]:
        """``next``, when given, and ``onTimeout``, when given."""
        found = super().targets()
        return found if self.on_timeout is None else [*found, ("onTimeout", self.on_timeout)]


class SleepStep(_WaitBase):
    """Waits until a time: ``duration`` after the run reaches it, or ``until`` a timestamp.

    The wake-up time is computed once and recorded; the output is that time (ISO 8601, UTC).
    """

    kind: Literal["sleep"] = "sleep"
    duration: StrictStr | None = None
    #: A template that renders to an ISO 8601 timestamp with a time zone (or epoch seconds).
    until: JsonValue = None

    @field_validator("duration")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        return None if value is None else _check_duration(value)

    @model_validator(mode="after")
    def _one_of(self) -> SleepStep:
        if (self.duration is None) == (self.until is None):
            raise ValueError("give exactly one of duration (2h) and until (a timestamp)")
        return self

    def template_values(self) -> list[tuple[str, JsonValue]]:
        """``until``."""
        return [] if self.until is None else [("until", self.until)]


#: Any step; pydantic picks the class by ``kind``.
Step = Annotated[
    ExecuteStep
    | ToolStep
    | AgentStep
    | DecisionStep
    | MapStep
    | SubWorkflowStep
    | OutputStep
    | WaitStep
    | SleepStep,
    Field(discriminator="kind"),
]

# ``MapStep.body`` names ``Step``, defined after it; with ``defer_build`` pydantic
# resolves it from this module's namespace when the model is first used, so no
# ``model_rebuild()`` here (it would build every step model at import).

#: Each step kind's name (the ``kind`` field) and class, in the order of the union.
STEP_KINDS: dict[str, type[StepBase]] = {
    cls.model_fields["kind"].default: cls for cls in get_args(get_args(Step)[0])
}


class Workflow(_Model):
    """An LWIR workflow: a name and a list of steps, run from the first.

    Building one validates the whole graph (``LwirValidationError`` lists every problem).
    """

    #: The LWIR format version; documents must say ``lwir: 1``.
    lwir: Literal[1] = 1
    #: Registered name: letters, digits and ``. _ : -`` (``candidate.scoring``).
    name: StrictStr
    description: StrictStr | None = None
    #: A JSON-schema-like description of the run's input, for people and planners.
    input: dict[str, JsonValue] | None = None
    steps: tuple[Step, ...] = Field(min_length=1)

    @field_validator("lwir", mode="before")
    @classmethod
    def _lwir(cls, value: object) -> object:
        # Literal[1] alone would take true and 1.0, which Python calls equal to 1.
        if isinstance(value, bool) or not isinstance(value, int):
            scalar = value is None or isinstance(value, str | float | bool)
            shown = json.dumps(value) if scalar else type(value).__name__
            raise ValueError(  # noqa: TRY004 - pydantic reports only ValueError per field
                f"unsupported LWIR version {shown}; this program reads lwir: 1"
            )
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_valid_id(value):
            raise ValueError(
                f"invalid workflow name {value!r}: letters, digits and . _ : -, starting "
                f"with a letter or digit, no '..', at most {MAX_ID_LENGTH} characters"
            )
        return value

    @model_validator(mode="after")
    def _graph(self, info: ValidationInfo) -> Workflow:
        # A definition read back from a run's store was validated when the run pinned it
        # and is checked against its hash; the caller says so with this context key, and
        # the graph walk (costly for thousands of steps) is skipped.
        if isinstance(info.context, dict) and info.context.get(TRUSTED_GRAPH):
            return self
        # Imported here because validation reads these models; a module-level import
        # would be circular. LwirValidationError is not a ValueError, so pydantic lets it
        # through unwrapped, with its own problem list.
        from little_workflow.lwir._validate import check_workflow

        check_workflow(self)
        return self
