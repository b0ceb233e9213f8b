"""``Context``: the item log (deduplicated by response id), the append pipeline, the layers."""

from __future__ import annotations

from collections.abc import Sequence

from little_workflow.codec import JsonValue
from little_workflow.harness._context import (
    Context,
    ContextLayer,
    HistoryLayer,
    InstructionsLayer,
    Item,
    ItemLog,
    ScratchpadLayer,
    default_layers,
    run_append_pipeline,
)
from little_workflow.harness.models import Message, ModelRequest, ToolCall, to_model_response

REQUEST = ModelRequest(model="m", messages=(Message(role="user", content="Score Ada"),))


def answer_item(reply: str, request: ModelRequest = REQUEST) -> Item:
    """The item a scripted answer becomes, with the response id the provider gives it."""
    response = to_model_response(reply, request)
    return Item(message=response.message, response_id=response.id)


def user(text: str) -> Item:
    return Item(message=Message(role="user", content=text))


def asks_for_tool(call_id: str) -> Item:
    return Item(
        message=Message(
            role="assistant", tool_calls=(ToolCall(id=call_id, name="lookup", arguments={}),)
        )
    )


def tool_result(call_id: str, content: str) -> Item:
    return Item(message=Message(role="tool", tool_call_id=call_id, name="lookup", content=content))


class RecordingLayer:
    """A layer that renders nothing and remembers what each ``on_append`` saw."""

    id = "recording"

    def __init__(self) -> None:
        self.seen: list[list[Item]] = []

    def render(self, ctx: Context) -> list[Message]:
        return []

    def on_append(self, ctx: Context, items: Sequence[Item]) -> None:
        self.seen.append(list(items))

    def state(self) -> JsonValue:
        return {"appends": len(self.seen)}

    def load_state(self, state: JsonValue) -> None:
        pass


# --- the item log ---------------------------------------------------------------------


def test_an_identical_reissued_answer_is_not_appended_twice() -> None:
    log = ItemLog()
    first = answer_item("Ada scores 70")
    again = answer_item("Ada scores 70")  # the same call re-issued after a crash
    assert first.response_id is not None
    assert again.response_id == first.response_id

    assert log.append(first) is True
    assert log.append(again) is False
    assert len(log) == 1
    assert log.items == (first,)


def test_a_different_answer_is_appended() -> None:
    log = ItemLog()
    first = answer_item("Ada scores 70")
    other = answer_item("Ada scores 80")
    assert other.response_id != first.response_id

    assert log.append(first) is True
    assert log.append(other) is True
    assert [item.message.content for item in log.items] == ["Ada scores 70", "Ada scores 80"]
    assert log.last_assistant() == other.message


def test_items_without_a_response_id_are_never_deduplicated() -> None:
    log = ItemLog()
    assert log.append(user("hi")) is True
    assert log.append(user("hi")) is True
    assert log.messages == [Message(role="user", content="hi")] * 2


def test_an_item_log_built_from_items_deduplicates_them_too() -> None:
    first = answer_item("Ada scores 70")
    log = ItemLog([user("Score Ada"), first, answer_item("Ada scores 70")])
    assert log.items == (user("Score Ada"), first)


def test_items_round_trip_through_json() -> None:
    first = answer_item("Ada scores 70")
    log = ItemLog([user("Score Ada"), first])
    value = log.to_json()
    assert value["items"] == [
        {
            "message": Message(role="user", content="Score Ada").model_dump(
                mode="json", by_alias=True
            )
        },
        {
            "message": first.message.model_dump(mode="json", by_alias=True),
            "responseId": first.response_id,
        },
    ]
    items = value["items"]
    assert isinstance(items, list)
    rebuilt = [Item.from_json(item) for item in items if isinstance(item, dict)]
    assert rebuilt == list(log.items)


def test_last_assistant_is_none_without_an_answer() -> None:
    log = ItemLog([user("Score Ada")])
    assert log.last_assistant() is None


# --- the append pipeline --------------------------------------------------------------


def test_the_pipeline_shows_every_layer_only_the_items_it_added() -> None:
    first, second = RecordingLayer(), RecordingLayer()
    ctx = Context(layers=[first, InstructionsLayer("Be brief"), second])
    answer = answer_item("Ada scores 70")

    added = run_append_pipeline(ctx, [user("Score Ada"), answer])
    assert added == [user("Score Ada"), answer]
    assert first.seen == second.seen == [[user("Score Ada"), answer]]

    # The answer is already in the log: only the new user message is added and shown.
    added = run_append_pipeline(ctx, [answer_item("Ada scores 70"), user("Thanks")])
    assert added == [user("Thanks")]
    assert first.seen == second.seen == [[user("Score Ada"), answer], [user("Thanks")]]
    assert ctx.items.items == (user("Score Ada"), answer, user("Thanks"))


def test_the_pipeline_does_not_call_the_layers_when_nothing_was_added() -> None:
    layer = RecordingLayer()
    ctx = Context(layers=[layer])
    answer = answer_item("Ada scores 70")
    run_append_pipeline(ctx, [answer])

    assert run_append_pipeline(ctx, [answer_item("Ada scores 70")]) == []
    assert run_append_pipeline(ctx, []) == []
    assert layer.seen == [[answer]]


def test_a_custom_layer_satisfies_the_layer_protocol() -> None:
    assert isinstance(RecordingLayer(), ContextLayer)
    for layer in default_layers("x"):
        assert isinstance(layer, ContextLayer)


# --- rendering ------------------------------------------------------------------------


def test_instructions_render_as_one_system_message() -> None:
    ctx = Context(layers=[InstructionsLayer("You score candidates.")])
    assert ctx.render() == [Message(role="system", content="You score candidates.")]
    assert InstructionsLayer(None).render(ctx) == []
    assert InstructionsLayer("").render(ctx) == []


def test_scratchpad_notes_render_after_the_instructions() -> None:
    ctx = Context(layers=default_layers("Be brief"))
    run_append_pipeline(ctx, [user("Score Ada")])
    scratchpad = ctx.layer("scratchpad")
    assert isinstance(scratchpad, ScratchpadLayer)
    assert ctx.render() == [
        Message(role="system", content="Be brief"),
        Message(role="user", content="Score Ada"),
    ]

    scratchpad.notes += ["Ada: 7 years", "score = years * 10"]
    assert ctx.render() == [
        Message(role="system", content="Be brief"),
        Message(role="system", content="Notes so far:\nAda: 7 years\nscore = years * 10"),
        Message(role="user", content="Score Ada"),
    ]


def test_notes_are_not_taken_from_the_conversation() -> None:
    scratchpad = ScratchpadLayer()
    ctx = Context(layers=[scratchpad])
    run_append_pipeline(ctx, [user("remember this"), answer_item("ok")])
    assert scratchpad.notes == []
    assert ctx.render() == []


def test_history_renders_the_whole_item_log_without_a_window() -> None:
    ctx = Context(layers=[HistoryLayer()])
    items = [user("Score Ada"), asks_for_tool("c1"), tool_result("c1", "7"), answer_item("70")]
    run_append_pipeline(ctx, items)
    assert ctx.render() == [item.message for item in items]


def test_a_history_window_keeps_the_latest_messages() -> None:
    ctx = Context(layers=[HistoryLayer(window=2)])
    run_append_pipeline(ctx, [user("one"), user("two"), user("three")])
    assert [message.content for message in ctx.render()] == ["two", "three"]


def test_a_history_window_never_starts_with_an_orphan_tool_message() -> None:
    ctx = Context(layers=[HistoryLayer(window=3)])
    run_append_pipeline(
        ctx,
        [
            user("Score Ada"),
            Item(
                message=Message(
                    role="assistant",
                    tool_calls=(
                        ToolCall(id="c1", name="lookup", arguments={}),
                        ToolCall(id="c2", name="score", arguments={}),
                    ),
                )
            ),
            tool_result("c1", "7"),
            tool_result("c2", "70"),
            answer_item("Ada scores 70"),
        ],
    )
    # The last three are tool, tool, assistant: both tool results lost their call.
    rendered = ctx.render()
    assert rendered == [ctx.items.items[-1].message]
    assert all(message.role != "tool" for message in rendered)


def test_a_window_that_cuts_between_a_call_and_its_results_keeps_them_together() -> None:
    ctx = Context(layers=[HistoryLayer(window=4)])
    items = [
        user("one"),
        user("Score Ada"),
        asks_for_tool("c1"),
        tool_result("c1", "7"),
        answer_item("Ada scores 70"),
    ]
    run_append_pipeline(ctx, items)
    rendered = ctx.render()
    assert rendered == [item.message for item in items[1:]]
    assert rendered[0].role != "tool"


def test_a_window_of_zero_renders_no_history() -> None:
    ctx = Context(layers=[HistoryLayer(window=0)])
    run_append_pipeline(ctx, [user("one"), user("two")])
    assert ctx.render() == []


def test_the_default_layers_render_instructions_notes_then_history() -> None:
    ctx = Context(layers=default_layers("Be brief"))
    ctx.items.append(user("Score Ada"))
    scratchpad = ctx.layer("scratchpad")
    assert isinstance(scratchpad, ScratchpadLayer)
    scratchpad.notes.append("n")
    assert [(message.role, message.content) for message in ctx.render()] == [
        ("system", "Be brief"),
        ("system", "Notes so far:\nn"),
        ("user", "Score Ada"),
    ]


# --- layer state ----------------------------------------------------------------------


def test_layer_state_round_trips() -> None:
    instructions = InstructionsLayer("Be brief")
    scratchpad = ScratchpadLayer()
    scratchpad.notes = ["a", "b"]
    history = HistoryLayer(window=5)

    for layer, blank, expected in (
        (instructions, InstructionsLayer(), {"text": "Be brief"}),
        (scratchpad, ScratchpadLayer(), {"notes": ["a", "b"]}),
        (history, HistoryLayer(), {"window": 5}),
    ):
        state = layer.state()
        assert state == expected
        blank.load_state(state)
        assert blank.state() == state

    assert InstructionsLayer().state() == {"text": None}
    assert ScratchpadLayer().state() == {"notes": []}
    assert HistoryLayer().state() == {"window": None}


def test_restored_layers_render_as_the_originals() -> None:
    original = Context(layers=[InstructionsLayer("Be brief"), ScratchpadLayer(), HistoryLayer(1)])
    scratchpad = original.layer("scratchpad")
    assert isinstance(scratchpad, ScratchpadLayer)
    scratchpad.notes.append("note")
    run_append_pipeline(original, [user("one"), user("two")])

    restored = Context(layers=[InstructionsLayer(), ScratchpadLayer(), HistoryLayer()])
    for layer in original.layers:
        target = restored.layer(layer.id)
        assert target is not None
        target.load_state(layer.state())
    run_append_pipeline(restored, original.items.items)
    assert restored.render() == original.render()


def test_load_state_ignores_values_of_the_wrong_shape() -> None:
    instructions = InstructionsLayer("keep")
    instructions.load_state({"text": 3})
    assert instructions.text is None
    instructions.text = "keep"
    instructions.load_state("not an object")
    assert instructions.text == "keep"

    history = HistoryLayer(window=4)
    history.load_state({"window": "ten"})
    assert history.window is None

    scratchpad = ScratchpadLayer()
    scratchpad.notes = ["x"]
    scratchpad.load_state({"notes": "not a list"})
    assert scratchpad.notes == ["x"]
    scratchpad.load_state({"notes": [1, "two"]})
    assert scratchpad.notes == ["1", "two"]


# --- the context ----------------------------------------------------------------------


def test_context_defaults() -> None:
    ctx = Context()
    assert ctx.id.startswith("exec_")
    assert ctx.thread_id is None
    assert ctx.resource_id is None
    assert len(ctx.items) == 0
    assert [layer.id for layer in ctx.layers] == ["instructions", "scratchpad", "history"]
    assert ctx.cwd is None
    assert ctx.previous_cwd is None
    assert ctx.ask_user == []
    assert ctx.state is None
    assert ctx.parent is None
    assert ctx.render() == []
    assert ctx.layer("history") is ctx.layers[2]
    assert ctx.layer("nope") is None


def test_contexts_share_nothing_by_default() -> None:
    one, two = Context(), Context()
    assert one.id != two.id
    assert one.items is not two.items
    assert one.layers is not two.layers
    assert all(a is not b for a, b in zip(one.layers, two.layers, strict=True))
    assert one.ask_user is not two.ask_user
    one.items.append(user("only in one"))
    assert len(two.items) == 0
