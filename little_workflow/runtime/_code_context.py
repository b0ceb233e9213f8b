"""``WorkflowContext``: what a code-first workflow body calls to make its work durable.

Every method is a plain method that claims the call's path and position **at once**, in
program order, and returns an awaitable that does the work: a recorded call returns its
recorded result, a new one runs and commits (``_code_run.CodeRun``). So
``await asyncio.gather(ctx.step(a), ctx.step(b))`` gives ``a`` and ``b`` their paths in
the order written, whichever finishes first. Typed end to end: ``await ctx.step(fn, x)``
checks ``x`` against ``fn``'s parameters and gives ``fn``'s return type, for sync and
async functions alike.
"""

from __future__ import annotations

import random as _random
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, overload

from pydantic import BaseModel, ValidationError

from little_workflow.codec import JsonValue, to_json_value
from little_workflow.errors import ConfigError, InvalidValueError
from little_workflow.lwir import (
    FixerPolicy,
    RetryPolicy,
    ToolStep,
)
from little_workflow.runtime._code_agents import (
    AgentOutput,
    agent_step,
    as_instance,
    child_workflows,
    decision_step,
)
from little_workflow.runtime._code_api import (
    checked_name,
    step_spec,
    workflow_spec,
)
from little_workflow.runtime._code_driver import Driver
from little_workflow.runtime._code_places import branch_keys
from little_workflow.runtime._code_scope import CallScope
from little_workflow.runtime._code_waits import code_wait, payload, seconds_of, wait_schema

if TYPE_CHECKING:
    from little_workflow.harness._tools import Tool
    from little_workflow.harness.models import FilePart, ImagePart

__all__ = ["CallScope", "Driver", "WorkflowContext"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
V = TypeVar("V", float, str)
M = TypeVar("M", bound=BaseModel)

_HERE = "little_workflow"


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``ctx.decide`` answers: the route the agent chose, and what it passed on (the
    route name itself when it passed nothing)."""

    route: str
    output: JsonValue


class WorkflowContext:
    """The durable operations of one code-first run, handed to its body as ``ctx``."""

    def __init__(self, driver: Driver, scope: CallScope | None = None) -> None:
        self._driver = driver
        self._scope = CallScope() if scope is None else scope

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._driver.run_id

    @property
    def idempotency_key(self) -> str:
        """The run's id: a key a far end may deduplicate a whole run on (a step has its own,
        ``current_step().idempotency_key``)."""
        return self._driver.run_id

    @overload
    def step(
        self,
        fn: Callable[P, Coroutine[Any, Any, R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Awaitable[R]: ...

    @overload
    def step(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]: ...

    def step(self, fn: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[Any]:
        """Call step function ``fn(*args, **kwargs)`` durably; await it for its result.

        Sync functions run in a thread. Its path is claimed now (see the module
        docstring); a step that fails for good raises ``StepFailedError`` when awaited.
        """
        spec = step_spec(fn)
        site = self._driver.site(spec.name, spec.qualified, self._scope, max_visits=spec.max_visits)
        return self._driver.call(site, spec, fn, args, dict(kwargs))

    @overload
    def map(
        self,
        fn: Callable[[T], Coroutine[Any, Any, R]],
        items: Iterable[T],
        *,
        key: Callable[[T], str | int] | None = None,
        concurrency: int = 1,
    ) -> Awaitable[list[R]]: ...

    @overload
    def map(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        *,
        key: Callable[[T], str | int] | None = None,
        concurrency: int = 1,
    ) -> Awaitable[list[R]]: ...

    def map(
        self,
        fn: Callable[[T], Any],
        items: Iterable[T],
        *,
        key: Callable[[T], str | int] | None = None,
        concurrency: int = 1,
    ) -> Awaitable[list[Any]]:
        """Call ``fn(item)`` for each item, at most ``concurrency`` at once; the results in order.

        The map is at ``name`` (``fn``'s step name), each call at ``name[key]``: ``key(item)``
        (a string or int, unique), else the item's index.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidValueError(f"map concurrency must be an int from 1, not {concurrency!r}")
        spec = step_spec(fn)
        listed = list(items)
        keys = branch_keys(spec.name, listed, key)
        driver = self._driver
        site = driver.site(
            spec.name, f"{_HERE}:map/{spec.qualified}", self._scope, max_visits=spec.max_visits
        )
        branches = [
            (
                driver.site(spec.name, spec.qualified, CallScope(), map_path=site.path, key=branch),
                item,
            )
            for branch, item in zip(keys, listed, strict=True)
        ]
        return driver.map(site, spec, fn, branches, concurrency)

    def branches(
        self,
        body: Callable[[WorkflowContext, T], Coroutine[Any, Any, R]],
        items: Iterable[T],
        *,
        key: Callable[[T], str | int] | None = None,
        concurrency: int = 1,
        name: str | None = None,
        max_visits: int | None = None,
    ) -> Awaitable[list[R]]:
        """Run ``body(branch_ctx, item)`` for each item, each in a branch of its own; the
        results in order (LWIR's ``map`` with a body). ``max_visits`` as ``@step``'s.

        The calls ``body`` makes through ``branch_ctx`` are at ``name[key].<call>``, with
        visits and positions of their own, so the branches may run at once (at most
        ``concurrency``) and take several steps each. ``name`` defaults to ``body``'s.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidValueError(f"concurrency must be an int from 1, not {concurrency!r}")
        map_name = checked_name(name or str(getattr(body, "__name__", "")), "branches")
        listed = list(items)
        keys = branch_keys(map_name, listed, key)
        qualified = f"{_HERE}:branches/{getattr(body, '__module__', '')}.{map_name}"
        site = self._driver.site(map_name, qualified, self._scope, max_visits=max_visits)
        return self._driver.branches(
            site, map_name, body, list(zip(keys, listed, strict=True)), concurrency
        )

    def tool(
        self,
        tool: str | Tool[..., Any],
        arguments: Mapping[str, object] | None = None,
        /,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        side_effect: bool = False,
        max_visits: int | None = None,
        fixer: FixerPolicy | None = None,
    ) -> Awaitable[JsonValue]:
        """Call the registered tool ``tool`` (its name, or the ``Tool`` registered) with
        ``arguments`` durably, as LWIR's ``kind: tool`` step does; its result, as JSON.

        The arguments are checked against the tool's schema when it runs (a mismatch
        fails the step); its call is recorded as a tool call of the step's path, redacted
        as the tool asks. The path is ``name`` (default: the tool's name); ``retry``,
        ``side_effect`` and ``max_visits`` as ``@step``'s; ``fixer`` is LWIR's: a model
        consulted when the call failed for good, which may answer corrected arguments for
        one more attempt. A tool the runtime does not have raises ``StepFailedError``
        (``runtime_config_error``) and records nothing.
        """
        tool_name = tool if isinstance(tool, str) else getattr(tool, "name", None)
        if not isinstance(tool_name, str):
            raise ConfigError(f"ctx.tool needs a tool name or a Tool, not {type(tool).__name__}")
        step_name = checked_name(name or tool_name, "tool")
        given = to_json_value(
            dict(arguments or {}), where=f"the arguments of ctx.tool({tool_name!r})"
        )
        assert isinstance(given, dict)
        try:
            # What a fixer is shown (and LWIR's step, to the letter).
            step = ToolStep(
                id=step_name, tool=tool_name, with_=given, retry=retry or RetryPolicy(), fixer=fixer
            )
        except ValidationError as exc:
            raise InvalidValueError(f"ctx.tool({tool_name!r}): {exc}") from exc
        site = self._driver.site(
            step_name, f"{_HERE}:tool/{tool_name}", self._scope, max_visits=max_visits
        )
        return self._driver.tool(site, step, side_effect)

    def workflow(
        self,
        body: Callable[..., Coroutine[Any, Any, R]],
        input: Mapping[str, object] | None = None,
    ) -> Awaitable[R]:
        """Run ``body`` (a ``@workflow``) as a sub-run with its own run id; its output.

        A sub-run that fails raises ``StepFailedError`` (cause ``sub_run_failed``).
        """
        child = workflow_spec(body)
        if child is None:
            named = getattr(body, "__qualname__", body)
            raise ConfigError(f"ctx.workflow needs a @workflow function, not {named!r}")
        site = self._driver.site(child.name, f"{_HERE}:workflow/{child.qualified}", self._scope)
        return self._driver.sub_run(site, child.name, child, body, input)  # type: ignore[return-value]

    def plan(
        self,
        goal: str,
        input: Mapping[str, object] | None = None,
        *,
        slot: str,
        name: str = "plan",
        max_turns: int = 4,
        instructions: str | None = None,
    ) -> Awaitable[JsonValue]:
        """Have the planner on model slot ``slot`` write an LWIR workflow for ``goal``, run
        it with ``input``, and return its output: ``Runtime.run_goal`` as one call.

        It is a sub-run at ``name`` (a ``workflow`` step) of run_goal's LWIR workflow: a
        planner session (every model turn committed; an invalid workflow goes back to the
        model with its errors, ``max_turns`` times at most), then a sub-run of the planned
        workflow, which is untrusted: it may call registered functions only. A resume
        never plans again. A plan or run that fails raises ``StepFailedError``
        (``sub_run_failed``).
        """
        # The planner (and the harness it needs) is imported only by a body that plans.
        from little_workflow.runtime._planner import goal_workflow

        data = to_json_value(dict(input or {}), where=f"the input of ctx.plan({goal!r})")
        assert isinstance(data, dict)
        try:
            given: dict[str, object] = dict(data)
            workflow = goal_workflow(slot, given, max_turns=max_turns, instructions=instructions)
        except ValidationError as exc:
            raise InvalidValueError(f"ctx.plan({goal!r}): {exc}") from exc
        site = self._driver.site(checked_name(name, "plan"), f"{_HERE}:plan/{slot}", self._scope)
        return self._driver.plan(site, workflow, {"goal": goal, "data": data})

    @overload
    def agent(
        self,
        slot: str,
        *,
        prompt: str,
        output: type[M],
        attachments: Sequence[ImagePart | FilePart] = (),
        tools: Sequence[str | Callable[..., Any]] = (),
        instructions: str | None = None,
        output_tries: int = 3,
        max_turns: int = 8,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        max_visits: int | None = None,
        workflows: Sequence[Callable[..., Coroutine[Any, Any, Any]]] = (),
        ask_user: bool = False,
        ask_user_timeout: timedelta | float | None = None,
    ) -> Awaitable[M]: ...

    @overload
    def agent(
        self,
        slot: str,
        *,
        prompt: str,
        attachments: Sequence[ImagePart | FilePart] = (),
        tools: Sequence[str | Callable[..., Any]] = (),
        instructions: str | None = None,
        output: Literal["text", "json"] | Mapping[str, Any] = "text",
        output_tries: int = 3,
        max_turns: int = 8,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        max_visits: int | None = None,
        workflows: Sequence[Callable[..., Coroutine[Any, Any, Any]]] = (),
        ask_user: bool = False,
        ask_user_timeout: timedelta | float | None = None,
    ) -> Awaitable[JsonValue]: ...

    def agent(
        self,
        slot: str,
        *,
        prompt: str,
        attachments: Sequence[ImagePart | FilePart] = (),
        tools: Sequence[str | Callable[..., Any]] = (),
        instructions: str | None = None,
        output: AgentOutput = "text",
        output_tries: int = 3,
        max_turns: int = 8,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        max_visits: int | None = None,
        workflows: Sequence[Callable[..., Coroutine[Any, Any, Any]]] = (),
        ask_user: bool = False,
        ask_user_timeout: timedelta | float | None = None,
    ) -> Awaitable[Any]:
        """Run an agent on model slot ``slot`` with ``tools`` (registered tools, by name or
        as the callables registered); its answer: text, or the JSON it holds.

        ``output`` may also be a JSON Schema (a dict) or a pydantic model class:
        structured output. The provider's native mode is asked for it, an answer that
        does not match is sent back with what is wrong (at most ``output_tries`` answers
        in all, each a committed call), and the answer is the JSON value, or an instance
        of the model. ``OutputValidationError`` (in a ``StepFailedError``) when no try
        matched. ``attachments`` (``ImagePart``, ``FilePart``) are sent with the prompt,
        after its text; large ones are stored once, by content, like any large payload.

        Layer C: every model and tool call is committed, and replayed on resume. The
        agent's path is ``name`` (default: the slot's name); ``max_visits`` as ``@step``'s.
        Given ``workflows`` (``@workflow`` functions), the agent is an orchestrator (LWIR's
        ``role: orchestrator``): it also gets ``start_workflow``, which runs one of them,
        by its name, as a sub-run whose id is recorded before it starts. ``ask_user=True``
        offers the model ``ask_user``: its question parks the run (docs/waits.md).
        """
        children = child_workflows(slot, workflows)
        step_name = name or slot
        step, model = agent_step(
            step_name,
            slot,
            prompt=prompt,
            attachments=attachments,
            tools=tools,
            instructions=instructions,
            output=output,
            output_tries=output_tries,
            max_turns=max_turns,
            retry=retry,
            orchestrator=bool(children),
            ask_user=ask_user,
            ask_user_timeout=ask_user_timeout,
        )
        site = self._driver.site(
            step_name, f"{_HERE}:agent/{slot}", self._scope, max_visits=max_visits
        )
        answer = self._driver.agent(site, step, children)
        return answer if model is None else as_instance(model, answer, site.text)

    def decide(
        self,
        slot: str,
        *,
        prompt: str,
        routes: Sequence[str],
        instructions: str | None = None,
        tools: Sequence[str | Callable[..., Any]] = (),
        max_turns: int = 4,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        max_visits: int | None = None,
    ) -> Awaitable[Decision]:
        """Ask an agent on model slot ``slot`` to choose one of ``routes``; its ``Decision``.

        LWIR's ``decision`` with an ``agent``, to the letter: the routes are listed for the
        model after ``instructions``, it answers a route name or ``{"route": name,
        "output": value}``, and the step is committed as a ``decision`` with its route. A
        route not in ``routes`` fails the step (``unknown_route``). Its path is ``name``
        (default: the slot's name); ``max_visits`` as ``@step``'s.
        """
        step_name = name or slot
        step = decision_step(
            step_name,
            slot,
            prompt=prompt,
            routes=routes,
            instructions=instructions,
            tools=tools,
            max_turns=max_turns,
            retry=retry,
        )
        site = self._driver.site(
            step_name, f"{_HERE}:decide/{slot}", self._scope, max_visits=max_visits
        )
        return _as_decision(self._driver.decide(site, step))

    @overload
    def wait_for(
        self,
        event: str,
        *,
        schema: type[M],
        timeout: timedelta | float | None = None,
        name: str | None = None,
        max_visits: int | None = None,
    ) -> Awaitable[M | None]: ...

    @overload
    def wait_for(
        self,
        event: str,
        *,
        schema: Mapping[str, Any] | None = None,
        timeout: timedelta | float | None = None,
        name: str | None = None,
        max_visits: int | None = None,
    ) -> Awaitable[JsonValue]: ...

    def wait_for(
        self,
        event: str,
        *,
        schema: type[BaseModel] | Mapping[str, Any] | None = None,
        timeout: timedelta | float | None = None,
        name: str | None = None,
        max_visits: int | None = None,
    ) -> Awaitable[Any]:
        """Wait for ``event`` (``little-workflow send RUN_ID EVENT``, ``Runtime.send``); its
        payload, or ``None`` if ``timeout`` passed first (docs/waits.md).

        ``schema``: a pydantic model (the payload comes back as that model) or a JSON
        Schema dict; ``send`` refuses a payload that fails it. In a workflow that declares
        its events, the event must be declared (``ConfigError``) and ``schema`` the declared
        one, or omitted to take it (then the payload is JSON). While it waits the run holds
        no process: the CLI exits 7, a worker frees the slot. Its path is ``name``
        (default: the event's name), with ``.visit[N]`` for later calls.
        """
        event = checked_name(event, "event")
        model, json_schema = wait_schema(event, schema, self._driver.run.state.declared_events)
        seconds = seconds_of(timeout, "ctx.wait_for timeout")
        step_name = checked_name(name or event, "wait")
        site = self._driver.site(
            step_name, f"{_HERE}:wait/{event}", self._scope, max_visits=max_visits
        )
        wake_at = (lambda: None) if seconds is None else (lambda: time.time() + seconds)
        done = code_wait(
            self._driver, site, name=step_name, wake_at=wake_at, event=event, schema=json_schema
        )
        return payload(done, model)

    def sleep(self, duration: timedelta | float, *, name: str = "sleep") -> Awaitable[None]:
        """Sleep durably for ``duration`` (a ``timedelta`` or seconds): the wake-up time is
        recorded when the call is first reached, so a restart never moves it. The run holds
        no process meanwhile (docs/waits.md)."""
        seconds = seconds_of(duration, "ctx.sleep duration")
        assert seconds is not None
        return self._sleep(name, lambda: time.time() + seconds)

    def sleep_until(self, when: datetime, *, name: str = "sleep") -> Awaitable[None]:
        """Sleep durably until ``when`` (a ``datetime`` with a time zone)."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise InvalidValueError("ctx.sleep_until needs a datetime with a time zone")
        at = when.timestamp()
        return self._sleep(name, lambda: at)

    def _sleep(self, name: str, wake_at: Callable[[], float]) -> Awaitable[None]:
        # Claimed now, like every call: the position does not depend on when it is awaited.
        step_name = checked_name(name, "sleep")
        site = self._driver.site(step_name, f"{_HERE}:sleep", self._scope)
        done = code_wait(self._driver, site, name=step_name, wake_at=wake_at)
        return payload(done, None, nothing=True)

    def now(self) -> Awaitable[float]:
        """The time (seconds since the epoch), recorded: a later pass gets the same."""
        return self._value("now", time.time, float)

    def random(self) -> Awaitable[float]:
        """A random float in [0, 1), recorded: a later pass gets the same."""
        return self._value("random", _random.random, float)

    def uuid4(self) -> Awaitable[uuid.UUID]:
        """A random UUID, recorded: a later pass gets the same."""
        return _as_uuid(self._value("uuid4", lambda: str(uuid.uuid4()), str))

    def _value(self, name: str, make: Callable[[], V], kind: type[V]) -> Awaitable[V]:
        # Claimed now, like every call: the position does not depend on when it is awaited.
        site = self._driver.site(name, f"{_HERE}:{name}", self._scope)
        return self._checked(self._driver.value(site, name, make), kind)

    @staticmethod
    async def _checked(value: Awaitable[object], kind: type[V]) -> V:
        result = await value
        if not isinstance(result, kind):
            raise InvalidValueError(
                f"a recorded value is {type(result).__name__}, not {kind.__name__}"
            )
        return result


async def _as_decision(decided: Awaitable[tuple[str, JsonValue]]) -> Decision:
    route, output = await decided
    return Decision(route=route, output=output)


async def _as_uuid(text: Awaitable[str]) -> uuid.UUID:
    return uuid.UUID(await text)
