"""The switch every example shares: which model provider serves its model slots.

By default each slot is a ``scripted`` model answering from the example's own script
(``scripted.py`` in its folder), after a delay that stands for a real model's latency, so
a run lasts long enough to interrupt and resume. Environment variables switch every slot
of a setup to a real provider:

======================  ==================================================================
``EXAMPLE_PROVIDER``    ``scripted`` (the default), ``openai`` (OpenAI, or any server
                        speaking its Chat Completions API: vLLM, Ollama, llama.cpp) or
                        ``anthropic``
``EXAMPLE_MODEL``       the model every slot asks for (default ``gpt-4o-mini`` for
                        ``openai``, ``claude-haiku-4-5`` for ``anthropic``)
``OPENAI_API_KEY``      the key, as the vendors' own clients read it; unset, no key is
``ANTHROPIC_API_KEY``   sent (what a local server wants)
``OPENAI_BASE_URL``     the server, as the vendors' own clients read it (default: the
``ANTHROPIC_BASE_URL``  vendor's API)
``EXAMPLE_DELAY``       seconds each scripted model call takes (default 0.5; 0: instant)
``EXAMPLE_CALL_LOG``    a file that gets one line per model call, tool call and step
                        function, written before the call: what ran, counted outside
                        the process (how the tests check that a resume pays nothing twice)
======================  ==================================================================

Variables rather than a command-line flag because ``--setup`` names a function and
passes it nothing; the setup function is where the command line hands over to user
code, so it is where they are read. A resume must see the same provider and model: a
run whose unfinished agent session started on one model refuses to go on with another
(``CapabilityDriftError``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from little_workflow import ConfigError, ModelSlot
from little_workflow.harness.models import (
    AnthropicProvider,
    ModelProvider,
    ModelRequest,
    OpenAICompatibleProvider,
    ScriptReply,
    first_user_message,
    scripted,
    system_prompt,
    tool_results,
    turns,
)

__all__ = [
    "Answer",
    "by_instructions",
    "first_user_message",
    "model_slots",
    "record",
    "request_key",
    "system_prompt",
    "tool_results",
    "turns",
]

#: A stand-in model: the answer to a request, as a function of the request alone, so
#: a call re-issued after a crash gets the answer the first process got.
Answer = Callable[[ModelRequest], ScriptReply]

_DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}


def model_slots(
    names: Iterable[str], answer: Answer, environ: Mapping[str, str] | None = None
) -> dict[str, ModelSlot]:
    """One ``ModelSlot`` per name, all served by the provider the environment picks."""
    env = os.environ if environ is None else environ
    kind = env.get("EXAMPLE_PROVIDER", "scripted").strip() or "scripted"
    provider: ModelProvider
    if kind == "scripted":
        provider = _scripted(answer, delay=_delay(env.get("EXAMPLE_DELAY", "0.5")), environ=env)
        model = "scripted"
    elif kind == "openai":
        provider = OpenAICompatibleProvider(
            env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1", environ=env
        )
        model = env.get("EXAMPLE_MODEL") or _DEFAULT_MODELS[kind]
    elif kind == "anthropic":
        provider = AnthropicProvider(
            env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com", environ=env
        )
        model = env.get("EXAMPLE_MODEL") or _DEFAULT_MODELS[kind]
    else:
        raise ConfigError(
            f"EXAMPLE_PROVIDER={kind!r} is not a provider: use scripted, openai or anthropic"
        )
    return {name: ModelSlot(provider=provider, model=model) for name in names}


def _delay(text: str) -> float:
    try:
        delay = float(text)
    except ValueError:
        delay = -1.0
    if not delay >= 0:  # also refuses nan
        raise ConfigError(f"EXAMPLE_DELAY={text!r} is not a number of seconds (0 or more)")
    return delay


def _scripted(answer: Answer, *, delay: float, environ: Mapping[str, str]) -> ModelProvider:
    log = environ.get("EXAMPLE_CALL_LOG")

    async def respond(request: ModelRequest) -> ScriptReply:
        record("model", request_key(request), log=log)
        if delay > 0:
            await asyncio.sleep(delay)
        return answer(request)

    return scripted(respond)


def record(kind: str, key: str, *, log: str | None = None) -> None:
    """Append ``kind key`` to ``EXAMPLE_CALL_LOG`` (or ``log``), if one is named.

    Flushed and fsynced before the call it stands for goes on: a process killed a moment
    later has still logged the call it was making.
    """
    path = log if log is not None else os.environ.get("EXAMPLE_CALL_LOG")
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(f"{kind} {key}\n")
        handle.flush()
        os.fsync(handle.fileno())


def request_key(request: ModelRequest) -> str:
    """A digest of the whole request: the same for a call re-issued after a crash."""
    text = json.dumps(request.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def by_instructions(roles: Mapping[str, Answer]) -> Answer:
    """One stand-in model for several roles, told apart by how their instructions begin.

    One function rather than one per slot, so that a single fake server can stand in for
    every slot at once, as one real provider does.
    """

    def answer(request: ModelRequest) -> ScriptReply:
        system = system_prompt(request)
        for opening, role in roles.items():
            if system.startswith(opening):
                return role(request)
        raise ValueError(f"no scripted answer for the instructions {system[:60]!r}")

    return answer
