"""Payloads by reference in runs: large outputs, a 50 MiB tool result through SIGKILL and
resume, the size limit at its step, an agent's conversation as a chain, corruption."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import zlib
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import CorruptDataError, PayloadTooLargeError
from little_workflow.events import (
    HarnessModelCalled,
    RunStatus,
    StepCompleted,
)
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import AgentStep, ExecuteStep, OutputStep, Workflow
from little_workflow.storage import SqliteBlobStore, open_store
from tests.runtime.flows.payload_funcs import big_text
from tests.runtime.support import FLOWS, cli, cli_popen, runtime, wait_for_file

BIG = FLOWS / "big_payload.yaml"
SETUP = ["--setup", "tests.runtime.flows.payload_funcs:setup"]


def rows(count: int) -> list[dict[str, Any]]:
    """A step output of some ``count`` * 60 bytes of JSON."""
    return [{"id": index, "text": f"row {index} " + "t" * 40} for index in range(count)]


def total(data: list[dict[str, Any]]) -> int:
    """A step that reads a large input."""
    return len(data)


LARGE = Workflow(
    name="large",
    steps=(
        ExecuteStep(id="make", fn="tests.runtime.test_payloads:rows", with_={"count": 2000}),
        ExecuteStep(
            id="count",
            fn="tests.runtime.test_payloads:total",
            with_={"data": "${steps.make.output}"},
        ),
        OutputStep(id="out", value={"rows": "${steps.make.output}", "n": "${steps.count.output}"}),
    ),
)


async def test_a_large_step_output_is_a_blob_and_reads_back_everywhere(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        result = await rt.run(LARGE, None, run_id="run_large")
        assert result.output == {"rows": rows(2000), "n": 2000}
        stored = [record.event for record in await rt.events.inner.read("run_large")]
        completed = next(
            e for e in stored if isinstance(e, StepCompleted) and e.step_path == "make"
        )
        assert isinstance(completed.output, dict)
        assert set(completed.output) == {"$blob", "size"}
        # The step's result, its output and the run's output share one blob.
        assert len(await rt.blobs.list()) == 2  # rows(2000), and the run's output object
        assert isinstance(rt.blobs, SqliteBlobStore)
        assert rt.blobs.files.root == tmp_path / "blobs"
    async with runtime(tmp_path) as rt:
        assert (await rt.resume("run_large")).output == result.output
        replayed = await rt.replay("run_large")
        assert replayed.output == result.output
        assert replayed.unreached == ()
    shown = cli(tmp_path, "show", "run_large", "--json")
    assert shown.returncode == 0, shown.stderr
    steps = {row["path"]: row for row in json.loads(shown.stdout)["steps"]}
    assert steps["make"]["output"] == rows(2000)
    listed = cli(tmp_path, "events", "run_large", "--json", "--type", "StepCompleted")
    outputs = [json.loads(line)["event"]["output"] for line in listed.stdout.splitlines()]
    assert outputs[0] == rows(2000)


async def test_a_corrupt_blob_stops_resume_and_show_with_a_typed_error(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        await rt.run(LARGE, None, run_id="run_rot")
        stored = [record.event for record in await rt.events.inner.read("run_rot")]
    completed = next(e for e in stored if isinstance(e, StepCompleted) and e.step_path == "make")
    assert isinstance(completed.output, dict)
    digest = str(completed.output["$blob"])
    path = tmp_path / "blobs" / digest[:2] / digest
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    async with runtime(tmp_path) as rt:
        with pytest.raises(CorruptDataError, match=digest):
            await rt.resume("run_rot")
    for command in (["show", "run_rot"], ["events", "run_rot"], ["replay", "run_rot"]):
        result = cli(tmp_path, *command)
        assert result.returncode == 4, (command, result.stdout, result.stderr)
        assert "corrupt_data" in result.stderr
        assert digest in result.stderr


def test_a_50_mib_tool_result_survives_sigkill_and_resume(tmp_path: Path) -> None:
    calls, entered, release = tmp_path / "calls", tmp_path / "entered", tmp_path / "release"
    env = {
        "LW_PAYLOAD_CALLS": str(calls),
        "LW_TEST_ENTERED": str(entered),
        "LW_TEST_RELEASE": str(release),
    }
    data_dir = tmp_path / "data"
    process = cli_popen(
        data_dir, *SETUP, "run", str(BIG), "--input", '{"mib": 50}', "--run-id", "run_big", env=env
    )
    try:
        # ``check`` runs only once the tool's result is committed.
        wait_for_file(entered, process, limit=120)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL

    blobs = list((data_dir / "blobs").glob("*/*"))
    assert max(path.stat().st_size for path in blobs) > 50 * 1024 * 1024
    # The log holds a reference, not the 50 MiB: the database stays small.
    assert (data_dir / "little-workflow.db").stat().st_size < 1024 * 1024

    release.touch()
    resumed = cli(data_dir, *SETUP, "resume", "run_big", env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    expected = big_text(50)
    assert json.loads(resumed.stdout) == {
        "length": len(expected),
        "sha256": hashlib.sha256(expected.encode()).hexdigest(),
    }
    assert len(calls.read_text().splitlines()) == 1  # the committed result was not fetched again


def test_a_payload_over_the_limit_fails_at_its_step_and_resumes_once_raised(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    env = {"LW_PAYLOAD_CALLS": str(calls)}
    refused = cli(
        tmp_path,
        *SETUP,
        "--max-payload-bytes",
        str(1024 * 1024),
        "run",
        str(BIG),
        "--input",
        '{"mib": 2}',
        "--run-id",
        "run_limit",
        env=env,
    )
    assert refused.returncode == 3, refused.stderr
    assert "payload_too_large" in refused.stderr
    assert "'fetch'" in refused.stderr
    assert str(1024 * 1024) in refused.stderr
    assert list((tmp_path / "blobs").glob("*/*")) == []  # nothing of it was written

    events = cli(tmp_path, "events", "run_limit", "--json")
    types = [json.loads(line)["type"] for line in events.stdout.splitlines()]
    # Left as a kill would leave it: running, the step not completed, nothing failed.
    assert types[0] == "RunStarted"
    assert not {"harness.tool_call.succeeded", "StepCompleted", "RunFailed"} & set(types)

    resumed = cli(tmp_path, *SETUP, "resume", "run_limit", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["length"] == 2 * 1024 * 1024
    assert len(calls.read_text().splitlines()) == 2


async def test_the_limit_error_names_the_step_in_process(tmp_path: Path) -> None:
    async with runtime(tmp_path, max_payload_bytes=50_000) as rt:
        with pytest.raises(PayloadTooLargeError) as caught:
            await rt.run(LARGE, None, run_id="run_small_limit")
        assert caught.value.where == "make"
        assert caught.value.size > 50_000
        assert caught.value.limit == 50_000
        state = await rt.get_state("run_small_limit")
        assert state.status is RunStatus.RUNNING
        assert state.completed("make") is None
    async with runtime(tmp_path) as rt:
        assert (await rt.resume("run_small_limit")).output == {"rows": rows(2000), "n": 2000}


# --- an agent's conversation -------------------------------------------------------

TURNS = 40


def _reply(request: ModelRequest) -> Any:
    turns = sum(1 for message in request.messages if message.role == "assistant")
    if turns >= TURNS:
        return f"done after {turns} turns"
    return {
        "content": f"turn {turns}: " + "thinking " * 50,
        "tool_calls": [{"id": f"call_{turns}", "name": "note", "arguments": {"n": turns}}],
    }


def note(n: int) -> str:
    """Return a note of about 500 bytes.

    Args:
        n: The note's number.
    """
    return f"note {n}: " + "observed " * 55


AGENT = Workflow(
    name="chat",
    steps=(
        AgentStep(id="agent", slot="worker", prompt="Go", tools=("note",), max_turns=TURNS + 5),
        OutputStep(id="out", value="${steps.agent.output}"),
    ),
)


def _agent_runtime(data_dir: Path, requests: list[ModelRequest]) -> Any:
    def reply(request: ModelRequest) -> Any:
        requests.append(request)
        return _reply(request)

    return runtime(
        data_dir,
        model_slots={"worker": ModelSlot(provider=scripted(reply), model="m")},
        tools=[tool(note)],
    )


async def test_an_agent_conversation_is_stored_once_and_resumes_mid_chain(
    tmp_path: Path,
) -> None:
    requests: list[ModelRequest] = []
    async with _agent_runtime(tmp_path / "whole", requests) as rt:
        whole = await rt.run(AGENT, None, run_id="run_chat")
        records = await rt.events.read("run_chat")
        stored = [record.event for record in await rt.events.inner.read("run_chat")]
        blob_bytes = sum(info.size for info in await rt.blobs.list())
    assert whole.output == f"done after {TURNS} turns"
    called = [e for e in stored if isinstance(e, HarnessModelCalled)]
    kinds = [e.request.get("kind") if isinstance(e.request, dict) else None for e in called]
    assert kinds[-1] == "conversation"
    assert kinds.count("conversation") > TURNS - 10
    recorded = [r.event.request for r in records if isinstance(r.event, HarnessModelCalled)]
    assert recorded == [request.model_dump(mode="json", by_alias=True) for request in requests]
    last_request = len(json.dumps(recorded[-1]))
    assert blob_bytes < 2 * last_request  # the sum of all requests is some 20x it

    # A crash after the 20th model response: a new process resumes from the log.
    cut = next(
        r.seq
        for r in records
        if r.type == "harness.model.responded" and r.event.call_id == "agent.turns[20].model"
    )
    store = await open_store(f"sqlite:///{tmp_path / 'cut'}/little-workflow.db")
    try:
        source = await open_store(f"sqlite:///{tmp_path / 'whole'}/little-workflow.db")
        try:
            kept = [record.event for record in await source.events.read("run_chat")][:cut]
            for info in await source.blobs.list():
                await store.blobs.put(await source.blobs.get(info.digest))
        finally:
            await source.close()
        await store.events.append("run_chat", kept, expected_seq=0)
    finally:
        await store.close()
    os.makedirs(tmp_path / "cut" / "runs", exist_ok=True)
    after: list[ModelRequest] = []
    async with _agent_runtime(tmp_path / "cut", after) as rt:
        await rt.catalog.store(rt.catalog.resolve(AGENT))
        resumed = await rt.resume("run_chat")
        assert resumed.output == whole.output
        assert len(after) == TURNS - 20  # turns 21..40 only
        tail = [r.event for r in await rt.events.inner.read("run_chat")][cut:]
        first_new = next(e for e in tail if isinstance(e, HarnessModelCalled))
        assert isinstance(first_new.request, dict)
        assert first_new.request["kind"] == "conversation"
        node = json.loads(zlib.decompress(await rt.blobs.get(str(first_new.request["$blob"]))))
    assert node["prev"] is not None
    assert node["keep"] > 40
