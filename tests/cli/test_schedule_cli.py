"""``little-workflow schedule``: add, list, pause, resume, remove, and refused input."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.support import cli

TICK = Path(__file__).resolve().parents[1] / "workers" / "tick.yaml"


def _listed(data: Path) -> list[dict[str, object]]:
    done = cli(data, "schedule", "list", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert isinstance(found, list)
    return found


def test_add_list_pause_resume_remove(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = cli(
        data, "schedule", "add", "hourly", "--cron", "0 * * * *", str(TICK),
        "--input", '{"n": 1}', "--tz", "Europe/Paris", "--catch-up", "skip",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == f"schedule hourly added: 0 * * * * (Europe/Paris), {TICK}"
    (only,) = _listed(data)
    assert {key: only[key] for key in ("name", "cron", "workflow", "input", "tz", "catchUp")} == {
        "name": "hourly",
        "cron": "0 * * * *",
        "workflow": str(TICK),
        "input": {"n": 1},
        "tz": "Europe/Paris",
        "catchUp": "skip",
    }
    assert only["paused"] is False
    table = cli(data, "schedule", "list")
    assert table.returncode == 0
    assert "hourly" in table.stdout
    assert "active" in table.stdout

    paused = cli(data, "schedule", "pause", "hourly")
    assert (paused.returncode, paused.stdout.strip()) == (0, "schedule hourly paused")
    assert _listed(data)[0]["paused"] is True
    resumed = cli(data, "schedule", "resume", "hourly")
    assert (resumed.returncode, resumed.stdout.strip()) == (0, "schedule hourly resumed")
    after = _listed(data)[0]
    assert after["paused"] is False
    assert isinstance(after["since"], float)
    assert isinstance(only["since"], float)
    assert after["since"] > only["since"]  # the ticks missed while paused never run

    again = cli(
        data, "schedule", "add", "hourly", "--cron", "* * * * *", str(TICK), "--input", '{"n": 2}'
    )
    assert again.returncode == 3
    assert "schedule_exists" in again.stderr
    assert "'hourly'" in again.stderr
    assert _listed(data)[0]["cron"] == "0 * * * *"

    removed = cli(data, "schedule", "remove", "hourly")
    assert (removed.returncode, removed.stdout.strip()) == (0, "schedule hourly removed")
    assert _listed(data) == []
    gone = cli(data, "schedule", "remove", "hourly")
    assert gone.returncode == 3
    assert "schedule_not_found" in gone.stderr
    assert "'hourly'" in gone.stderr


def test_bad_input_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    data = tmp_path / "data"
    refusals = [
        (["bad-cron", "--cron", "61 * * * *"], "invalid_cron", "'61 * * * *'"),
        (["short", "--cron", "* * *"], "invalid_cron", "'* * *'"),
        (["bad name", "--cron", "* * * * *"], "invalid_id", "'bad name'"),
        (["a..b", "--cron", "* * * * *"], "invalid_id", "'a..b'"),
        (["zone", "--cron", "* * * * *", "--tz", "Mars/Olympus"], "invalid_time_zone", "Mars"),
    ]
    for args, code, named in refusals:
        done = cli(data, "schedule", "add", *args, str(TICK), "--input", '{"n": 1}')
        assert done.returncode == 3, (args, done.stderr)
        assert code in done.stderr, done.stderr
        assert named in done.stderr, done.stderr
    missing = cli(data, "schedule", "add", "nofile", "--cron", "* * * * *", "nowhere.yaml")
    assert missing.returncode == 2  # a usage error: no such file, not module:function
    # An input no run could start with (tick.yaml reads input.n), refused now rather than
    # by a worker at every tick.
    unfit = cli(data, "schedule", "add", "unfit", "--cron", "* * * * *", str(TICK))
    assert unfit.returncode == 3, unfit.stderr
    assert "run_input_invalid" in unfit.stderr
    assert "input.n: missing (no input was given)" in unfit.stderr
    assert _listed(data) == []
