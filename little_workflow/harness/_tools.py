"""Typed Python tools: a callable, the JSON schema of its arguments, and how to call it.

``tool(fn)`` reads the signature once. Each parameter except ``ctx`` becomes a property
of a JSON-schema object, typed by its annotation through pydantic and described by
``Annotated[..., Field(description=...)]`` or else by the docstring (Google, reST or
NumPy). ``await t.invoke(arguments)`` validates what a model sent against the same
pydantic model, calls the function, and turns its result into plain JSON.
Each tool carries a ``schema_hash``, so a tool whose signature or docstring changed
between a run and its resume is seen as drift (``ToolRegistry.manifest()``).

Decisions:

* **Lax validation** (pydantic's default mode). A model writes JSON from text and often
  quotes a number; ``"3"`` for an ``int`` is accepted as ``3``, and the function still
  receives an ``int``. Whatever is not losslessly the declared type (``"3.5"`` or
  ``"three"`` for an ``int``, ``3`` for a ``str``) is refused, and so are NaN and the
  infinities; pydantic's other lax conversions apply too (``true`` for an ``int`` is
  ``1``). Strict mode would spend a model turn on a quibble and buy no safety.
* **The arguments are a pydantic model** whose fields have private names (``p0``,
  ``p1``, ...) and the parameter names as aliases: a parameter may then be called
  ``json``, ``schema``, ``model_name`` or ``_x`` without clashing with ``BaseModel``.
  Only the arguments the model sent are passed on: an omitted one takes the function's
  own default, the very object (a sentinel default keeps its identity).
* **``$defs`` are kept.** A nested model, dataclass, TypedDict or Enum appears once
  under ``$defs`` and is referenced as ``#/$defs/Name``; no reference leaves the
  parameters object, so the schema is self-contained, and OpenAI and Anthropic both
  accept it. Field titles, which only repeat the names, are left out.
* **Results become plain JSON** through pydantic's ``to_jsonable_python``: models and
  dataclasses dump as JSON (by alias), tuples and sets become lists, enums their
  values, datetimes ISO strings. A result that is still not JSON (an arbitrary object,
  NaN) is a bug in the tool and raises ``ToolDefinitionError``; the harness records it
  as a failed call. An exception from the tool itself propagates unchanged.

Rejected: ``pydantic.validate_call``. It validates a *call* (positional and keyword
arguments) rather than one JSON object, gives no JSON schema of its own, and keeps no
record of which arguments were omitted.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Generic, ParamSpec, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, TypeAdapter, ValidationError
from pydantic import create_model as _create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind
from pydantic_core import PydanticSerializationError, to_jsonable_python

from little_workflow.codec import JsonValue, check_json_value, sha256_digest
from little_workflow.errors import InvalidValueError, ToolArgumentsError, ToolDefinitionError
from little_workflow.harness._docstrings import parse_docstring
from little_workflow.harness._redaction import Redaction
from little_workflow.harness.models import ToolSpec
from little_workflow.platform._threads import call_user, is_async_callable

__all__ = ["Tool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

# What OpenAI and Anthropic accept as a function name.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

# The parameter that receives the harness's context object, as step functions do.
_CTX = "ctx"

_ARGUMENTS_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

# A model reads the message back; a few problems are enough to fix the call.
_MAX_REPORTED_PROBLEMS = 5
_MAX_PREVIEW_CHARS = 40

# pydantic's error types for an absent and an unknown key: models and TypedDicts say
# "missing" and "extra_forbidden", dataclasses speak of keyword arguments.
_MISSING = frozenset({"missing", "missing_argument", "missing_keyword_only_argument"})
_UNEXPECTED = frozenset({"extra_forbidden", "unexpected_keyword_argument"})


class _ToolJsonSchema(GenerateJsonSchema):
    # A default that is not JSON (a sentinel object) is left out of the schema: the
    # parameter is still optional, and the model need not know what stands in for it.
    # pydantic declares it on the class but annotates it as an instance attribute.
    ignored_warning_kinds: ClassVar[set[JsonSchemaWarningKind]] = {  # type: ignore[misc]
        "skipped-choice",
        "non-serializable-default",
    }

    def field_title_should_be_set(self, schema: Any) -> bool:  # its type is private
        # "title": "Query" beside "query" is noise a model pays tokens for.
        return False


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str
    #: The pydantic field holding its value; ``None`` for ``ctx``.
    field: str | None
    positional_only: bool
    default: Any


@dataclass(frozen=True, slots=True)
class _Binding:
    """How validated arguments become a call: the arguments model and the signature."""

    model: type[BaseModel]
    parameters: tuple[_Parameter, ...]

    def call_arguments(
        self, tool_name: str, arguments: Mapping[str, JsonValue], ctx: object
    ) -> tuple[list[Any], dict[str, Any]]:
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsError(
                f"arguments for tool {tool_name!r} must be a JSON object, "
                f"not {_json_type_name(arguments)}"
            )
        try:
            validated = self.model.model_validate(dict(arguments))
        except ValidationError as exc:
            accepted = [p.name for p in self.parameters if p.field is not None]
            raise ToolArgumentsError(_describe_problems(tool_name, exc, accepted)) from exc
        sent = validated.model_fields_set
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.field is None:
                value: Any = ctx
            elif parameter.field in sent:
                value = getattr(validated, parameter.field)
            elif parameter.positional_only:
                value = parameter.default
            else:
                continue
            if parameter.positional_only:
                args.append(value)
            else:
                kwargs[parameter.name] = value
        return args, kwargs


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Tool(Generic[P, R]):
    """A Python callable offered to a model as a tool. Build one with ``tool()``.

    Calling the ``Tool`` calls the function, so ``@tool`` leaves it usable from code.
    """

    #: The name the model calls it by (``^[A-Za-z0-9_-]{1,64}$``).
    name: str
    #: What the model reads about it: the docstring's prose, or ``tool(description=...)``.
    description: str
    #: The JSON schema of its arguments: an object, ``additionalProperties: false``.
    #: Plain JSON; treat it as read-only (``schema_hash`` was computed from it).
    parameters: dict[str, JsonValue]
    #: The callable itself.
    function: Callable[P, R]
    #: Whether ``function`` is a coroutine function (``invoke`` awaits it).
    is_async: bool
    #: Whether ``function`` declares ``ctx`` (``invoke`` passes its ``ctx`` there).
    takes_ctx: bool
    #: ``sha256:`` of the canonical JSON of name, description and parameters.
    schema_hash: str
    _binding: _Binding = field(compare=False)
    #: What of its arguments and result is stored as ``"[REDACTED]"`` (``tool(redact=...)``).
    redaction: Redaction | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash((self.name, self.schema_hash, self.function))

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, schema_hash={self.schema_hash!r})"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly, without validation or conversion."""
        return self.function(*args, **kwargs)

    @property
    def spec(self) -> ToolSpec:
        """The tool as a model sees it: name, description, parameters."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    async def invoke(self, arguments: Mapping[str, JsonValue], ctx: object = None) -> JsonValue:
        """Validate ``arguments``, call the function, and return its result as plain JSON.

        ``ToolArgumentsError`` (before the function runs) when the arguments do not
        match the schema; its message names each bad argument and goes back to the
        model as is. ``ctx`` is passed to a function that declares ``ctx``. A sync
        function runs in a worker thread (``platform/_threads.py``), an async one on
        the event loop. An exception raised by the function propagates unchanged; a
        result that is not JSON raises ``ToolDefinitionError``.
        """
        args, kwargs = self._binding.call_arguments(self.name, arguments, ctx)
        function = cast("Callable[..., Any]", self.function)
        result = await call_user(function, *args, **kwargs)
        return _to_json(self.name, result)


@overload
def tool(
    func: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    redact: Redaction | None = None,
) -> Tool[P, R]: ...


@overload
def tool(
    func: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    redact: Redaction | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    redact: Redaction | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a ``Tool`` of a typed callable; usable as ``@tool``, ``@tool(name=...)`` or a call.

    ``name`` defaults to the function's name; ``description`` to its docstring's prose.
    Every parameter except ``ctx`` needs a type annotation that pydantic can express as
    JSON schema; ``*args`` and ``**kwargs`` are refused. ``ToolDefinitionError`` names
    the parameter at fault. Given a ``Tool``, makes one of its function anew (to rename it;
    its ``redact`` rule is kept unless another is given). ``redact`` names the argument
    and result fields stored as ``"[REDACTED]"`` (see ``Redaction``).
    """
    if redact is not None and not isinstance(redact, Redaction):
        raise ToolDefinitionError(
            f"tool(redact=...) takes a Redaction, not a {type(redact).__name__}"
        )
    if func is None:

        def decorate(function: Callable[P, R]) -> Tool[P, R]:
            return _build(function, name=name, description=description, redact=redact)

        return decorate
    return _build(func, name=name, description=description, redact=redact)


def _build(
    func: Callable[P, R],
    *,
    name: str | None,
    description: str | None,
    redact: Redaction | None = None,
) -> Tool[P, R]:
    if isinstance(func, Tool):
        redact = redact if redact is not None else func.redaction
        func = func.function
    if not callable(func):
        raise ToolDefinitionError(f"a tool must be a callable, not a {type(func).__name__}")
    tool_name = name if name is not None else getattr(func, "__name__", None)
    if not isinstance(tool_name, str):
        raise ToolDefinitionError(
            f"{func!r} has no __name__ to name the tool by; pass tool(..., name='...')"
        )
    if _TOOL_NAME.fullmatch(tool_name) is None:
        raise ToolDefinitionError(
            f"tool name {tool_name!r} is not acceptable: model providers take 1 to 64 "
            "letters, digits, '_' or '-'; pass tool(..., name='...')"
        )
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read the signature of {func!r}: {exc}"
        ) from exc
    target = _target(func)
    docstring = parse_docstring(inspect.getdoc(target))
    globalns = _globals_of(target)

    parameters: list[_Parameter] = []
    fields: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        positional_only = parameter.kind is inspect.Parameter.POSITIONAL_ONLY
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter '*{parameter.name}' is not allowed; a tool "
                "takes named, typed parameters only (a model sends one JSON object)"
            )
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter '**{parameter.name}' is not allowed; a tool "
                "takes named, typed parameters only (a model sends one JSON object)"
            )
        if parameter.name == _CTX:
            parameters.append(_Parameter(_CTX, None, positional_only, parameter.default))
            continue
        if parameter.annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {parameter.name!r} has no type annotation; "
                f"annotate it (e.g. '{parameter.name}: str') so the model knows what to send"
            )
        annotation = _resolve(tool_name, parameter.name, parameter.annotation, globalns)
        field_name = f"p{len(fields)}"
        options: dict[str, Any] = {"alias": parameter.name}
        if parameter.default is not inspect.Parameter.empty:
            options["default"] = parameter.default
        documented = docstring.parameters.get(parameter.name)
        if documented and not _has_description(annotation):
            options["description"] = documented
        fields[field_name] = (annotation, Field(**options))
        annotations[parameter.name] = annotation
        parameters.append(
            _Parameter(parameter.name, field_name, positional_only, parameter.default)
        )

    model = _arguments_model(tool_name, fields, annotations)
    schema = _clean_schema(tool_name, model)
    tool_description = description if description is not None else docstring.description
    schema_hash = sha256_digest(
        {"name": tool_name, "description": tool_description, "parameters": schema}, trusted=True
    )
    return Tool(
        name=tool_name,
        description=tool_description,
        parameters=schema,
        function=func,
        is_async=is_async_callable(func),
        takes_ctx=any(p.field is None for p in parameters),
        schema_hash=schema_hash,
        _binding=_Binding(model=model, parameters=tuple(parameters)),
        redaction=redact,
    )


def _target(func: Callable[..., Any]) -> Any:
    """The object whose docstring and module describe ``func``, past wrappers."""
    target: Any = inspect.unwrap(func)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    return getattr(target, "__func__", target)  # a bound method's function


def _globals_of(target: Any) -> dict[str, Any]:
    namespace = getattr(target, "__globals__", None)
    if namespace is None:
        namespace = getattr(_call_method(target), "__globals__", {})
    return cast("dict[str, Any]", namespace)


def _call_method(obj: object) -> Any:
    # A callable object keeps its annotations and its coroutine-ness on its class.
    return type(obj).__call__ if callable(obj) else None


def _resolve(tool_name: str, parameter: str, annotation: Any, globalns: dict[str, Any]) -> Any:
    """Evaluate one parameter's annotation (a string under ``from __future__ import annotations``).

    One at a time, not ``get_type_hints(func)``: that would also evaluate the ``ctx`` and
    return annotations, whose types are often imported only under ``TYPE_CHECKING``.
    """
    holder = types.SimpleNamespace(__annotations__={parameter: annotation})
    try:
        return typing.get_type_hints(holder, globalns=globalns, include_extras=True)[parameter]
    except Exception as exc:  # evaluating an annotation may raise anything
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve the type of parameter {parameter!r} "
            f"({annotation!r}): {exc}; a type used by a tool must be importable from the "
            "function's module (defined at module level, not inside a function)"
        ) from exc


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(item, FieldInfo) and item.description for item in annotation.__metadata__)


def _arguments_model(
    tool_name: str, fields: dict[str, Any], annotations: dict[str, Any]
) -> type[BaseModel]:
    try:
        model = _create_model("ToolArguments", __config__=_ARGUMENTS_CONFIG, **fields)
        model.model_json_schema(schema_generator=_ToolJsonSchema)
    except (PydanticUserError, TypeError) as exc:
        raise ToolDefinitionError(_unsupported(tool_name, annotations, exc)) from exc
    return model


def _unsupported(tool_name: str, annotations: dict[str, Any], exc: Exception) -> str:
    """Name the parameter whose type pydantic cannot validate or express as JSON schema."""
    for parameter, annotation in annotations.items():
        try:
            TypeAdapter(annotation).json_schema(schema_generator=_ToolJsonSchema)
        except (PydanticUserError, TypeError) as culprit:
            return (
                f"tool {tool_name!r}: parameter {parameter!r} has a type with no JSON schema "
                f"({_type_name(annotation)}): {_first_line(culprit)}"
            )
    return f"tool {tool_name!r}: its parameters have no JSON schema: {_first_line(exc)}"


def _clean_schema(tool_name: str, model: type[BaseModel]) -> dict[str, JsonValue]:
    raw = model.model_json_schema(schema_generator=_ToolJsonSchema)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": raw.get("properties", {}),
        # Always present, even empty: one shape for every tool.
        "required": raw.get("required", []),
        "additionalProperties": False,
    }
    if "$defs" in raw:
        schema["$defs"] = raw["$defs"]
    try:
        check_json_value(schema, where="parameters")
    except InvalidValueError as exc:  # a default of NaN or infinity
        raise ToolDefinitionError(f"tool {tool_name!r}: {exc.message}") from exc
    return schema


def _to_json(tool_name: str, result: object) -> JsonValue:
    try:
        value = to_jsonable_python(result)
        check_json_value(value, where="result")
    except (PydanticSerializationError, InvalidValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r} returned a {type(result).__name__}, which is not JSON "
            f"({_first_line(exc)}); return str, int, float, bool, None, lists, dicts, "
            "a pydantic model or a dataclass"
        ) from exc
    return cast("JsonValue", value)


def _describe_problems(tool_name: str, exc: ValidationError, accepted: list[str]) -> str:
    """One line a model can act on: which argument, what is wrong, what it sent."""
    problems: list[str] = []
    unexpected: list[str] = []
    for error in exc.errors(include_url=False, include_context=False):
        location = error["loc"]
        where = _location(location)
        top_level = len(location) == 1
        if error["type"] in _MISSING:
            kind = "argument" if top_level else "field"
            problems.append(f"missing required {kind} {where!r}")
        elif error["type"] in _UNEXPECTED and top_level:
            unexpected.append(repr(where))
        elif error["type"] in _UNEXPECTED:
            problems.append(f"unexpected field {where!r}")
        else:
            problems.append(f"argument {where!r}: {error['msg']} (got {_preview(error['input'])})")
    if unexpected:
        takes = ", ".join(accepted) if accepted else "no arguments"
        plural = "s" if len(unexpected) > 1 else ""
        problems.append(f"unexpected argument{plural} {', '.join(unexpected)} (it takes: {takes})")
    shown = problems[:_MAX_REPORTED_PROBLEMS]
    if len(problems) > len(shown):
        shown.append(f"and {len(problems) - len(shown)} more")
    return f"invalid arguments for tool {tool_name!r}: " + "; ".join(shown)


def _location(location: tuple[int | str, ...]) -> str:
    text = str(location[0]) if location else ""
    for part in location[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _preview(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _MAX_PREVIEW_CHARS:
        text = text[: _MAX_PREVIEW_CHARS - 3] + "..."
    return text


def _json_type_name(value: object) -> str:
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
