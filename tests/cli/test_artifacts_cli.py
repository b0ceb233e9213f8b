"""``artifacts``, ``export-artifact`` and ``memory`` through the real command line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.artifacts.flows import WORKFLOW
from tests.runtime.support import cli

SETUP = "tests.artifacts.flows:setup"


def _run(data: Path, run_id: str, topic: str, calls: Path) -> None:
    done = cli(
        data,
        "--setup",
        SETUP,
        "run",
        str(WORKFLOW),
        "--input",
        json.dumps({"topic": topic}),
        "--run-id",
        run_id,
        env={"LW_TEST_CALLS": str(calls)},
    )
    assert done.returncode == 0, done.stderr


def test_artifacts_lists_them_as_a_table_and_as_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "artifacts").stdout.strip() == "no artifacts"
    _run(data, "run_one", "kills", tmp_path / "calls")
    _run(data, "run_two", "locks", tmp_path / "calls")
    listed = cli(data, "artifacts", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(row["runId"], row["name"]) for row in rows] == [
        (run, name)
        for run in ("run_one", "run_two")
        for name in ("report.md", "note.txt", "draft.md")
    ]
    report = rows[0]
    content = b"# kills\n\nFindings.\n"
    assert (report["size"], report["sha256"]) == (len(content), hashlib.sha256(content).hexdigest())
    assert (report["mediaType"], report["stepPath"]) == ("text/markdown", "report")
    only = json.loads(cli(data, "artifacts", "run_two", "--json").stdout)
    assert only == rows[3:]
    table = cli(data, "artifacts", "run_one").stdout
    lines = table.splitlines()
    assert lines[0].split() == ["id", "name", "media", "type", "size", "run", "step", "created"]
    for row in rows[:3]:  # whole ids, to copy into export-artifact
        assert row["artifactId"] in table
    assert "text/markdown" in table
    assert f"{len(content)} B" in table
    assert "run_two" not in table
    assert cli(data, "artifacts", "run_none").stdout.strip() == "no artifacts"
    hostile = cli(data, "artifacts", "../etc")
    assert hostile.returncode == 3
    assert hostile.stderr.startswith("error: invalid_id: ")
    assert len(hostile.stderr.splitlines()) == 1


def test_export_artifact_writes_the_file_or_stdout(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "run_ex", "exports", tmp_path / "calls")
    [report] = [
        row
        for row in json.loads(cli(data, "artifacts", "--json").stdout)
        if row["name"] == "report.md"
    ]
    target = tmp_path / "out.md"
    done = cli(data, "export-artifact", report["artifactId"], str(target))
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"# exports\n\nFindings.\n"
    into = tmp_path / "dir"
    into.mkdir()
    assert cli(data, "export-artifact", report["artifactId"], str(into)).returncode == 0
    assert (into / "report.md").read_bytes() == target.read_bytes()
    refused = cli(data, "export-artifact", report["artifactId"], str(target))
    assert refused.returncode == 3
    assert "destination_exists" in refused.stderr
    assert (
        cli(data, "export-artifact", report["artifactId"], str(target), "--force").returncode == 0
    )
    piped = cli(data, "export-artifact", report["artifactId"], "-")
    assert piped.stdout == "# exports\n\nFindings.\n"
    missing = cli(data, "export-artifact", "art_nothing", str(tmp_path / "x"))
    assert missing.returncode == 3
    assert missing.stderr.startswith("error: artifact_not_found: ")
    blob = data / "artifacts" / "objects" / report["sha256"][:2] / report["sha256"]
    blob.write_bytes(b"tampered")
    corrupt = cli(data, "export-artifact", report["artifactId"], str(tmp_path / "bad.md"))
    assert corrupt.returncode == 4
    assert corrupt.stderr.startswith("error: corrupt_data: ")
    assert str(blob) in corrupt.stderr
    assert not (tmp_path / "bad.md").exists()


def test_memory_lists_namespaces_entries_and_values(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "memory").stdout.strip() == "no memory"
    _run(data, "run_mem", "recall", tmp_path / "calls")
    namespaces = json.loads(cli(data, "memory", "--json").stdout)
    assert namespaces == [{"namespace": "reports", "keys": 1}, {"namespace": "writer", "keys": 1}]
    assert cli(data, "memory").stdout.split() == [
        "namespace",
        "keys",
        "reports",
        "1",
        "writer",
        "1",
    ]
    [entry] = json.loads(cli(data, "memory", "writer", "--json").stdout)
    assert (entry["key"], entry["value"], entry["runId"], entry["stepPath"]) == (
        "draft",
        "Draft v1",
        "run_mem",
        "writer",
    )
    table = cli(data, "memory", "writer").stdout.splitlines()
    assert table[0].split() == ["key", "value", "updated", "run", "step"]
    assert table[1].split()[:2] == ["draft", '"Draft']
    value = cli(data, "memory", "writer", "draft")
    assert json.loads(value.stdout) == "Draft v1"
    assert json.loads(cli(data, "memory", "writer", "draft", "--json").stdout)["runId"] == "run_mem"
    missing = cli(data, "memory", "writer", "nothing")
    assert missing.returncode == 3
    assert missing.stderr.strip() == "error: nothing is remembered at writer/nothing"
    hostile = cli(data, "memory", "../up")
    assert hostile.returncode == 3
    assert hostile.stderr.startswith("error: invalid_id: ")
