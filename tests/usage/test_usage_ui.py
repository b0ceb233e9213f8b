"""The UI's JSON API carries the same usage as ``show --json`` and ``runs --json``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.runtime.support import cli
from tests.ui.support import client, ui_server
from tests.usage.test_usage import ALL, ZERO, run, tokens


async def test_the_ui_api_has_the_usage_that_show_json_has(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    shown = json.loads(cli(tmp_path, "show", "run_u", "--json").stdout)["usage"]
    async with client(tmp_path) as http:
        page = (await http.get("/api/runs/run_u")).json()
        listed = (await http.get("/api/runs")).json()["runs"]
    assert page["usage"] == shown
    assert page["usage"]["paid"] == tokens(ALL, calls=3)
    assert page["run"]["usage"]["paid"] == tokens(ALL, calls=3)
    [row] = listed
    assert row["usage"] == {"paid": tokens(ALL, calls=3), "replayed": ZERO, "interrupted": 0}


def test_ui_and_runs_json_cost_usage_with_the_price_table_show_uses(tmp_path: Path) -> None:
    run(tmp_path, "usage.yaml", "run_u")
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models."tally-model"]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n'
        '[models."other-model"]\ninput = 1.0\ncache_write = 1.25\noutput = 4.0\n',
        encoding="utf-8",
    )
    shown = json.loads(cli(tmp_path, "show", "run_u", "--json", "--prices", str(prices)).stdout)
    cost = shown["usage"]["paid"]["cost"]
    assert isinstance(cost, float)
    assert cost > 0
    [listed] = json.loads(cli(tmp_path, "runs", "--json", "--prices", str(prices)).stdout)
    assert listed["usage"]["paid"] == shown["usage"]["paid"]
    # Without the table the same totals have no cost.
    [unpriced] = json.loads(cli(tmp_path, "runs", "--json").stdout)
    assert unpriced["usage"]["paid"]["cost"] is None

    with ui_server(tmp_path, "--prices", str(prices)) as (_process, line):
        base = line.split()[-1].rstrip("/")
        page = httpx.get(f"{base}/api/runs/run_u", timeout=30).json()
        [row] = httpx.get(f"{base}/api/runs", timeout=30).json()["runs"]
    assert page["usage"] == shown["usage"]
    assert row["usage"]["paid"]["cost"] == cost


def test_ui_refuses_a_bad_price_table_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("models = 3\n", encoding="utf-8")
    refused = cli(tmp_path, "ui", "--port", "0", "--prices", str(bad))
    assert refused.returncode != 0
    assert "'models' table" in refused.stderr
    assert "http" not in refused.stdout
