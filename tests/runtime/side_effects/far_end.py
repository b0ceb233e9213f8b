"""A far end for side-effect tests: a payment service that deduplicates by key.

State lives in a JSON-lines file named by ``LW_TEST_FAR_END`` so that every process of a
test (the one killed mid-call and the one that resumes) sees the same service. Each line
is one request that reached the service: ``{"key": ..., "amount": ...}``.
Kill points (``LW_TEST_KILL``): ``before_effect`` SIGKILLs the calling process just before
the request is sent, ``after_effect`` just after the service recorded it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from little_workflow.runtime import Happened, StepContext, side_effect
from tests.storage.raw_sqlite import event_json


def _ledger() -> Path:
    return Path(os.environ["LW_TEST_FAR_END"])


def requests() -> list[dict[str, object]]:
    """Every request that reached the service, in order."""
    path = _ledger()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def charged(key: str) -> dict[str, object] | None:
    """The charge the service holds for ``key`` (its first request), if any."""
    return next((request for request in requests() if request["key"] == key), None)


def _kill_at(point: str) -> None:
    if os.environ.get("LW_TEST_KILL") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _send(key: str, amount: int) -> dict[str, object]:
    _kill_at("before_effect")
    fd = os.open(_ledger(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps({"key": key, "amount": amount}) + "\n").encode())
    finally:
        os.close(fd)
    _kill_at("after_effect")
    first = charged(key)
    assert first is not None
    return {"charge": key, "amount": first["amount"]}


def _reconcile(key: str) -> Happened | None:
    found = charged(key)
    return None if found is None else Happened({"charge": key, "amount": found["amount"]})


@side_effect(reconcile=_reconcile)
def charge(ctx: StepContext, amount: int) -> dict[str, object]:
    """Charge ``amount`` under the step's side-effect key; asks the service on recovery."""
    assert ctx.side_effect_key is not None
    return _send(ctx.side_effect_key, amount)


def charge_blind(ctx: StepContext, amount: int) -> dict[str, object]:
    """The same call without a reconcile hook (side-effecting through the LWIR only)."""
    assert ctx.side_effect_key is not None
    return _send(ctx.side_effect_key, amount)


def intent_committed(ctx: StepContext, database: str) -> bool:
    """Whether this step's intent is in the SQLite log, read over another connection."""
    import sqlite3

    with sqlite3.connect(database) as conn:
        rows = conn.execute(
            "SELECT data FROM events WHERE run_id = ? AND type = 'SideEffectIntended'",
            (ctx.run_id,),
        ).fetchall()
    return any(event_json(data)["stepPath"] == ctx.step_path for (data,) in rows)


@side_effect(reconcile=_reconcile)
def pay(ctx: object, amount: int) -> dict[str, object]:
    """Pay ``amount`` (a tool the cashier agent calls)."""
    key = getattr(ctx, "side_effect_key", None)
    assert isinstance(key, str)
    return _send(key, amount)


def _cashier(request: Any) -> Any:
    answers = sum(1 for message in request.messages if message.role == "assistant")
    if answers == 0:
        return {"tool_calls": [{"id": "c_pay", "name": "pay", "arguments": {"amount": 9}}]}
    return f"paid: {request.messages[-1].content}"


def setup() -> Any:
    """The cashier agent's scripted model and its side-effecting ``pay`` tool."""
    from little_workflow.harness import ModelSlot, tool
    from little_workflow.harness.models import scripted
    from little_workflow.runtime import RuntimeSetup

    return RuntimeSetup(
        model_slots={"cashier": ModelSlot(provider=scripted(_cashier), model="cashier")},
        tools=[tool(pay)],
    )


def _unknowable(key: str) -> Happened | None:
    raise RuntimeError(f"the payment service cannot say what happened to {key}")


@side_effect(reconcile=_unknowable)
def pay_unknowable(ctx: object, amount: int) -> dict[str, object]:
    """Pay ``amount``, with a hook that cannot tell (a tool the cashier agent calls)."""
    key = getattr(ctx, "side_effect_key", None)
    assert isinstance(key, str)
    return _send(key, amount)


def setup_unknowable() -> Any:
    """The cashier agent with a ``pay`` tool whose reconcile hook raises."""
    from little_workflow.harness import ModelSlot, tool
    from little_workflow.harness.models import scripted
    from little_workflow.runtime import RuntimeSetup

    return RuntimeSetup(
        model_slots={"cashier": ModelSlot(provider=scripted(_cashier), model="cashier")},
        tools=[tool(pay_unknowable, name="pay")],
    )
