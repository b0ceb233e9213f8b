"""Who may use the UI (host check, token), and what a page may run (CSP, escaping)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from little_workflow.ui._security import is_loopback
from little_workflow.ui._server import url_for
from tests.runtime.support import FLOWS, REPO, runtime
from tests.ui.support import client, ui_server

STATIC = REPO / "little_workflow" / "ui" / "static"
TOKEN = "t0ken-for-the-test"


@pytest.fixture
async def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    async with runtime(root) as rt:
        await rt.run(FLOWS / "review.yaml", {"query": "x"}, run_id="run_one")
    return root


async def test_without_a_token_only_loopback_host_names_are_answered(data: Path) -> None:
    for base in ("http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"):
        async with client(data, base_url=base) as http:
            assert (await http.get("/api/runs")).status_code == 200, base
    # DNS rebinding: a hostile name that resolves to 127.0.0.1 reaches the port, with
    # its own name in Host.
    async with client(data, base_url="http://evil.example:8765") as http:
        refused = await http.get("/api/runs")
        page = await http.get("/")
    assert refused.status_code == page.status_code == 403
    assert "run_one" not in refused.text


async def test_with_a_token_every_request_must_carry_it(data: Path) -> None:
    async with client(data, token=TOKEN, base_url="http://192.0.2.7:8765") as http:
        assert (await http.get("/api/runs")).status_code == 401
        assert (await http.get("/")).status_code == 401
        assert (await http.get("/static/app.js")).status_code == 401
        wrong = await http.get("/api/runs", headers={"authorization": "Bearer t0ken-for-the-tesT"})
        assert wrong.status_code == 401
        assert "run_one" not in wrong.text
        assert (await http.get("/api/runs", params={"token": "nope"})).status_code == 401

        bearer = await http.get("/api/runs", headers={"authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        assert bearer.json()["runs"][0]["runId"] == "run_one"
        assert (await http.get("/api/runs", params={"token": TOKEN})).status_code == 200

        # The printed URL: the token moves into a cookie and out of the address bar.
        opened = await http.get("/runs/run_one", params={"token": TOKEN, "x": "1"})
        assert opened.status_code == 303
        assert opened.headers["location"] == "/runs/run_one?x=1"
        cookie = opened.headers["set-cookie"]
        assert cookie.startswith(f"lw_ui_token={TOKEN};")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        http.cookies.clear()  # only the cookie sent below counts
        cookie_header = {"cookie": f"lw_ui_token={TOKEN}"}
        with_cookie = await http.get("/api/runs/run_one", headers=cookie_header)
        assert with_cookie.status_code == 200
        assert (await http.get("/", headers={"cookie": "lw_ui_token=stale"})).status_code == 401


async def test_every_response_forbids_foreign_scripts_and_framing(data: Path) -> None:
    async with client(data) as http:
        answers = [await http.get(path) for path in ("/", "/runs/run_one", "/api/runs")]
        refused = await http.get("/api/runs", headers={"host": "evil.example"})
    for answer in [*answers, refused]:
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
        assert "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert answers[0].headers["content-type"].startswith("text/html")
    assert answers[2].headers["content-type"] == "application/json"


def test_the_page_script_never_parses_strings_as_html() -> None:
    # Every node is built with createElement/textContent (the h() helper); these are
    # the ways run data could be turned into markup.
    script = (STATIC / "app.js").read_text()
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "srcdoc",
    ):
        assert sink not in script, sink
    html = (STATIC / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js" defer>']
    # No CDN: the UI works offline.
    assert "http://" not in html
    assert "https://" not in html


def test_loopback_addresses() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "app.localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com", "localhost.example.com", ""):
        assert not is_loopback(host), host
    assert url_for("::1", 8000, None) == "http://[::1]:8000/"
    assert url_for("0.0.0.0", 8000, "abc") == "http://0.0.0.0:8000/?token=abc"


@pytest.fixture
def server_on_all_addresses(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with ui_server(tmp_path / "data", "--host", "0.0.0.0") as started:
        yield started


def test_bound_beyond_loopback_the_server_makes_a_token_and_requires_it(
    server_on_all_addresses: tuple[subprocess.Popen[str], str],
) -> None:
    process, line = server_on_all_addresses
    found = re.fullmatch(r"little-workflow ui: http://0\.0\.0\.0:(\d+)/\?token=(\S{32,})\n", line)
    assert found, line
    port, token = found.groups()
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/api/runs").status_code == 401
        assert http.get("/api/runs", params={"token": token[:-1]}).status_code == 401
        assert http.get("/api/runs", headers={"authorization": f"Bearer {token}"}).json() == {
            "runs": [],
            "next": None,
        }
    assert process.poll() is None
