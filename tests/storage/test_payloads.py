"""PayloadLog: large payloads by reference, conversation chains, escaping, the limit,
corruption; on real stores (memory, a SQLite file with blob files, PostgreSQL)."""

from __future__ import annotations

import base64
import json
import random
import typing
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from little_workflow.errors import BlobNotFoundError, CorruptDataError, PayloadTooLargeError
from little_workflow.events import (
    EVENT_TYPES,
    Event,
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessSessionStarted,
    OuterLoopCycleCompleted,
    RunStarted,
    StepAttemptStarted,
    StepCompleted,
    WaitStarted,
)
from little_workflow.storage import (
    PayloadLog,
    SqliteBlobStore,
    Store,
    open_store,
    payload_refs,
    referenced_digests,
)
from little_workflow.storage._payloads import PAYLOAD_FIELDS
from tests.storage.raw_sqlite import damage_sqlite_blob

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
RUN = "run_payloads"


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    url = (
        "memory:" if request.param == "memory" else request.getfixturevalue(f"{request.param}_url")
    )
    opened = await open_store(url)
    yield opened
    await opened.close()


def _log(store: Store, **options: int) -> PayloadLog:
    return PayloadLog(store.events, store.blobs, **options)


def _started() -> RunStarted:
    return RunStarted(
        workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
    )


def _completed(path: str, output: JsonValue) -> StepCompleted:
    return StepCompleted(step_path=path, step_id=path, kind="execute", output=output)


async def _outputs(log: PayloadLog) -> list[Any]:
    return [
        record.event.output
        for record in await log.read(RUN)
        if isinstance(record.event, StepCompleted)
    ]


async def test_small_payloads_stay_inline_and_large_ones_become_references(
    store: Store,
) -> None:
    log = _log(store)
    small = {"index": 1, "text": "short"}
    large = {"rows": [{"id": i, "text": "x" * 40} for i in range(200)]}
    await log.append(RUN, [_started(), _completed("a", small), _completed("b", large)])

    stored = [record.event for record in await store.events.read(RUN)]
    assert isinstance(stored[1], StepCompleted)
    assert stored[1].output == small
    assert isinstance(stored[2], StepCompleted)
    reference = stored[2].output
    assert isinstance(reference, dict)
    assert set(reference) == {"$blob", "size"}
    data = await store.blobs.get(str(reference["$blob"]))
    assert json.loads(data) == large
    assert reference["size"] == len(data)

    assert await _outputs(log) == [small, large]
    # Another process (a fresh PayloadLog, nothing cached) reads the same values.
    assert await _outputs(_log(store)) == [small, large]


async def test_one_value_in_two_fields_is_stored_once(store: Store) -> None:
    log = _log(store)
    value = ["y" * 100] * 100
    await log.append(RUN, [_started(), _completed("a", value), _completed("b", value)])
    assert len(await store.blobs.list()) == 1
    assert await _outputs(log) == [value, value]


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize(
    "lookalike",
    [
        {"$blob": "not a digest"},
        {"$blob": "a" * 64, "size": 3},
        {"$blob": "a" * 64, "size": 3, "kind": "conversation"},
        {"$lit": 1},
        {"$lit": {"$blob": "b" * 64, "size": 1}},
        {"nested": {"$blob": "c" * 64, "size": 1}},
        [{"$blob": "d" * 64, "size": 1}],
        "$blob",
    ],
)
async def test_values_that_look_like_references_round_trip_exactly(
    store: Store, lookalike: JsonValue, size: str
) -> None:
    log = _log(store)
    value: JsonValue = lookalike
    if size == "large":
        value = (
            {**lookalike, "padding": "p" * 5000}
            if isinstance(lookalike, dict)
            else [lookalike, "p" * 5000]
        )
    await log.append(RUN, [_started(), _completed("a", value)])
    (output,) = await _outputs(log)
    assert output == value
    assert json.dumps(output) == json.dumps(value)  # key order too


async def test_a_payload_over_the_limit_names_the_step_and_writes_nothing(
    store: Store,
) -> None:
    log = _log(store, max_payload_bytes=10_000)
    await log.append(RUN, [_started()])
    too_big = {"blob": "z" * 20_000}
    with pytest.raises(PayloadTooLargeError) as caught:
        await log.append(
            RUN,
            [
                StepCompleted(step_path="ok", step_id="ok", kind="execute", output="q" * 5000),
                _completed("fetch[k].big", too_big),
            ],
        )
    error = caught.value
    assert error.where == "fetch[k].big"
    assert error.size == len(json.dumps(too_big, separators=(",", ":")))
    assert error.limit == 10_000
    assert "'fetch[k].big'" in error.message
    assert str(error.size) in error.message
    assert await store.events.last_seq(RUN) == 1
    assert await store.blobs.list() == []  # the other event's blob was not put either


def _request(messages: list[JsonValue]) -> dict[str, JsonValue]:
    return {
        "model": "m",
        "messages": messages,
        "tools": [{"name": "search", "description": "d" * 600, "parameters": {}}],
        "temperature": None,
        "maxTokens": None,
    }


def _turn(index: int) -> list[JsonValue]:
    return [
        {"role": "assistant", "content": f"answer {index} " + "a" * 500},
        {"role": "tool", "content": f"result {index} " + "r" * 500},
    ]


async def _stored_bytes(store: Store) -> int:
    return sum(info.size for info in await store.blobs.list())


async def test_a_conversation_is_stored_as_a_chain_that_grows_linearly(store: Store) -> None:
    log = _log(store)
    await log.append(RUN, [_started()])
    messages: list[JsonValue] = [{"role": "user", "content": "go"}]
    requests = []
    for turn in range(60):
        messages = [*messages, *_turn(turn)]
        request = _request(messages)
        requests.append(request)
        called = HarnessModelCalled(
            session_id="agent", call_id=f"c{turn}", slot="s", request=request
        )
        await log.append(RUN, [called], sync=False)
    conversation = len(json.dumps(requests[-1]))
    # Naive journaling would store the sum of all requests: some 30x the last one here.
    assert sum(len(json.dumps(r)) for r in requests) > 25 * conversation
    assert await _stored_bytes(store) < 1.5 * conversation

    for reader in (log, _log(store)):
        read = [record.event for record in await reader.read(RUN)][1:]
        assert [event.request for event in read if isinstance(event, HarnessModelCalled)] == (
            requests
        )
    # Every node and the shared rest of the request are reachable from the events.
    await _every_blob_is_reachable(store)


async def test_a_resumed_writer_continues_the_chain(store: Store) -> None:
    first = _log(store)
    await first.append(RUN, [_started()])
    messages: list[JsonValue] = [{"role": "user", "content": "u" * 5000}]
    await first.append(
        RUN,
        [HarnessModelCalled(session_id="s", call_id="c0", slot="x", request=_request(messages))],
    )
    before = await _stored_bytes(store)
    # A new process reads the log (as a resume does), then makes the next call.
    second = _log(store)
    await second.read(RUN)
    messages = [*messages, *_turn(1)]
    await second.append(
        RUN,
        [HarnessModelCalled(session_id="s", call_id="c1", slot="x", request=_request(messages))],
    )
    added = await _stored_bytes(store) - before
    assert added < 2000  # the new turn, not the 5000-byte first message again
    assert [
        record.event.request
        for record in await _log(store).read(RUN)
        if isinstance(record.event, HarnessModelCalled)
    ][-1] == _request(messages)


async def test_a_conversation_whose_middle_changed_round_trips(store: Store) -> None:
    log = _log(store, inline_bytes=100)
    await log.append(RUN, [_started()])
    first: list[JsonValue] = [{"role": "system", "content": "A" * 300}, *_turn(0), *_turn(1)]
    second: list[JsonValue] = [first[0], {"role": "user", "content": "edited"}, *_turn(2)]
    third: list[JsonValue] = [{"role": "system", "content": "B"}, *_turn(3)]
    requests = [_request(first), _request(second), _request(third)]
    for index, request in enumerate(requests):
        await log.append(
            RUN,
            [HarnessModelCalled(session_id="s", call_id=f"c{index}", slot="x", request=request)],
        )
    read = await _log(store).read(RUN)
    assert [r.event.request for r in read if isinstance(r.event, HarnessModelCalled)] == requests


async def test_model_responses_and_small_requests_are_plain_payloads(store: Store) -> None:
    log = _log(store)
    response = {"id": "r1", "model": "m", "message": {"role": "assistant", "content": "k" * 9000}}
    await log.append(
        RUN,
        [
            _started(),
            HarnessModelCalled(
                session_id="s", call_id="c", slot="x", request=_request([{"role": "user"}])
            ),
            HarnessModelResponded(session_id="s", call_id="c", response=response),
        ],
    )
    stored = [record.event for record in await store.events.read(RUN)]
    assert isinstance(stored[1], HarnessModelCalled)
    assert stored[1].request == _request([{"role": "user"}])
    assert [ref.kind for ref in payload_refs(stored[2])] == ["value"]
    assert (await log.read(RUN))[2].event == stored[2].model_copy(update={"response": response})


async def test_a_flipped_byte_in_a_blob_file_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        log = _log(store)
        await log.append(RUN, [_started(), _completed("a", "v" * 10_000)])
        (info,) = await store.blobs.list()
        data = bytearray(await store.blobs.get(info.digest))
        data[5000] ^= 0x20
        await _damage(store, info.digest, bytes(data))
        with pytest.raises(CorruptDataError) as caught:
            await _log(store).read(RUN)
        assert info.digest in caught.value.message
        assert f"run {RUN!r} seq 2" in caught.value.message
        await _damage(store, info.digest, None)
        with pytest.raises(BlobNotFoundError, match=info.digest):
            await _log(store).read(RUN)
    finally:
        await store.close()


async def _every_blob_is_reachable(store: Store) -> None:
    """What the events of ``RUN`` reach, followed through their chains, is every blob."""
    stored = [record.event for record in await store.events.read(RUN)]
    refs = [ref for event in stored for ref in payload_refs(event)]
    assert await referenced_digests(refs, store.blobs) == {
        info.digest for info in await store.blobs.list()
    }


async def _damage(store: Store, digest: str, data: bytes | None) -> None:
    assert isinstance(store.blobs, SqliteBlobStore)
    await damage_sqlite_blob(store.blobs, digest, data)


def test_every_json_field_of_every_event_is_a_payload_field_or_known_small() -> None:
    # A new event with a JsonValue field must decide: listed in PAYLOAD_FIELDS, or here.
    small = {
        (HarnessSessionStarted, "manifest"),  # slot ids and schema hashes
        (OuterLoopCycleCompleted, "result"),  # a nested model, not a JsonValue field
        (WaitStarted, "schema_"),  # a wait's JSON Schema, written in the workflow
        (RunStarted, "declared_events"),  # the events' schemas, written in the workflow
        (HarnessModelResponded, "summary"),  # a large answer's model and usage
    }
    for model in EVENT_TYPES.values():
        hints = typing.get_type_hints(model)
        for name in model.model_fields:
            if "JsonValue" in str(hints[name]) and (model, name) not in small:
                assert name in PAYLOAD_FIELDS.get(model, ()), f"{model.__name__}.{name}"
    assert all(issubclass(model, Event) for model in PAYLOAD_FIELDS)
    assert StepAttemptStarted not in PAYLOAD_FIELDS


@pytest.mark.parametrize("count", [1, 3000])
async def test_equal_values_of_other_types_in_one_append_stay_apart(
    store: Store, count: int
) -> None:
    # ``1 == True`` and ``1 == 1.0`` in Python; their JSON differs, and so must what is read.
    log = _log(store)
    values: list[JsonValue] = [{"a": [1] * count}, {"a": [True] * count}, {"a": [1.0] * count}]
    await log.append(RUN, [_started(), *(_completed(f"s{i}", v) for i, v in enumerate(values))])
    read = await _outputs(_log(store))
    assert [json.dumps(value) for value in read] == [json.dumps(value) for value in values]


def _photo_message(photo: bytes, text: str) -> JsonValue:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image", "mediaType": "image/png", "data": base64.b64encode(photo).decode()},
        ],
    }


def _node_versions(store_blobs: list[bytes]) -> list[int]:
    versions = []
    for data in store_blobs:
        try:
            versions.append(json.loads(zlib.decompress(data))["v"])
        except (zlib.error, ValueError, KeyError, TypeError):
            continue  # a value blob, not a node
    return versions


async def test_a_media_part_sent_by_many_sessions_is_one_blob(store: Store) -> None:
    log = _log(store)
    await log.append(RUN, [_started()])
    photo = random.Random(7).randbytes(60_000)  # incompressible, as a real PNG is
    requests = []
    for session in range(5):
        messages: list[JsonValue] = [_photo_message(photo, f"review {session}")]
        for turn in range(3):
            request = _request(messages)
            requests.append(request)
            called = HarnessModelCalled(
                session_id=f"s{session}", call_id=f"c{turn}", slot="x", request=request
            )
            await log.append(RUN, [called], sync=False)
            messages = [*messages, *_turn(turn)]
    # Fifteen requests of five sessions carry the photo: its bytes are on disk once.
    assert await _stored_bytes(store) < 1.3 * len(photo)
    photo_blobs = [info for info in await store.blobs.list() if info.size == len(photo)]
    assert len(photo_blobs) == 1
    assert await store.blobs.get(photo_blobs[0].digest) == photo
    for reader in (log, _log(store)):
        read = [r.event for r in await reader.read(RUN)]
        assert [e.request for e in read if isinstance(e, HarnessModelCalled)] == requests
    # Only nodes that add a referenced part are v2; the text-only turns stay v1.
    blobs = [await store.blobs.get(info.digest) for info in await store.blobs.list()]
    assert sorted(_node_versions(blobs)) == [1] * 10 + [2] * 5
    await _every_blob_is_reachable(store)


async def test_a_small_or_malformed_media_part_stays_in_its_node(store: Store) -> None:
    log = _log(store)
    await log.append(RUN, [_started()])
    small = _photo_message(b"tiny png", "look")
    not_base64: JsonValue = {
        "role": "user",
        "content": [{"type": "file", "mediaType": "application/pdf", "data": "*" * 9000}],
    }
    turns = [message for index in range(4) for message in _turn(index)]
    requests = [_request([small, *turns]), _request([not_base64])]
    for index, request in enumerate(requests):
        called = HarnessModelCalled(session_id=f"s{index}", call_id="c", slot="x", request=request)
        await log.append(RUN, [called])
    read = await _log(store).read(RUN)
    assert [r.event.request for r in read if isinstance(r.event, HarnessModelCalled)] == requests
    blobs = [await store.blobs.get(info.digest) for info in await store.blobs.list()]
    assert _node_versions(blobs) == [1, 1]


async def test_a_lost_or_damaged_media_blob_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        photo = random.Random(3).randbytes(20_000)
        called = HarnessModelCalled(
            session_id="s", call_id="c", slot="x", request=_request([_photo_message(photo, "a")])
        )
        await _log(store).append(RUN, [_started(), called])
        [info] = [i for i in await store.blobs.list() if i.size == len(photo)]
        damaged = bytearray(photo)
        damaged[100] ^= 0x01
        await _damage(store, info.digest, bytes(damaged))
        with pytest.raises(CorruptDataError, match=info.digest):
            await _log(store).read(RUN)
        await _damage(store, info.digest, None)
        with pytest.raises(BlobNotFoundError, match=info.digest):
            await _log(store).read(RUN)
    finally:
        await store.close()
