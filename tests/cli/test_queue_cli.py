"""``little-workflow queue``, ``model-limit``, ``submit --queue``: stored limits, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.support import cli

TICK = Path(__file__).resolve().parents[1] / "workers" / "tick.yaml"


def _queues(data: Path) -> list[dict[str, object]]:
    done = cli(data, "queue", "list", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert isinstance(found, list)
    return found


def test_queues_are_set_listed_used_and_removed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _queues(data) == [{"name": "default", "concurrency": None, "rate": None}]
    done = cli(data, "queue", "set", "models", "--concurrency", "8", "--rate", "60/m")
    assert (done.returncode, done.stdout.strip()) == (0, "queue models: concurrency 8, rate 60/m")
    assert _queues(data)[1] == {
        "name": "models",
        "concurrency": 8,
        "rate": {"count": 60, "per": 60.0},
    }
    table = cli(data, "queue", "list")
    assert "models" in table.stdout
    assert "60/m" in table.stdout
    submitted = cli(data, "submit", str(TICK), "--input", '{"n": 2}', "--queue", "models")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    assert run_id.startswith("run_")

    # A queue never set is refused, and nothing is written.
    refused = cli(data, "submit", str(TICK), "--input", '{"n": 3}', "--queue", "modles")
    assert refused.returncode == 3
    assert "unknown_queue" in refused.stderr
    assert "'modles'" in refused.stderr
    runs = cli(data, "runs", "--json")
    assert [run["runId"] for run in json.loads(runs.stdout)] == [run_id]

    bad = cli(data, "queue", "set", "models", "--rate", "60 per minute")
    assert bad.returncode == 2
    assert "COUNT/PERIOD" in bad.stderr
    bad = cli(data, "queue", "set", "models", "--concurrency", "0")
    assert bad.returncode == 2
    bad = cli(data, "queue", "set", "bad name", "--concurrency", "1")
    assert bad.returncode != 0
    assert "queue name" in bad.stderr
    assert _queues(data)[1]["concurrency"] == 8

    removed = cli(data, "queue", "remove", "models")
    assert (removed.returncode, removed.stdout.strip()) == (0, "queue models removed")
    assert [queue["name"] for queue in _queues(data)] == ["default"]


def test_model_limits_are_set_listed_and_removed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = cli(data, "model-limit", "set", "judge", "--concurrency", "2", "--rate", "30/10s")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "model slot judge: concurrency 2, rate 30/10s",
    )
    listed = cli(data, "model-limit", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"slot": "judge", "concurrency": 2, "rate": {"count": 30, "per": 10.0}}
    ]
    removed = cli(data, "model-limit", "remove", "judge")
    assert removed.stdout.strip() == "model slot judge: limits removed"
    assert json.loads(cli(data, "model-limit", "list", "--json").stdout) == []
