"""The UI in a real headless Chromium, against the real server, following a live run.

Skipped when Playwright or Chromium is missing, unless LITTLE_WORKFLOW_REQUIRE_BROWSER=1
(set by .ci/run), which makes that a failure. LITTLE_WORKFLOW_UI_SCREENSHOTS=DIR saves
screenshots of the pages there, to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.support import cli, cli_popen, wait_for_file
from tests.ui.flows import HOSTILE, LIVE, SHORTLIST
from tests.ui.support import ui_server

REQUIRE = os.environ.get("LITTLE_WORKFLOW_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("LITTLE_WORKFLOW_UI_SCREENSHOTS")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Milliseconds Playwright waits for something to appear before the test fails.
WAIT = 20_000


def _chromium() -> str:
    problem = None
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        problem = f"playwright is not installed ({exc})"
    if problem is None and not Path(executable).exists():
        problem = "no chromium executable (apt-get install chromium)"
    if problem is not None:
        if REQUIRE:
            pytest.fail(f"{problem} (LITTLE_WORKFLOW_REQUIRE_BROWSER=1)")
        pytest.skip(problem)
    return executable


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """``little-workflow ui --port 0`` on a fresh data directory: (data dir, base URL)."""
    data = tmp_path / "data"
    with ui_server(data) as (process, line):
        found = re.fullmatch(r"little-workflow ui: (http://127\.0\.0\.1:\d+)/\n", line)
        assert found, f"{line!r} {process.stderr.read() if process.poll() is not None else ''}"
        yield data, found.group(1)
    assert process.returncode in (0, -15), process.returncode


@pytest.fixture
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _page(browser: Any) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(WAIT)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    return page, problems


def _shoot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"ui-{name}.png"), full_page=True)


def _step(page: Any, path: str, status: str) -> Any:
    return page.locator(f'#steps .tree-row[data-path="{path}"][data-status="{status}"]')


def test_a_run_page_follows_the_run_live(
    server: tuple[Path, str], browser: Any, tmp_path: Path
) -> None:
    data, base = server
    entered, release = tmp_path / "entered", tmp_path / "release"
    run = cli_popen(
        data,
        "run",
        str(LIVE),
        "--run-id",
        "run_live",
        env={"LW_TEST_ENTERED": str(entered), "LW_TEST_RELEASE": str(release)},
    )
    try:
        wait_for_file(entered, run)
        page, problems = _page(browser)
        page.goto(f"{base}/runs/run_live")
        # What the log holds so far: the first step done, the held one running.
        _step(page, "prepare", "completed").wait_for()
        _step(page, "hold", "running").wait_for()
        page.locator('#events li[data-type="StepAttemptStarted"]').nth(1).wait_for()
        assert page.locator("#run-status .badge").inner_text().lower() == "running"
        assert page.locator("#live").inner_text() == "Live"
        assert _step(page, "finish", "running").count() == 0
        assert page.locator('#events li[data-type="RunCompleted"]').count() == 0

        # Run data is shown as text: the markup in prepare's output runs nothing.
        _step(page, "prepare", "completed").click()
        shown = page.locator('#steps details[data-key="step:prepare"] pre.json')
        assert HOSTILE in json.loads(shown.inner_text())["note"]
        assert page.evaluate("window.__xss") is None
        assert page.locator("main script, main img").count() == 0
        _shoot(page, "live-running")

        page.evaluate("window.__samePage = true")  # gone if the page reloads
        release.write_text("go")
        _, err = run.communicate(timeout=60)
        assert run.returncode == 0, err

        # New steps and events arrive on the open page.
        _step(page, "finish", "completed").wait_for()
        _step(page, "hold", "completed").wait_for()
        page.locator('#events li[data-type="RunCompleted"]').wait_for()
        page.locator("#run-status .badge.status-completed").wait_for()
        page.locator("#live.live-off").wait_for()
        assert page.evaluate("window.__samePage") is True
        total = int(cli(data, "events", "run_live", "--json").stdout.count("\n"))
        assert page.locator("#events li").count() == total
        assert page.evaluate("window.__xss") is None
        _shoot(page, "live-finished")
        assert problems == []
    finally:
        if run.poll() is None:
            release.write_text("go")
            run.communicate(timeout=60)


def test_runs_list_and_model_calls_in_the_browser(server: tuple[Path, str], browser: Any) -> None:
    data, base = server
    done = cli(
        data,
        "--setup",
        "tests.runtime.agent_flows:setup",
        "run",
        str(SHORTLIST),
        "--input",
        json.dumps({"query": "staff"}),
        "--run-id",
        "run_short",
    )
    assert done.returncode == 0, done.stderr
    page, problems = _page(browser)
    page.goto(f"{base}/")
    row = page.locator('tr[data-run-id="run_short"]')
    row.wait_for()
    cells = [cell.strip() for cell in row.locator("td").all_inner_texts()]
    assert [cell.lower() for cell in cells[:4]] == ["run_short", "shortlist", "completed", "8"]
    assert int(cells[4]) > 0
    _shoot(page, "runs")

    row.locator("a").click()
    page.wait_for_url(f"{base}/runs/run_short")
    _step(page, "review-candidates[cand_2].worker", "completed").wait_for()
    session = page.locator('#calls .session[data-session="review-candidates[cand_1].worker"]')
    session.locator("details.call").first.locator("summary").click()
    messages = session.locator("details.call").first.locator(".msg")
    assert messages.nth(1).inner_text().split("\n") == ["USER", "Score Ada"]
    tool = session.locator("details.call").nth(1)
    tool.locator("summary").click()
    assert json.loads(tool.locator("pre.json").nth(1).inner_text()) == {"name": "Ada", "years": 7}
    _step(page, "review-candidates", "completed").click()
    _shoot(page, "run")
    assert problems == []


def test_a_run_page_shows_the_model_usage_and_each_calls_tokens(
    server: tuple[Path, str], browser: Any
) -> None:
    from tests.usage.flows import FLOWS as USAGE_FLOWS
    from tests.usage.flows import SETUP as USAGE_SETUP
    from tests.usage.flows import USAGES

    data, base = server
    done = cli(
        data, "--setup", USAGE_SETUP, "run", str(USAGE_FLOWS / "usage.yaml"), "--run-id", "run_u"
    )
    assert done.returncode == 0, done.stderr
    total = sum(u.input_tokens + u.output_tokens for u in USAGES.values())
    page, problems = _page(browser)
    page.goto(f"{base}/")
    row = page.locator('tr[data-run-id="run_u"]')
    row.wait_for()
    assert row.locator("td.tokens").inner_text().strip() == str(total)

    page.goto(f"{base}/runs/run_u")
    usage = page.locator("#usage")
    usage.locator('tr[data-name="paid"]').wait_for()
    assert usage.locator('tr[data-name="paid"] [data-tokens]').inner_text() == str(total)
    assert (
        usage.locator('tr[data-name="replayed (not paid again)"] [data-tokens]').inner_text() == "0"
    )
    slot = usage.locator('tr[data-name="other"] [data-tokens]')
    other = USAGES["second#0"] + USAGES["second#1"]
    assert slot.inner_text() == str(other.input_tokens + other.output_tokens)
    assert usage.locator('tr[data-name="first"]').count() == 1  # the per-step table
    # Each model call says its own tokens (and latency) on its line.
    calls = page.locator("#calls .call-tokens")
    assert sorted(
        int(t) for t in calls.evaluate_all("(ns) => ns.map((n) => n.dataset.tokens)")
    ) == (sorted(u.input_tokens + u.output_tokens for u in USAGES.values()))
    assert all(" ms" in text for text in calls.all_inner_texts())
    _shoot(page, "usage")
    assert problems == []


def test_a_run_page_says_interrupted_when_its_process_is_killed(
    server: tuple[Path, str], browser: Any, tmp_path: Path
) -> None:
    data, base = server
    entered = tmp_path / "entered"
    run = cli_popen(
        data,
        "run",
        str(LIVE),
        "--run-id",
        "run_cut",
        env={"LW_TEST_ENTERED": str(entered), "LW_TEST_RELEASE": str(tmp_path / "never")},
    )
    try:
        wait_for_file(entered, run)
        page, problems = _page(browser)
        page.goto(f"{base}/runs/run_cut")
        _step(page, "hold", "running").wait_for()
        page.locator("#live.live-on").wait_for()
        assert page.locator("#live").inner_text() == "Live"
        assert page.locator(".stats [data-since]").count() == 1  # the duration counts

        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)

        # The open page learns it from its stream: no reload.
        page.locator("#run-status .badge.status-interrupted").wait_for()
        page.locator("#live.live-cut").wait_for()
        assert page.locator("#live").inner_text() == "Interrupted"
        assert page.locator(".stats [data-since]").count() == 0  # the duration stopped
        assert page.locator("#steps [data-since]").count() == 0  # so did the step's
        _step(page, "hold", "interrupted").wait_for()
        notice = page.locator("#interrupted").inner_text()
        assert f"pid {run.pid}" in notice
        assert "little-workflow resume run_cut" in notice
        _shoot(page, "interrupted")

        page.goto(f"{base}/")
        row = page.locator('tr[data-run-id="run_cut"]')
        row.wait_for()
        assert row.locator("td").nth(2).inner_text().strip().lower() == "interrupted"
        assert row.locator("[data-since]").count() == 0
        assert problems == []
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate(timeout=60)


WAITS = Path(__file__).parents[1] / "waits"


def test_a_waiting_run_is_answered_through_the_form_and_goes_on(
    server: tuple[Path, str], browser: Any
) -> None:
    data, base = server
    parked = cli(
        data, "run", str(WAITS / "approve.yaml"), "--input", '{"n": 4}', "--run-id", "run_approve"
    )
    assert parked.returncode == 7, parked.stderr
    page, problems = _page(browser)
    page.goto(f"{base}/runs/run_approve")
    form = page.locator("#waiting #answer-form")
    form.wait_for()
    assert page.locator("#answer-event").input_value() == "approval"
    assert '"required"' in form.locator(".schema pre").inner_text()  # the wait's schema
    page.locator("#answer-data").fill('{"ok": "yes"}')
    page.locator("#answer-send").click()
    page.locator("#answer-result.error").wait_for()
    assert "invalid_event_payload" in page.locator("#answer-result").inner_text()
    assert "boolean" in page.locator("#answer-result").inner_text()
    _shoot(page, "answer-refused")
    page.locator("#answer-data").fill('{"ok": true}')
    page.locator("#answer-send").click()
    page.locator("#waiting #answered").wait_for()  # the event is in the run's log
    resumed = cli(data, "resume", "run_approve")  # what a worker would do
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"n": 8, "answer": {"ok": True}}
    page.locator("#run-status .badge.status-completed").wait_for()
    assert page.locator("#waiting").count() == 0
    # The refused payload wrote nothing; the accepted one is in the log once.
    events = cli(data, "events", "run_approve", "--json").stdout.splitlines()
    assert sum('"EventReceived"' in line for line in events) == 1
    # The browser logs the refused send's 400; nothing else went wrong.
    assert [problem for problem in problems if "status of 400" not in problem] == []


def test_an_agents_question_is_answered_through_the_form(
    server: tuple[Path, str], browser: Any
) -> None:
    data, base = server
    setup = ("--setup", "tests.waits.ask_flows:setup")
    flow = str(WAITS / "ask.yaml")
    parked = cli(data, *setup, "run", flow, "--input", '{"brand": "Acme"}', "--run-id", "run_ask")
    assert parked.returncode == 7, parked.stderr
    page, problems = _page(browser)
    page.goto(f"{base}/runs/run_ask")
    page.locator("#answer-question").wait_for()
    assert "Which colour should the logo be?" in page.locator("#answer-question").inner_text()
    assert page.locator("#answer-event").input_value() == "ask_user:designer"
    page.locator("#answer-data").fill("teal")
    _shoot(page, "ask-user")
    page.locator("#answer-send").click()
    page.locator("#waiting #answered").wait_for()
    resumed = cli(data, *setup, "resume", "run_ask")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["answer"] == "The logo will be teal."
    page.locator("#run-status .badge.status-completed").wait_for()
    assert problems == []


def _wait_for_run(base: str, run_id: str, process: subprocess.Popen[str]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while httpx.get(f"{base}/api/runs/{run_id}").status_code == 404:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"run {run_id} never appeared"
        time.sleep(0.02)


def test_a_run_page_shows_an_answer_as_it_streams_in(
    server: tuple[Path, str], browser: Any
) -> None:
    from little_workflow.testing.fake_models import FakeModelServer
    from tests.ui import live_flows

    data, base = server
    # Paced so that the long answer takes seconds: the page must show it partly written.
    with FakeModelServer(live_flows.script, event_delay=0.06) as model:
        run = live_flows.start_brief(data, model.url, "pages", "run_words")
        try:
            _wait_for_run(base, "run_words", run)  # the run waits for the page in its tool
            page, problems = _page(browser)
            page.goto(f"{base}/runs/run_words")
            box = page.locator('.live-answer[data-call="agent.turns[1].model"]')
            # Under its step, part of the answer while the rest is still to come.
            page.wait_for_function(
                """() => {
                    const box = document.querySelector(
                        '.live-answer[data-call="agent.turns[1].model"]');
                    const text = box && box.querySelector(".live-text");
                    return text && text.textContent.includes("line 2 of the brief")
                        && !text.textContent.includes("line 12 of the brief");
                }"""
            )
            placed = page.evaluate(
                """() => document.querySelector('#steps details[data-key="step:writer"]')
                    .nextElementSibling.dataset.call"""
            )
            assert placed == "agent.turns[1].model"
            assert box.locator(".live-reasoning").inner_text() == live_flows.THOUGHT
            assert _step(page, "writer", "running").count() == 1
            _shoot(page, "streaming")
            # Then the committed answer replaces it.
            box.wait_for(state="detached")
            session = page.locator('#calls .session[data-session="writer"]')
            answered = session.locator("details.call", has_text="line 1 of the brief")
            page.locator("#run-status .badge.status-completed").wait_for()
            answered.locator(".call-state.ok").wait_for()
            page.locator("#run-status .badge.status-completed").wait_for()
            assert page.locator(".live-answer").count() == 0
            assert problems == []
        finally:
            _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err


def test_a_long_step_tree_loads_a_page_at_a_time_as_it_is_scrolled(
    server: tuple[Path, str], browser: Any
) -> None:
    data, base = server
    wide = Path(__file__).resolve().parents[1] / "cli" / "flows" / "wide.yaml"
    items = json.dumps({"items": list(range(300)), "fail": -1})
    done = cli(data, "run", str(wide), "--input", items, "--run-id", "run_wide")
    assert done.returncode == 0, done.stderr
    page, problems = _page(browser)
    page.goto(f"{base}/runs/run_wide")
    _step(page, "fan[0].s", "completed").wait_for()
    rows = page.locator("#steps .tree-row")
    # The first page: the map, then a node per branch and one per step, 500 in all.
    assert rows.count() == 500
    assert _step(page, "fan[299].s", "completed").count() == 0
    view = page.request.get(f"{base}/api/runs/run_wide").json()
    steps = sum(view["stepCounts"].values())
    assert steps == 301  # the map and its 300 branches' steps
    more = page.locator("#steps-more")
    assert more.inner_text() == f"Show more steps (250 of {steps} shown)"
    assert (
        page.locator("#steps").locator("xpath=..").locator("..").inner_text().count(f"{steps} done")
        == 1
    )
    more.scroll_into_view_if_needed()  # in view: the next page loads by itself
    _step(page, "fan[299].s", "completed").wait_for()
    assert rows.count() == 601
    assert page.locator("#steps-more").count() == 0  # the last page: nothing more to load
    _shoot(page, "long-tree")
    assert problems == []
