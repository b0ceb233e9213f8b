"""Step functions for the worker tests: each call is counted outside the process.

``LW_TEST_CALLS`` names a file; every call appends ``<run id>/<step path>`` to it in one
``write`` of an ``O_APPEND`` file, so concurrent processes never interleave lines, and a
test reads afterwards how many times each step ran, whichever worker ran it.
"""

from __future__ import annotations

import asyncio
import os
import time

from little_workflow.runtime import Happened, StepContext, side_effect


def _count(ctx: StepContext) -> None:
    path = os.environ.get("LW_TEST_CALLS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{ctx.run_id}/{ctx.step_path}\n".encode())
        finally:
            os.close(fd)


async def square(ctx: StepContext, index: int) -> int:
    """index², after a pause long enough that runs overlap a kill or a stop."""
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0.05")))
    _count(ctx)
    return index * index


def total(ctx: StepContext, values: list[int]) -> int:
    """The sum of the map's outputs."""
    _count(ctx)
    return sum(values)


def _far_end() -> str:
    """The far end: a directory holding one file per payment, named by its key."""
    path = os.environ["LW_TEST_FAR_END"]
    os.makedirs(path, exist_ok=True)
    return path


def _effect_path(key: str) -> str:
    return os.path.join(_far_end(), key.replace("/", "~"))


def _settled(key: str) -> int | None:
    try:
        with open(_effect_path(key), encoding="utf-8") as handle:
            return int(handle.read())
    except FileNotFoundError:
        return None


def _reconcile(key: str) -> Happened | None:
    amount = _settled(key)
    return None if amount is None else Happened({"key": key, "amount": amount})


@side_effect(reconcile=_reconcile)
def settle(ctx: StepContext, amount: int) -> dict[str, object]:
    """Pay ``amount`` at the far end, which keeps one payment per key (as a payment API
    with idempotency keys does): a repeated request is logged and changes nothing."""
    key = ctx.side_effect_key
    assert key is not None
    log = os.open(
        os.path.join(_far_end(), "requests.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
    )
    try:
        os.write(log, f"{key}\n".encode())
    finally:
        os.close(log)
    try:
        fd = os.open(_effect_path(key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return {"key": key, "amount": _settled(key)}
    try:
        os.write(fd, str(amount).encode())
    finally:
        os.close(fd)
    return {"key": key, "amount": amount}


async def where(ctx: StepContext, index: int) -> int:
    """index², noting which process ran it (``LW_TEST_PIDS``: ``<run id> <pid>`` lines)."""
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0.05")))
    _count(ctx)
    path = os.environ.get("LW_TEST_PIDS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{ctx.run_id} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
    return index * index


def block(ctx: StepContext, seconds: float) -> str:
    """A blocking (sync) call of ``seconds``, as an SDK call to a model is; counted first."""
    _count(ctx)
    time.sleep(seconds)
    return ctx.step_path


def _mark(what: str, ctx: StepContext) -> None:
    fd = os.open(os.environ["LW_TEST_WINDOWS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{what} {ctx.run_id} {time.time():.6f} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


async def held(ctx: StepContext, index: int) -> int:
    """index, after a pause; writes ``start`` and ``end`` lines to ``LW_TEST_WINDOWS``
    (one ``O_APPEND`` write each: the file's line order is the order they happened in,
    across processes), so a test counts how many runs were inside this step at once."""
    _mark("start", ctx)
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0.2")))
    _mark("end", ctx)
    return index
