"""Mistakes caught before a run exists (issue 21): ``run``, ``submit`` and ``loop`` refuse an
input that does not fit the workflow (exit 3, the field and the file named, no run
stored); ``validate`` checks a workflow as a run would and writes nothing; ``schema``
prints the LWIR JSON Schema; a missing model slot says how to configure one."""

from __future__ import annotations

import json
from pathlib import Path

from little_workflow.lwir._schema import lwir_json_schema_text
from tests.cli.test_stdout_and_input import FLOWS, _runs, lw
from tests.runtime.support import REPO

GREET = str(FLOWS / "greet.yaml")
CHATTY = str(FLOWS / "chatty.yaml")
ASK = str(FLOWS / "ask.yaml")
SETUP = "tests.cli.flows.funcs:research_setup"


def test_run_without_the_input_a_template_reads_is_refused_before_the_run(
    tmp_path: Path,
) -> None:
    ran = lw(tmp_path, "run", CHATTY)
    assert ran.returncode == 3, ran.stderr
    assert ran.stderr.strip() == (
        f"error: run_input_invalid: the input does not fit workflow 'chatty' ({CHATTY}): "
        "input.topic: missing (no input was given), and step 'talk' at steps[0].with.topic "
        "reads it (${input.topic}); no run was started"
    )
    assert ran.stdout == ""
    assert _runs(tmp_path) == []


def test_run_submit_and_loop_enforce_the_input_schema(tmp_path: Path) -> None:
    bad = json.dumps({"topic": "", "times": 0})
    ran = lw(tmp_path, "run", GREET, "--input", bad)
    assert ran.returncode == 3, ran.stderr
    assert f"workflow 'greet' ({GREET}) (2 problems; no run was started)" in ran.stderr
    assert "  input.topic: needs at least 1 character(s), has 0" in ran.stderr
    assert "  input.times: must be at least 1, not 0" in ran.stderr
    submitted = lw(tmp_path, "submit", GREET, "--input", '{"times": 2}')
    assert submitted.returncode == 3, submitted.stderr
    assert "input.topic: required, and missing" in submitted.stderr
    looped = lw(
        tmp_path,
        "loop",
        str(FLOWS / "chatty_cycle.yaml"),
        "--input",
        '{"subject": "x"}',
        "--max-cycles",
        "2",
        "--supervise",
        "tests.cli.flows.funcs:done_at_once",
    )
    assert looped.returncode == 3, looped.stderr
    assert "run_input_invalid" in looped.stderr
    assert _runs(tmp_path) == []
    assert list((tmp_path / "outer-loops").iterdir()) == []
    fine = lw(tmp_path, "run", GREET, "--input", '{"topic": "t"}')
    assert fine.returncode == 0, fine.stderr
    assert json.loads(fine.stdout) == {"topic": "t"}


def test_validate_prints_what_the_workflow_uses_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    checked = lw(data, "validate", GREET, "--input", '{"topic": "t"}')
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines() == [
        f"workflow 'greet' ({GREET}): valid",
        "  steps (2):",
        "    talk (execute)",
        "    out (output)",
        "  functions: tests.cli.flows.funcs:chatty",
        "  tools: none (no --setup given)",
        "  model slots: none (no --setup given)",
        "  input: an input: schema; every completed run reads input.topic",
        "  the input given fits",
    ]
    as_json = lw(data, "validate", ASK, "--setup", SETUP, "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["valid"] is True
    assert report["modelSlots"] == ["researcher"]
    assert report["setup"] == SETUP
    assert report["inputChecked"] is False
    assert [step["id"] for step in report["steps"]] == ["researcher", "out"]
    assert not data.exists()


def test_validate_refuses_with_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    refused = lw(data, "validate", GREET, "--input", '{"topic": 3}')
    assert refused.returncode == 3
    assert "input.topic: must be a string, not an integer" in refused.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("lwir: 1\nname: b\nsteps:\n  - {id: a, kind: output, value: 1, nxt: b}\n")
    invalid = lw(data, "validate", str(broken))
    assert invalid.returncode == 3
    assert "steps[0].nxt" in invalid.stderr
    as_json = lw(data, "validate", GREET, "--input", '{"times": "2"}', "--json")
    assert as_json.returncode == 3
    refusal = json.loads(as_json.stdout)
    assert refusal["valid"] is False
    assert refusal["error"]["code"] == "run_input_invalid"
    assert [p["path"] for p in refusal["error"]["problems"]] == ["input.topic", "input.times"]
    missing_slot = lw(data, "validate", ASK)
    assert missing_slot.returncode == 3
    assert "no model slot 'researcher' is configured (configured: none)" in missing_slot.stderr
    assert "--setup module:attr" in missing_slot.stderr
    assert "Runtime(model_slots={'researcher': ModelSlot(" in missing_slot.stderr
    assert not data.exists()


def test_a_missing_model_slot_says_how_to_configure_one_on_run_too(tmp_path: Path) -> None:
    ran = lw(tmp_path, "run", ASK, "--input", '{"question": "q"}')
    assert ran.returncode == 3
    assert ran.stderr.strip() == (
        "error: unknown_model_slot: no model slot 'researcher' is configured (configured: none); "
        "configure it with Runtime(model_slots={'researcher': ModelSlot(provider=..., "
        "model=...)}), or on the command line with --setup module:attr naming a RuntimeSetup "
        "whose model_slots has it"
    )
    assert _runs(tmp_path) == []


def test_schema_prints_the_committed_schema(tmp_path: Path) -> None:
    printed = lw(tmp_path, "schema")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == lwir_json_schema_text()
    assert printed.stdout == (REPO / "docs" / "lwir.schema.json").read_text(encoding="utf-8")
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_validate_checks_a_code_first_input_against_the_signature(tmp_path: Path) -> None:
    data = tmp_path / "data"
    reference = "tests.code_first.flows:report"
    fine = lw(data, "validate", reference, "--input", '{"total": 3}', "--json")
    assert fine.returncode == 0, fine.stderr
    report = json.loads(fine.stdout)
    assert (report["kind"], report["parameters"], report["inputChecked"]) == (
        "code",
        ["total"],
        True,
    )
    refused = lw(data, "validate", reference, "--input", '{"total": "3", "extra": 1}')
    assert refused.returncode == 3
    assert "input.total: input should be a valid integer (the workflow's type hint)" in (
        refused.stderr
    )
    assert "input.extra: names no parameter of the workflow (parameters: total)" in refused.stderr
    assert not data.exists()
