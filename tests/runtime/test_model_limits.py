"""A model slot's limit holds across processes, and a retry's sleep holds no permit.

Three OS processes each start four runs at once, each run one model call through slot
``judge`` to one local HTTP server (``FakeModelServer``, which counts the requests it is
handling at once). With ``judge`` limited to 2 at once in the store, the server never
handles more than 2, on SQLite (processes sharing the file) and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.harness import ModelSlot
from little_workflow.harness.models import ModelRequest, OpenAICompatibleProvider
from little_workflow.runtime import Runtime
from little_workflow.storage import Limit, Rate
from little_workflow.testing.fake_models import FakeModelServer
from tests.workers.support import until

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
FLOW = Path(__file__).with_name("agent_flows") / "ask_judge.yaml"
PROCESSES = 3
RUNS_EACH = 4


def _verdict(request: ModelRequest) -> str:
    return f"verdict on {request.messages[-1].content}"


def _run_clients(base_url: str, store: str, tmp_path: Path) -> list[tuple[int, str, str]]:
    """Start the client processes together; each one's exit code, stdout and stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    client = [sys.executable, "-m", "tests.runtime.model_limit_client", base_url, store]
    processes = [
        subprocess.Popen(
            [*client, str(tmp_path / f"data{index}"), f"run_p{index}", str(RUNS_EACH)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(PROCESSES)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=150)
        results.append((process.returncode, out.decode(), err.decode()))
    return results


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_model_slot_limit_of_2_holds_across_3_processes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: str = request.getfixturevalue(f"{backend}_url")
    async with Runtime(tmp_path / "setup", store=store) as runtime:
        await runtime.set_model_limit("judge", concurrency=2, rate=Rate(1000, per=60))
        assert await runtime.queue.limits("model") == {
            "judge": Limit(concurrency=2, rate=Rate(1000, per=60))
        }
    with FakeModelServer(_verdict, delay=0.2) as server:
        results = await asyncio.to_thread(_run_clients, server.openai_base_url, store, tmp_path)
        for code, _, err in results:
            assert code == 0, err
        outputs = [json.loads(out) for _, out, _ in results]
        assert outputs == [[f"verdict on Judge {n}" for n in range(RUNS_EACH)]] * PROCESSES
        assert len(server.requests) == PROCESSES * RUNS_EACH
        assert {r.status for r in server.requests} == {200}
        # Twelve calls could have been in flight at once: the slot's limit held them to 2.
        assert 1 <= server.peak_in_flight <= 2


async def test_a_call_sleeping_on_retry_after_gives_its_permit_to_another(
    tmp_path: Path,
) -> None:
    with FakeModelServer(_verdict) as server:
        server.fail_next(1, status=429, retry_after=2)
        provider = OpenAICompatibleProvider(server.openai_base_url, api_key_env=None)
        slot = ModelSlot(provider=provider, model="judge-model")
        async with Runtime(tmp_path / "data", model_slots={"judge": slot}) as runtime:
            await runtime.set_model_limit("judge", concurrency=1)
            first = asyncio.create_task(runtime.run(FLOW, {"n": 0}, run_id="run_first"))
            await until(lambda: bool(server.requests))  # the first call has its 429
            second = await runtime.run(FLOW, {"n": 1}, run_id="run_second")
            assert (await first).output == "verdict on Judge 0"
            assert second.output == "verdict on Judge 1"
        await provider.aclose()
        prompts = [
            (r.status, r.body["messages"][-1]["content"])
            for r in server.requests
            if isinstance(r.body, dict)
        ]
    # The second call was made while the first slept before its retry: the limit of 1
    # was not held by a call that was only waiting.
    assert prompts == [(429, "Judge 0"), (200, "Judge 1"), (200, "Judge 0")]
