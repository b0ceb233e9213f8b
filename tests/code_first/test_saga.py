"""The saga in both front ends, under real SIGKILLs: withdraw, a deposit that fails for
good, then a refund. The far ends (``flows``) write each request they are asked to a
ledger outside the process; side-effect steps with reconcile hooks make each far end
asked exactly once, whatever the kills, and the output names the refund."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FORMS = {
    "code": "tests.code_first.flows:transfer",
    "lwir": str(REPO / "tests" / "code_first" / "saga.yaml"),
}
EXPECTED = {"withdraw": "withdrew 5", "failed": "deposit", "refund": "refunded 5"}


def start(data_dir: Path, ledger: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LW_TEST_LEDGER": str(ledger), "LW_TEST_SLOW": "0.4"}
    return subprocess.Popen(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_far_end_is_asked_once_under_random_sigkills(tmp_path: Path, form: str) -> None:
    chance = random.Random(19)
    data_dir, ledger = tmp_path / "data", tmp_path / "ledger"
    # ``run`` with an existing run id resumes it: the same command after every kill.
    command = ["run", FORMS[form], "--input", '{"amount": 5}', "--run-id", "run_saga"]
    kills = 0
    while kills < 8:
        process = start(data_dir, ledger, *command)
        # Start-up takes a good part of a second, then three steps of 0.4 s each.
        time.sleep(chance.uniform(0.2, 1.0))
        if process.poll() is not None:
            process.communicate()
            break
        process.send_signal(signal.SIGKILL)
        process.communicate()
        kills += 1
    process = start(data_dir, ledger, *command)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert json.loads(stdout) == EXPECTED
    # One request per far end: the first two fields of a line (the third is the answer).
    asked = [" ".join(line.split()[:2]) for line in ledger.read_text().splitlines()]
    assert sorted(asked) == sorted(
        ["withdraw run_saga/withdraw", "deposit run_saga/deposit", "refund run_saga/refund"]
    ), (kills, asked)
    assert kills >= 2
