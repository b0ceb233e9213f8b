"""The retry loop every model provider shares, whatever makes its HTTP calls.

The httpx providers (``JsonPoster``) and the adapters over the official SDKs each turn
what an attempt raised into a ``ModelProviderError`` (``failure_of``); this loop decides
from it alone whether to ask again and how long to wait first: ``backoff * 2**n``
capped at ``max_backoff``, or the ``retry_after`` the server asked for (capped too).
One loop, so that "our retries" mean the same thing behind every provider.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._pause import released

__all__ = ["FailureOf", "RetryPolicy", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]

#: What an attempt's exception means: the failure and the exception to chain it to
#: (``None`` to chain none); ``None`` for an exception that is not a failure of the
#: call (a bug, a cancellation's cousin), which is raised as it is.
FailureOf = Callable[[Exception], tuple[ModelProviderError, BaseException | None] | None]

logger = logging.getLogger("little_workflow.harness.models")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How many times a failed call is asked again, and how long to wait before each."""

    #: Attempts after the first; 0 makes one attempt.
    max_retries: int
    #: The first wait, in seconds; doubled after each attempt.
    backoff: float
    #: The longest wait, in seconds, a ``Retry-After`` included.
    max_backoff: float
    #: Injectable, so tests check the waits without waiting.
    sleep: Sleep

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be zero or more, not {self.max_retries!r}")
        if not (self.backoff >= 0 and self.max_backoff >= 0):
            raise ConfigError("backoff and max_backoff must not be negative")

    def backoff_for(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0-based) when the server asked none."""
        return float(min(self.max_backoff, self.backoff * 2**retry))

    async def run(self, attempt: Callable[[], Awaitable[_T]], failure_of: FailureOf) -> _T:
        """``attempt()``'s result, called again after a wait while its failure is retryable.

        Once retries are spent, or for a failure that is not retryable, the failure is
        raised (saying how many attempts were made when more than one was).
        """
        attempts = self.max_retries + 1
        for attempt_index in range(attempts):
            try:
                return await attempt()
            except Exception as exc:
                found = failure_of(exc)
                if found is None:
                    raise
                failure, cause = found
            if not failure.retryable or attempt_index == attempts - 1:
                if attempt_index:
                    failure = ModelProviderError(
                        f"{failure.message} (gave up after {attempt_index + 1} attempts)",
                        provider=failure.provider,
                        status=failure.status,
                        retryable=failure.retryable,
                        rate_limited=failure.rate_limited,
                        retry_after=failure.retry_after,
                    )
                raise failure from cause
            if failure.retry_after is not None:
                wait = min(failure.retry_after, self.max_backoff)
            else:
                wait = self.backoff_for(attempt_index)
            logger.warning(
                "%s; retrying in %.2fs (attempt %d of %d)",
                failure.message,
                wait,
                attempt_index + 2,
                attempts,
            )
            # A limited slot's permit is given back while sleeping (``_pause.py``).
            async with released():
                await self.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")
