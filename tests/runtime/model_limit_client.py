"""A process making model calls through slot ``judge`` (``test_model_limits.py``).

``python -m tests.runtime.model_limit_client BASE_URL STORE DATA_DIR PREFIX RUNS``
starts RUNS runs of ``ask_judge.yaml`` at once, each one model call to the fake server
at BASE_URL, and prints the outputs as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from little_workflow.harness import ModelSlot
from little_workflow.harness.models import OpenAICompatibleProvider
from little_workflow.runtime import Runtime

FLOW = Path(__file__).with_name("agent_flows") / "ask_judge.yaml"


async def main(base_url: str, store: str, data_dir: str, prefix: str, runs: int) -> None:
    provider = OpenAICompatibleProvider(base_url, api_key_env=None, backoff=0.05)
    slot = ModelSlot(provider=provider, model="judge-model")
    async with Runtime(Path(data_dir), store=store, model_slots={"judge": slot}) as runtime:
        results = await asyncio.gather(
            *(runtime.run(FLOW, {"n": index}, run_id=f"{prefix}_{index}") for index in range(runs))
        )
    await provider.aclose()
    print(json.dumps([result.output for result in results]))


if __name__ == "__main__":
    url, store_url, data, run_prefix, count = sys.argv[1:]
    asyncio.run(main(url, store_url, data, run_prefix, int(count)))
