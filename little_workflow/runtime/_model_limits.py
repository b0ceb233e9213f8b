"""Model-slot limits: each call through a limited slot holds a permit from the store.

``Runtime.set_model_limit("judge", concurrency=2, rate=Rate(30, per=60))`` stores the
limit (``storage/_limits.py``); every process driving runs on the store then takes a
permit of slot ``judge`` before each call through it and gives it back after, so at most
2 calls are in flight and at most 30 start per minute, across all of them. The runtime
hands the harness its slots wrapped in ``LimitedProvider`` (``limited_slots``); a slot
with no stored limit costs one look at the limits per call, and nothing else.

Waiting for a permit is not an attempt: a call waits (polling the store, at most every
``_MAX_POLL`` seconds, or when the rate window says a place frees) for as long as it
takes, and its provider's retries start only once it holds one. A provider sleeping
before a retry gives the permit back for the sleep (``harness/models/_pause.py``) and
takes one again for the next attempt, which counts against the rate like any call. A
held permit is renewed every third of its lease while the call lasts; one whose process
dies is free when its lease ends (on SQLite at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Final, Protocol

from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models import (
    DeltaSink,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    call_model,
)
from little_workflow.harness.models._pause import PAUSE
from little_workflow.storage import Permit
from little_workflow.storage._limits import LimitKind

__all__ = ["LimitedProvider", "PermitSource", "limited_slots"]

#: How long a permit lasts unrenewed: a call stuck in a process that stopped renewing
#: (paused, cut off) frees its place after this.
PERMIT_LEASE: Final = 30.0
_MAX_POLL: Final = 0.5


class PermitSource(Protocol):
    """Where permits come from: the store's run queue (``RunQueue``)."""

    async def acquire_permit(
        self, kind: LimitKind, name: str, *, lease_seconds: float
    ) -> Permit | float | None: ...

    async def renew_permits(self, permits: list[Permit], *, lease_seconds: float) -> set[str]: ...

    async def release_permit(self, permit: Permit) -> bool: ...


class LimitedProvider:
    """``provider``, whose each call first takes a permit of model slot ``slot``."""

    def __init__(self, provider: ModelProvider, slot: str, source: PermitSource) -> None:
        self.provider = provider
        self.slot = slot
        self.source = source
        self.kind = provider.kind

    async def _take(self) -> Permit | None:
        """A permit (``None``: the slot has no limit), waiting as long as it takes."""
        while True:
            got = await self.source.acquire_permit("model", self.slot, lease_seconds=PERMIT_LEASE)
            if got is None or isinstance(got, Permit):
                return got
            # Spread the askers out a little, so that a freed place is not raced by all.
            await asyncio.sleep(min(got, _MAX_POLL) * random.uniform(1.0, 1.5))  # noqa: S311

    @contextlib.asynccontextmanager
    async def _holding(self) -> AsyncIterator[None]:
        held: list[Permit | None] = [await self._take()]

        async def renew() -> None:
            while True:
                await asyncio.sleep(PERMIT_LEASE / 3)
                permit = held[0]
                if permit is not None:
                    with contextlib.suppress(Exception):
                        await self.source.renew_permits([permit], lease_seconds=PERMIT_LEASE)

        @contextlib.asynccontextmanager
        async def pause() -> AsyncIterator[None]:
            permit, held[0] = held[0], None
            if permit is not None:
                await self.source.release_permit(permit)
            yield
            # Not reached when the sleep is cancelled: nothing is taken then.
            held[0] = await self._take()

        renewer = asyncio.create_task(renew(), name=f"renew model permit {self.slot}")
        token = PAUSE.set(pause)
        try:
            yield
        finally:
            PAUSE.reset(token)
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            permit = held[0]
            if permit is not None:
                # Shielded: a cancelled call still gives its place back at once.
                await asyncio.shield(self.source.release_permit(permit))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The inner provider's answer, made while holding a permit of the slot."""
        async with self._holding():
            return await self.provider.complete(request)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """The inner provider's streamed answer, made while holding a permit of the slot.

        An inner provider that cannot stream answers through ``complete``: ``call_model``
        through a limited slot streams exactly when the slot's own provider would.
        """
        async with self._holding():
            return await call_model(self.provider, request, on_delta)

    async def aclose(self) -> None:
        """Nothing: the inner provider is the runtime's, closed by its owner."""


def limited_slots(
    slots: Mapping[str, ModelSlot], source: PermitSource | None
) -> Mapping[str, ModelSlot]:
    """``slots`` with each provider taking permits from ``source`` (unchanged if none)."""
    if source is None:
        return slots
    return {
        name: replace(slot, provider=LimitedProvider(slot.provider, name, source))
        for name, slot in slots.items()
    }
