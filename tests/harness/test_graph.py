"""The agent graph run by an ``AgentHarness``: paths, identities, the standard agent, tools.

A recorder that only writes down what it is told shows the durable units a graph makes,
by path; the ``scripted`` provider stands in for the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.durable._recorder import NullRecorder, Recorder
from little_workflow.harness._agent import agent
from little_workflow.harness._context import Context
from little_workflow.harness._execution import ToolContext
from little_workflow.harness._graph import (
    branch,
    call_model,
    invoke_tool,
    loop,
    run_code,
    run_tool_calls,
    sequence,
    spawn,
    step_identity,
)
from little_workflow.harness._harness import AgentHarness
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import tool
from little_workflow.harness.models import Message, ScriptedProvider, scripted
from tests.harness.graph_support import Counter, Notebook, ask, execute, harness, notebook

# --- the standard agent ---------------------------------------------------------------


async def test_the_standard_agent_stops_when_the_model_answers_without_tools() -> None:
    provider = scripted(
        ask(("c1", "lookup", {"name": "Ada"})),
        ask(("c2", "score", {"years": 7})),
        "Ada scores 70",
    )
    counter = Counter()
    output, ctx = await execute(harness(provider, counter))

    assert output == "Ada scores 70"
    assert provider.calls == 3
    assert counter.calls == [("lookup", "Ada"), ("score", 7)]
    assert notebook(ctx).entries == [
        ("started", "model", "agent.turns[0].model"),
        ("succeeded", "model", "agent.turns[0].model"),
        ("started", "tool", "agent.turns[0].tools[c1]"),
        ("succeeded", "tool", "agent.turns[0].tools[c1]"),
        ("started", "model", "agent.turns[1].model"),
        ("succeeded", "model", "agent.turns[1].model"),
        ("started", "tool", "agent.turns[1].tools[c2]"),
        ("succeeded", "tool", "agent.turns[1].tools[c2]"),
        ("started", "model", "agent.turns[2].model"),
        ("succeeded", "model", "agent.turns[2].model"),
        ("started", "code", "agent.answer"),
        ("succeeded", "code", "agent.answer"),
    ]
    # The conversation the third call saw: input, then each answer and tool result.
    roles = [(m.role, m.tool_call_id) for m in provider.requests[2].messages]
    assert roles == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("assistant", None),
        ("tool", "c2"),
    ]
    assert provider.requests[2].messages[3].content == '{"name": "Ada", "years": 7}'


async def test_the_standard_agent_stops_at_max_turns() -> None:
    def always_a_tool(request: Any) -> Any:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return ask((f"c{turn}", "score", {"years": turn}))

    provider = scripted(always_a_tool)
    counter = Counter()
    output, ctx = await execute(harness(provider, counter, max_turns=3))

    assert provider.calls == 3
    assert counter.calls == [("score", 0), ("score", 1), ("score", 2)]
    assert output is None  # the last answer asked for tools and had no text
    assert notebook(ctx).started_paths()[-2:] == ["agent.turns[2].tools[c2]", "agent.answer"]
    assert "agent.turns[3].model" not in notebook(ctx).started_paths()


async def test_several_tool_calls_of_one_answer_each_get_a_path() -> None:
    provider = scripted(
        ask(("a", "lookup", {"name": "Ada"}), ("b", "lookup", {"name": "Bo"})), "done"
    )
    counter = Counter()
    _, ctx = await execute(harness(provider, counter))
    assert notebook(ctx).started_paths() == [
        "agent.turns[0].model",
        "agent.turns[0].tools[a]",
        "agent.turns[0].tools[b]",
        "agent.turns[1].model",
        "agent.answer",
    ]
    assert counter.calls == [("lookup", "Ada"), ("lookup", "Bo")]


async def test_tool_calls_that_repeat_an_id_in_one_answer_get_paths_of_their_own() -> None:
    provider = scripted(
        ask(
            ("c1", "lookup", {"name": "Ada"}),
            ("c1", "lookup", {"name": "Bo"}),
            ("c1", "lookup", {"name": "Cy"}),
        ),
        "done",
    )
    counter = Counter()
    _, ctx = await execute(harness(provider, counter))
    assert notebook(ctx).started_paths()[1:4] == [
        "agent.turns[0].tools[c1]",
        'agent.turns[0].tools["c1#1"]',
        'agent.turns[0].tools["c1#2"]',
    ]
    assert counter.calls == [("lookup", "Ada"), ("lookup", "Bo"), ("lookup", "Cy")]
    results = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert results == [
        '{"name": "Ada", "years": 7}',
        '{"name": "Bo", "years": 6}',
        '{"name": "Cy", "years": 6}',
    ]


async def test_a_tool_call_id_that_is_not_a_plain_name_is_quoted() -> None:
    provider = scripted(ask(('toolu 01.x/"y"', "score", {"years": 1})), "done")
    _, ctx = await execute(harness(provider, Counter()))
    assert notebook(ctx).started_paths()[1] == 'agent.turns[0].tools["toolu 01.x/\\"y\\""]'


async def test_the_tool_context_carries_the_path_and_call_id() -> None:
    seen: list[ToolContext] = []

    @tool
    def where(ctx: ToolContext) -> str:
        """Say where the call is."""
        seen.append(ctx)
        return ctx.path

    provider = scripted(ask(("c1", "where", {})), "done")
    h = AgentHarness(
        name="t",
        agent_graph=agent(slot="main"),
        model_slots={"main": ModelSlot(provider=provider, model="m")},
        tools=[where],
    )
    ctx = h.create_context(id="exec_1")
    await h.execute(ctx, "go")
    (call,) = seen
    assert call.path == "agent.turns[0].tools[c1]"
    assert call.tool_call_id == "c1"
    assert call.execution_id == "exec_1"
    assert call.idempotency_key == "exec_1/agent.turns[0].tools[c1]"
    assert call.context is ctx


# --- tool errors go back to the model -------------------------------------------------


async def tool_error_round(reply: dict[str, Any]) -> tuple[Message, ScriptedProvider, Counter]:
    """Run one tool call that fails; the message the model got back about it."""
    provider = scripted(reply, "recovered")
    counter = Counter()
    output, ctx = await execute(harness(provider, counter))
    assert output == "recovered"  # the loop went on to a second turn
    assert provider.calls == 2
    path = notebook(ctx).started_paths()[1]
    assert ("failed", "tool", path) in notebook(ctx).entries
    message = provider.requests[1].messages[-1]
    return message, provider, counter


async def test_a_tool_that_raises_sends_its_error_to_the_model() -> None:
    message, _, counter = await tool_error_round(ask(("c1", "explode", {"reason": "x"})))
    assert counter.calls == [("explode", "x")]
    assert message == Message(
        role="tool", tool_call_id="c1", name="explode", content="ValueError: boom: x", is_error=True
    )


async def test_an_unknown_tool_is_an_error_for_the_model() -> None:
    message, _, counter = await tool_error_round(ask(("c1", "lokup", {"name": "Ada"})))
    assert counter.calls == []
    assert message.is_error
    assert message.tool_call_id == "c1"
    assert message.content is not None
    assert "unknown tool 'lokup'" in message.content
    assert "did you mean 'lookup'?" in message.content


async def test_bad_arguments_are_an_error_for_the_model() -> None:
    message, _, counter = await tool_error_round(ask(("c1", "score", {"years": "many"})))
    assert counter.calls == []
    assert message.is_error
    assert message.name == "score"
    assert message.content is not None
    assert "years" in message.content


async def test_a_tool_not_offered_to_the_model_is_refused() -> None:
    provider = scripted(ask(("c1", "explode", {"reason": "x"})), "recovered")
    counter = Counter()
    graph = agent(slot="main", tools=["lookup", "score"])
    output, _ = await execute(harness(provider, counter, graph))

    assert output == "recovered"
    assert [spec.name for spec in provider.requests[0].tools] == ["lookup", "score"]
    assert counter.calls == []  # registered with the harness, but not offered
    message = provider.requests[1].messages[-1]
    assert message.is_error
    assert message.content is not None
    assert "unknown tool 'explode'" in message.content
    assert "lookup, score" in message.content


# --- paths of every step kind ---------------------------------------------------------


def note(label: str) -> Any:
    def fn(ctx: Context, input: JsonValue) -> JsonValue:
        return f"{label}:{input}"

    fn.__name__ = label
    fn.__qualname__ = label
    return fn


async def test_paths_of_sequence_loop_branch_and_code_steps() -> None:
    graph = sequence(
        [
            run_code(note("first"), id="first"),
            loop([run_code(note("body"), id="body")], max_iterations=3, id="again"),
            loop(
                [run_code(note("once"), id="once")],
                until=lambda ctx, output: True,
                max_iterations=5,
                id="short",
            ),
            branch(
                lambda ctx: ctx.state == "yes",
                then=run_code(note("yes"), id="yes"),
                otherwise=run_code(note("no"), id="no"),
                id="pick",
            ),
        ],
        id="root",
    )
    h = AgentHarness(name="t", agent_graph=graph)
    ctx = h.create_context(state="no")
    recorder = Notebook()
    output = await h.execute(ctx, "in", recorder=recorder)

    assert output == "no:in"
    assert recorder.started_paths() == [
        "root.first",
        "root.again[0].body",
        "root.again[1].body",
        "root.again[2].body",
        "root.short[0].once",
        "root.pick.no",
    ]


async def test_a_branch_without_otherwise_outputs_none() -> None:
    graph = branch(lambda ctx: False, then=run_code(note("yes"), id="yes"), id="pick")
    h = AgentHarness(name="t", agent_graph=graph)
    recorder = Notebook()
    assert await h.execute(h.create_context(), recorder=recorder) is None
    assert recorder.entries == []


async def test_run_code_gets_the_context_and_input_and_may_be_async() -> None:
    seen: list[tuple[Context, JsonValue]] = []

    async def compute(ctx: Context, input: JsonValue) -> JsonValue:
        seen.append((ctx, input))
        return {"got": input}

    h = AgentHarness(name="t", agent_graph=run_code(compute))
    ctx = h.create_context()
    recorder = Notebook()
    assert await h.execute(ctx, {"n": 1}, recorder=recorder) == {"got": {"n": 1}}
    assert seen == [(ctx, {"n": 1})]
    assert recorder.entries == [("started", "code", "compute"), ("succeeded", "code", "compute")]


async def test_invoke_tool_steps_call_one_tool_at_their_path() -> None:
    counter = Counter()
    graph = sequence(
        [
            invoke_tool("lookup", {"name": "Ada"}),
            invoke_tool("score", lambda ctx: {"years": len(ctx.items)}, id="rate"),
        ],
        id="root",
    )
    h = AgentHarness(name="t", agent_graph=graph, tools=counter.tools)
    recorder = Notebook()
    output = await h.execute(h.create_context(), "x", recorder=recorder)

    assert output == 10  # one item (the input) in the log
    assert counter.calls == [("lookup", "Ada"), ("score", 1)]
    assert recorder.started_paths() == ["root.lookup", "root.rate"]
    assert recorder.units["root.rate"].detail == {"name": "score", "arguments": {"years": 1}}


async def test_a_failed_invoke_tool_step_leaves_no_orphan_tool_message() -> None:
    provider = scripted("fine")
    counter = Counter()
    graph = sequence(
        [invoke_tool("explode", {"reason": "r"}, id="fail"), call_model("main")], id="root"
    )
    h = harness(provider, counter, graph)
    ctx = h.create_context()
    recorder = Notebook()
    await h.execute(ctx, "go", recorder=recorder)

    assert ("failed", "tool", "root.fail") in recorder.entries
    # No model call made it: a tool message without its assistant call is refused by
    # providers, so the failure is the step's output and not part of the conversation.
    assert [m.role for m in provider.requests[0].messages] == ["user"]


async def test_a_failed_invoke_tool_step_outputs_the_error() -> None:
    counter = Counter()
    h = AgentHarness(
        name="t", agent_graph=invoke_tool("explode", {"reason": "r"}), tools=counter.tools
    )
    output = await h.execute(h.create_context())
    assert output == {"error": {"code": "ValueError", "message": "ValueError: boom: r"}}


async def test_spawn_runs_a_child_context_whose_parent_is_the_caller() -> None:
    children: list[Context] = []

    def remember(ctx: Context, input: JsonValue) -> JsonValue:
        children.append(ctx)
        return input

    provider = scripted("child says hi")
    child_graph = sequence([call_model("main"), run_code(remember, id="remember")], id="helper")
    graph = sequence(
        [spawn(child_graph, {"task": "t"}, id="delegate", instructions="You help.")], id="root"
    )
    h = harness(provider, Counter(), graph)
    ctx = h.create_context(id="exec_parent", thread_id="th", resource_id="res", cwd="/x")
    recorder = Notebook()
    output = await h.execute(ctx, "go", recorder=recorder)

    assert output == {"task": "t"}
    (child,) = children
    assert child.parent is ctx
    assert child.id == "exec_parent.delegate"
    assert (child.thread_id, child.resource_id, child.cwd) == ("th", "res", "/x")
    assert [(m.role, m.content) for m in provider.requests[0].messages] == [
        ("system", "You help."),
        ("user", '{"task": "t"}'),
    ]
    assert len(ctx.items) == 1  # the child's conversation stays in the child
    assert recorder.started_paths() == [
        "root.delegate",
        "root.delegate.helper.model",
        "root.delegate.helper.remember",
    ]


# --- identities -----------------------------------------------------------------------


def test_the_same_configuration_has_the_same_identity() -> None:
    assert step_identity(call_model("main", tools=["a"])) == step_identity(
        call_model("main", tools=["a"])
    )
    assert step_identity(agent(slot="main", tools=["a"])) == step_identity(
        agent(slot="main", tools=["a"])
    )
    assert step_identity(invoke_tool("t", {"x": 1})) == step_identity(invoke_tool("t", {"x": 1}))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (call_model("main"), call_model("other")),
        (call_model("main"), call_model("main", tools=["a"])),
        (call_model("main", tools=["a"]), call_model("main", tools=["a", "b"])),
        (call_model("main"), call_model("main", temperature=0.5)),
        (call_model("main"), call_model("main", max_tokens=10)),
        (call_model("main"), call_model("main", id="other")),
        (run_tool_calls(), run_tool_calls(id="other")),
        (invoke_tool("t", {"x": 1}), invoke_tool("t", {"x": 2})),
        (invoke_tool("t"), invoke_tool("u", id="t")),
        (run_code(note("a"), id="c"), run_code(note("b"), id="c")),
        (agent(slot="main"), agent(slot="main", max_turns=9)),
        (agent(slot="main"), agent(slot="main", tools=["a"])),
        (agent(slot="main"), agent(slot="other")),
        (
            sequence([run_code(note("a"))], id="s"),
            sequence([run_code(note("a")), run_code(note("b"))], id="s"),
        ),
        (
            branch(note("c"), run_code(note("a"))),
            branch(note("c"), run_code(note("a")), run_code(note("b"))),
        ),
        (spawn(agent(slot="main")), spawn(agent(slot="other"))),
        (spawn(agent(slot="main"), "x"), spawn(agent(slot="main"), "y")),
    ],
)
def test_a_changed_configuration_changes_the_identity(before: Any, after: Any) -> None:
    assert step_identity(before) != step_identity(after)


# --- the zero-config harness ----------------------------------------------------------


def files_under(folder: Path) -> list[Path]:
    return list(folder.rglob("*"))


async def test_a_zero_config_harness_writes_nothing_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    provider = scripted(
        "child done",
        ask(("c1", "lookup", {"name": "Ada"}), ("c2", "explode", {"reason": "r"})),
        "Ada looked up",
    )
    counter = Counter()
    graph = sequence(
        [
            spawn(sequence([call_model("main")], id="child"), "help", id="helper"),
            agent(slot="main"),
        ],
        id="root",
    )
    h = harness(provider, counter, graph)
    ctx = h.create_context()
    output = await h.execute(ctx, "Score Ada")  # no recorder: a NullRecorder

    assert output == "Ada looked up"
    assert counter.calls == [("lookup", "Ada"), ("explode", "r")]
    assert files_under(tmp_path) == []
    assert not (tmp_path / ".little-workflow").exists()
    assert ctx.cwd is None
    assert os.getcwd() == str(tmp_path)


def test_the_null_recorder_is_a_recorder() -> None:
    assert isinstance(NullRecorder(), Recorder)
    assert isinstance(Notebook(), Recorder)
