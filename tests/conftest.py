"""Fixtures shared by the whole suite: each test gets its own storage.

PostgreSQL tests use a uniquely named schema that is dropped afterwards. With no server
answering they skip with a one-line reason, unless LITTLE_WORKFLOW_REQUIRE_POSTGRES=1
(set by .ci/run), which turns that skip into a failure.

The suite's processes start with the signal dispositions a terminal gives (see
``pytest_configure``), whatever the shell that started pytest did.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

POSTGRES_URL = os.environ.get(
    "LITTLE_WORKFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("LITTLE_WORKFLOW_REQUIRE_POSTGRES") == "1"


def pytest_configure(config: pytest.Config) -> None:
    """Undo an ignored SIGINT or SIGTERM inherited from whatever started pytest.

    A shell without job control starts a background command (``pytest &``, a CI runner's
    step) with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
    CLI process a test starts would ignore the Ctrl-C the test sends it (Python keeps
    an ignored SIGINT ignored, as a program started with ``nohup`` expects). The tests of
    what Ctrl-C does need the disposition a user's terminal gives.
    """
    del config
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


_postgres_error: str | None = None
_postgres_checked = False


def _postgres_unavailable() -> str | None:
    global _postgres_checked, _postgres_error
    if not _postgres_checked:
        _postgres_checked = True
        try:
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:
            _postgres_error = f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}".splitlines()[0]
    return _postgres_error


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A store URL on a fresh PostgreSQL schema, dropped after the test."""
    error = _postgres_unavailable()
    if error is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"{error} (LITTLE_WORKFLOW_REQUIRE_POSTGRES=1)")
        pytest.skip(error)
    import psycopg

    schema = f"lwt_{uuid.uuid4().hex[:16]}"
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}schema={schema}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A store URL on a fresh SQLite file in this test's temporary directory."""
    return f"sqlite:///{tmp_path}/little-workflow.db"


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    """A store URL on a fresh file-storage root in this test's temporary directory."""
    return f"file://{tmp_path}/kv"
