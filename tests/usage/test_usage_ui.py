"""The UI's JSON API carries the same usage as ``show --json`` and ``runs --json``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.support import cli
from tests.ui.support import client
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
