"""Token totals per run, step and slot, from the log: equal to the calls' scripted usage.

Runs go through the CLI (``run``, then ``show --json`` and ``runs --json`` in other
processes) and through a runtime whose slots are local fake servers speaking the OpenAI
and Anthropic wire formats, so the usage is what a provider reported on the wire.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import ConfigError
from little_workflow.events import HarnessModelResponded
from little_workflow.harness import ModelSlot
from little_workflow.harness.models import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    Usage,
    scripted,
)
from little_workflow.runtime import Runtime
from little_workflow.testing.fake_models import FakeModelServer
from little_workflow.views import (
    ModelPrice,
    RunReader,
    UsageFold,
    UsageTotals,
    parse_prices,
    read_usage,
    usage_report,
)
from tests.runtime.support import cli
from tests.usage.flows import FLOWS, SETUP, USAGES, respond, stamp


def tokens(usage: Usage, calls: int = 1) -> dict[str, Any]:
    """A ``UsageTotals`` as ``show --json`` prints it, without a price table."""
    return {
        "calls": calls,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cachedInputTokens": usage.cached_input_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
        "reasoningTokens": usage.reasoning_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
        "cost": None if calls else 0.0,
        "unpricedCalls": calls,
    }


ZERO = tokens(Usage(), calls=0)
FIRST, SECOND = USAGES["first#0"], USAGES["second#0"] + USAGES["second#1"]
ALL = FIRST + SECOND


def run(data: Path, flow: str, run_id: str, *args: str) -> None:
    done = cli(data, "--setup", SETUP, "run", str(FLOWS / flow), "--run-id", run_id, *args)
    assert done.returncode == 0, done.stderr


def show(data: Path, run_id: str, *args: str) -> dict[str, Any]:
    shown = cli(data, "show", run_id, "--json", *args)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_show_json_totals_are_the_sum_of_the_calls_usage(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    usage = show(tmp_path, "run_u")["usage"]
    assert usage["paid"] == tokens(ALL, calls=3)
    assert usage["totalPaid"] == usage["paid"]
    assert usage["replayed"] == usage["totalReplayed"] == usage["copied"] == ZERO
    assert (usage["interrupted"], usage["open"]) == (0, 0)
    assert usage["bySlot"] == {"tally": tokens(FIRST), "other": tokens(SECOND, calls=2)}
    assert usage["byModel"] == {
        "tally-model": tokens(FIRST),
        "other-model": tokens(SECOND, calls=2),
    }
    assert usage["byStep"] == {"first": tokens(FIRST), "second": tokens(SECOND, calls=2)}
    # Each call with its own usage, in the order they were made, all in pass 1.
    assert [call["usage"] for call in usage["calls"]] == [
        tokens(USAGES[key]) for key in ("first#0", "second#0", "second#1")
    ]
    assert [(c["stepPath"], c["slot"], c["model"]) for c in usage["calls"]] == [
        ("first", "tally", "tally-model"),
        ("second", "other", "other-model"),
        ("second", "other", "other-model"),
    ]
    assert {(c["calledIn"], c["respondedIn"], c["status"]) for c in usage["calls"]} == {
        (1, 1, "responded")
    }
    assert all(call["latency"] >= 0 for call in usage["calls"])
    [only] = usage["passes"]
    assert (only["number"], only["reason"], only["paid"], only["replayed"]) == (
        1,
        "start",
        tokens(ALL, calls=3),
        ZERO,
    )
    # The person's view says the same numbers.
    text = cli(tmp_path, "show", "run_u")
    assert text.returncode == 0, text.stderr
    assert "paid      3 calls  in 600 (cached 40, cache write 50)  out 60 (reasoning 12)" in (
        text.stdout
    )
    assert "other (other-model)  2 calls  in 500 (cache write 50)" in text.stdout


def test_a_run_without_model_calls_has_zeros(tmp_path: Path) -> None:
    run(tmp_path, "quiet.yaml", "run_q", "--input", '"hi"')
    usage = show(tmp_path, "run_q")["usage"]
    assert usage["paid"] == usage["replayed"] == usage["totalPaid"] == ZERO
    assert (usage["bySlot"], usage["byStep"], usage["calls"], usage["subRuns"]) == ({}, {}, [], [])
    assert "usage: no model calls" in cli(tmp_path, "show", "run_q").stdout


def test_runs_json_has_each_runs_totals(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    run(tmp_path, "quiet.yaml", "run_q", "--input", '"hi"')
    listed = cli(tmp_path, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    by_id = {row["runId"]: row["usage"] for row in json.loads(listed.stdout)}
    assert by_id == {
        "run_u": {"paid": tokens(ALL, calls=3), "replayed": ZERO, "interrupted": 0},
        "run_q": {"paid": ZERO, "replayed": ZERO, "interrupted": 0},
    }
    table = cli(tmp_path, "runs").stdout
    assert "tokens" in table.splitlines()[0]
    assert f" {ALL.input_tokens + ALL.output_tokens} " in table


def test_sub_runs_are_summed_apart_and_in_total(tmp_path: Path) -> None:
    run(tmp_path, "parent.yaml", "run_p")
    usage = show(tmp_path, "run_p")["usage"]
    assert usage["paid"] == tokens(FIRST)
    [child] = usage["subRuns"]
    assert child["paid"] == tokens(ALL, calls=3)
    assert child["byStep"] == {"first": tokens(FIRST), "second": tokens(SECOND, calls=2)}
    assert usage["totalPaid"] == tokens(FIRST + ALL, calls=4)
    # In the runs list the sub-run is a row of its own, with its own totals.
    listed = json.loads(cli(tmp_path, "runs", "--json", "--sub-runs").stdout)
    by_id = {row["runId"]: row["usage"]["paid"] for row in listed}
    assert by_id == {"run_p": tokens(FIRST), child["runId"]: tokens(ALL, calls=3)}


def test_cost_only_for_priced_models_and_unknown_for_the_rest(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models."tally-model"]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n',
        encoding="utf-8",
    )
    usage = show(tmp_path, "run_u", "--prices", str(prices))["usage"]
    # first#0: 60 plain input at 2.0, 40 cached at 0.5, 10 output at 8.0, per million.
    first_cost = (60 * 2.0 + 40 * 0.5 + 10 * 8.0) / 1e6
    assert usage["bySlot"]["tally"]["cost"] == pytest.approx(first_cost)
    assert usage["bySlot"]["tally"]["unpricedCalls"] == 0
    assert usage["bySlot"]["other"]["cost"] is None
    assert usage["bySlot"]["other"]["unpricedCalls"] == 2
    # A total with an unpriced call in it is unknown, never a partial sum passed as whole.
    assert (usage["paid"]["cost"], usage["paid"]["unpricedCalls"]) == (None, 2)
    assert (
        "cost unknown (2 calls of unpriced models)"
        in cli(tmp_path, "show", "run_u", "--prices", str(prices)).stdout
    )

    both = tmp_path / "both.json"
    both.write_text(
        json.dumps(
            {
                "models": {
                    "tally-model": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
                    "other-model": {"input": 1.0, "cache_write": 1.25, "output": 4.0},
                }
            }
        ),
        encoding="utf-8",
    )
    usage = show(tmp_path, "run_u", "--prices", str(both))["usage"]
    # second#0: 150 plain, 50 written at 1.25, 20 out; second#1: 300 plain, 30 out.
    other_cost = (150 * 1.0 + 50 * 1.25 + 20 * 4.0 + 300 * 1.0 + 30 * 4.0) / 1e6
    assert usage["bySlot"]["other"]["cost"] == pytest.approx(other_cost)
    assert usage["paid"]["cost"] == pytest.approx(first_cost + other_cost)


def test_a_bad_price_table_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'m' has no 'output' price"):
        parse_prices({"models": {"m": {"input": 1}}})
    with pytest.raises(ConfigError, match="unknown price fields"):
        parse_prices({"models": {"m": {"input": 1, "output": 2, "cached": 1}}})
    with pytest.raises(ConfigError, match="must be a price >= 0"):
        parse_prices({"models": {"m": {"input": -1, "output": 2}}})
    run(tmp_path, "usage.yaml", "run_u")
    bad = tmp_path / "bad.toml"
    bad.write_text("models = 3\n", encoding="utf-8")
    shown = cli(tmp_path, "show", "run_u", "--prices", str(bad))
    assert shown.returncode != 0
    assert "'models' table" in shown.stderr


def test_model_price_charges_cache_reads_and_writes_at_their_own_prices() -> None:
    price = ModelPrice(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    usage = Usage(
        input_tokens=1000, output_tokens=100, cached_input_tokens=600, cache_write_tokens=300
    )
    assert price.cost(usage) == pytest.approx((100 * 3.0 + 600 * 0.3 + 300 * 3.75 + 1500) / 1e6)
    # Unset cache prices are the plain input price.
    assert ModelPrice(input=3.0, output=15.0).cost(usage) == pytest.approx(
        (1000 * 3.0 + 1500) / 1e6
    )
    assert (UsageTotals.of(usage, None) + UsageTotals()).cost is None


def _openai(server: FakeModelServer) -> OpenAICompatibleProvider | AnthropicProvider:
    return OpenAICompatibleProvider(server.openai_base_url, api_key_env=None, max_retries=0)


def _anthropic(server: FakeModelServer) -> OpenAICompatibleProvider | AnthropicProvider:
    return AnthropicProvider(server.url, api_key_env=None, max_retries=0)


@pytest.mark.parametrize("make", [_openai, _anthropic], ids=["openai", "anthropic"])
async def test_usage_reported_on_the_wire_is_what_the_report_adds_up(
    tmp_path: Path, make: Any
) -> None:
    with FakeModelServer(respond) as server:
        provider = make(server)
        slots = {
            "tally": ModelSlot(provider=provider, model="tally-model"),
            "other": ModelSlot(provider=provider, model="other-model"),
        }
        try:
            async with Runtime(tmp_path, model_slots=slots, tools=[stamp]) as runtime:
                await runtime.run(FLOWS / "usage.yaml", None, run_id="run_wire")
                report = await read_usage(
                    runtime.events,
                    "run_wire",
                    prices={"tally-model": ModelPrice(input=1.0, output=2.0)},
                )
        finally:
            await provider.aclose()
    # The servers saw the three calls, each once.
    assert len(server.requests) == 3
    # One call priced, two not: the tokens are all there, the total's cost is unknown.
    assert report.paid == replace(
        UsageTotals.of(FIRST, None)
        + UsageTotals.of(USAGES["second#0"], None)
        + UsageTotals.of(USAGES["second#1"], None),
        unpriced_calls=2,
    )
    assert [call.usage for call in report.calls] == [
        USAGES["first#0"],
        USAGES["second#0"],
        USAGES["second#1"],
    ]
    assert report.by_slot["tally"].cost == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
    assert report.by_slot["other"].cost is None
    assert report.replayed == UsageTotals()


def test_a_fork_does_not_pay_for_what_it_copied(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    forked = cli(tmp_path, "--setup", SETUP, "fork", "run_u", "--at", "second")
    assert forked.returncode == 0, forked.stderr
    found = re.search(r"into run '([^']+)'", forked.stderr)
    assert found, forked.stderr
    usage = show(tmp_path, found.group(1))["usage"]
    # The first step's answer was paid by run_u; the fork paid for the second step only.
    assert usage["copied"] == tokens(FIRST)
    assert usage["paid"] == tokens(SECOND, calls=2)
    assert usage["byStep"] == {"second": tokens(SECOND, calls=2)}
    assert usage["replayed"] == tokens(FIRST)
    [only] = usage["passes"]
    assert (only["paid"], only["replayed"]) == (tokens(SECOND, calls=2), tokens(FIRST))
    assert show(tmp_path, "run_u")["usage"]["paid"] == tokens(ALL, calls=3)


async def test_the_fold_kept_open_gives_the_report_of_the_whole_log(tmp_path: Path) -> None:
    slots = {
        name: ModelSlot(provider=scripted(respond), model=f"{name}-model")
        for name in ("tally", "other")
    }
    async with Runtime(tmp_path, model_slots=slots, tools=[stamp]) as runtime:
        await runtime.run(FLOWS / "usage.yaml", None, run_id="run_f")
        records = await runtime.events.read("run_f")
        whole = usage_report(records)
        assert whole == await read_usage(runtime.events, "run_f")
    assert (whole.paid.calls, whole.paid.total_tokens) == (3, 660)
    for cut in range(len(records) + 1):
        fold = UsageFold("run_f")
        for record in records[:cut]:
            fold.add(record)
        fold.report()  # a report half-way changes nothing of the fold
        for record in records[cut:]:
            fold.add(record)
        assert fold.report() == whole


async def test_totals_of_responses_stored_by_reference_read_no_blob(tmp_path: Path) -> None:
    slots = {
        name: ModelSlot(provider=scripted(respond), model=f"{name}-model")
        for name in ("tally", "other")
    }
    # Every payload a blob: each response is a reference, its model and usage kept beside.
    async with Runtime(
        tmp_path, model_slots=slots, tools=[stamp], inline_payload_bytes=0
    ) as runtime:
        await runtime.run(FLOWS / "usage.yaml", None, run_id="run_r")
        whole = usage_report(await runtime.events.read("run_r"))
        stored = [
            record.event
            for record in await runtime.events.read_stored("run_r")
            if isinstance(record.event, HarnessModelResponded)
        ]
        assert len(stored) == 3
        for event in stored:
            assert isinstance(event.response, dict)
            assert set(event.response) == {"$blob", "size"}
            assert event.summary is not None
            assert set(event.summary) == {"model", "usage"}
        for info in await runtime.blobs.list():
            await runtime.blobs.delete(info.digest)
        # The runs list's fold: no blob left to read, the same totals.
        assert await RunReader(runtime.events).usage("run_r") == whole
    assert (whole.paid.calls, whole.paid.total_tokens) == (3, 660)
