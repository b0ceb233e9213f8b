"""``little-workflow db status`` / ``db upgrade`` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from little_workflow.storage import parse_store_url
from little_workflow.storage._postgres_db import MIGRATIONS, MIGRATIONS_TABLE


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sqlite_status_then_upgrade_then_nothing_to_do(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    status = _cli("--data-dir", data, "db", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["version"] == 0
    assert not (tmp_path / "data").exists()  # status creates nothing
    upgraded = _cli("--data-dir", data, "db", "upgrade", "--json")
    assert upgraded.returncode == 0, upgraded.stderr
    report = json.loads(upgraded.stdout)
    assert report["before"]["version"] == 0
    assert report["after"]["version"] == report["after"]["latest"] >= 1
    again = _cli("--data-dir", data, "db", "upgrade")
    assert again.returncode == 0
    assert "nothing to do" in again.stdout


@pytest.mark.postgres
def test_postgres_schema_behind_is_reported_then_upgraded(postgres_url: str) -> None:
    spec = parse_store_url(postgres_url)
    assert spec.conninfo is not None
    schema = sql.Identifier(spec.schema)
    # A schema as an older little-workflow left it: every migration but the last.
    with psycopg.connect(spec.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        conn.execute(sql.SQL("SET search_path TO {}").format(schema))
        conn.execute(
            sql.SQL("CREATE TABLE {} (version integer PRIMARY KEY, applied_at timestamptz)").format(
                sql.Identifier(MIGRATIONS_TABLE)
            )
        )
        for version, script in enumerate(MIGRATIONS[:-1], start=1):
            conn.execute(script)
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, now())").format(
                    sql.Identifier(MIGRATIONS_TABLE)
                ),
                [version],
            )
    latest = len(MIGRATIONS)
    status = _cli("--store", postgres_url, "db", "status")
    assert status.returncode == 0, status.stderr
    assert f"schema version {latest - 1} of {latest}, behind" in status.stdout
    assert "password" not in status.stdout
    upgraded = _cli("--store", postgres_url, "db", "upgrade", "--json")
    assert upgraded.returncode == 0, upgraded.stderr
    report = json.loads(upgraded.stdout)
    assert (report["before"]["version"], report["after"]["version"]) == (latest - 1, latest)
    with psycopg.connect(spec.conninfo, autocommit=True) as conn:
        versions = conn.execute(
            sql.SQL("SELECT version FROM {}.{} ORDER BY version").format(
                schema, sql.Identifier(MIGRATIONS_TABLE)
            )
        ).fetchall()
    assert [row[0] for row in versions] == list(range(1, latest + 1))


def test_a_store_that_cannot_be_reached_is_a_storage_error(tmp_path: Path) -> None:
    result = _cli(
        "--store", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "db", "status"
    )
    assert result.returncode == 4, result.stderr
    assert "storage_unavailable" in result.stderr
