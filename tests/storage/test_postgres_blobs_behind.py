"""An append's blobs on PostgreSQL are put behind it: one statement committed without
waiting for the WAL's flush, which the append's own synchronous commit covers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from little_workflow.events import HarnessModelCalled, RunStarted
from little_workflow.storage import PayloadLog, open_store
from little_workflow.storage._blobs_postgres import _PUT_BEHIND, PostgresBlobStore

pytestmark = pytest.mark.postgres
RUN = "run_behind"


def _called(turn: int) -> HarnessModelCalled:
    messages: list[JsonValue] = [{"role": "user", "content": "u" * 5000}]
    messages += [{"role": "assistant", "content": f"answer {i} " + "a" * 300} for i in range(turn)]
    request: dict[str, JsonValue] = {"model": "m", "messages": messages, "tools": []}
    return HarnessModelCalled(session_id="s", call_id=f"c{turn}", slot="x", request=request)


async def test_the_blobs_statement_relaxes_its_own_commit_only(postgres_url: str) -> None:
    store = await open_store(postgres_url)
    try:
        assert isinstance(store.blobs, PostgresBlobStore)
        async with store.blobs.database.connection("test") as conn:
            cursor = await conn.execute(
                _PUT_BEHIND + " RETURNING current_setting('synchronous_commit')",
                [["0" * 64, "1" * 64], [1, 1], [b"a", b"b"]],
            )
            assert [row[0] for row in await cursor.fetchall()] == ["off", "off"]
            # Its transaction is over: the pooled connection is back to the default.
            cursor = await conn.execute("SHOW synchronous_commit")
            assert (await cursor.fetchone()) == ("on",)
    finally:
        await store.close()


async def test_a_model_calls_node_is_put_behind_and_reads_back(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(postgres_url)
    try:
        blobs = store.blobs
        assert isinstance(blobs, PostgresBlobStore)
        assert blobs.shares_log_with(store.events)
        assert not blobs.shares_log_with(object())
        calls: list[str] = []
        behind, put = blobs.put_behind, blobs.put

        async def counted_behind(data: Any) -> None:
            calls.append("behind")
            await behind(data)

        async def counted_put(data: bytes) -> Any:
            calls.append("put")
            return await put(data)

        monkeypatch.setattr(blobs, "put_behind", counted_behind)
        monkeypatch.setattr(blobs, "put", counted_put)
        log = PayloadLog(store.events, blobs)
        started = RunStarted(
            workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
        )
        await log.append(RUN, [started, _called(0)])
        await log.append(RUN, [_called(1), _called(2)])
        assert calls == ["behind", "behind"]
        read = [record.event for record in await PayloadLog(store.events, blobs).read(RUN)]
        assert read == [started, _called(0), _called(1), _called(2)]
    finally:
        await store.close()
