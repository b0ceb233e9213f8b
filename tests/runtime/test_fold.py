"""``fold``: a run's state as a pure function of its events, and the logs it refuses."""

from __future__ import annotations

import pytest

from little_workflow.errors import CorruptDataError
from little_workflow.events import (
    Event,
    HarnessExecuteStepSucceeded,
    RecordedEvent,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    RunStatus,
    StepAttemptFailed,
    StepAttemptStarted,
    StepCompleted,
    StepFailed,
    SubRunStarted,
)
from little_workflow.runtime import RunState, apply, fold

STARTED = RunStarted(
    workflow_name="review",
    definition_hash="sha256:" + "a" * 64,
    workflow_version_id="wv_0123456789abcdef",
    input={"q": 1},
)


def log(*events: Event, first_seq: int = 1) -> list[RecordedEvent]:
    return [
        RecordedEvent(run_id="run_f", seq=first_seq + i, ts=1000.0 + i, event=event)
        for i, event in enumerate(events)
    ]


def attempt(path: str, step_id: str, kind: str = "execute", visit: int | None = None) -> Event:
    return StepAttemptStarted(step_path=path, step_id=step_id, kind=kind, visit=visit)


def done(
    path: str,
    step_id: str,
    kind: str = "execute",
    visit: int | None = None,
    route: str | None = None,
) -> Event:
    return StepCompleted(
        step_path=path, step_id=step_id, kind=kind, visit=visit, output=path, route=route
    )


LOOP = (
    STARTED,
    attempt("judge.visit[0]", "judge", "decision", 0),
    done("judge.visit[0]", "judge", "decision", 0, route="revise"),
    attempt("revise.visit[0]", "revise", visit=0),
    done("revise.visit[0]", "revise", visit=0),
    attempt("judge.visit[1]", "judge", "decision", 1),
    done("judge.visit[1]", "judge", "decision", 1, route="accept"),
    attempt("m[a].judge.visit[0]", "judge", "decision", 0),
    done("m[a].judge.visit[0]", "judge", "decision", 0, route="left"),
    attempt("judgement", "judgement"),
    done("judgement", "judgement"),
)


def test_fold_reads_the_run_and_its_steps() -> None:
    state = fold("run_f", log(*LOOP, RunCompleted(output={"ok": True})))
    assert state.run_id == "run_f"
    assert (state.workflow_name, state.input) == ("review", {"q": 1})
    assert state.workflow_version_id == "wv_0123456789abcdef"
    assert state.status is RunStatus.COMPLETED
    assert state.output == {"ok": True}
    assert state.last_seq == len(LOOP) + 1
    assert list(state.steps) == [
        "judge.visit[0]",
        "revise.visit[0]",
        "judge.visit[1]",
        "m[a].judge.visit[0]",
        "judgement",
    ]
    record = state.steps["judge.visit[1]"]
    assert (record.status, record.visit, record.route, record.attempts) == (
        "completed",
        1,
        "accept",
        1,
    )
    assert record.completed_seq == 7


def test_visits_and_pending_decision_target_scan_completed_steps_by_prefix() -> None:
    state = fold("run_f", log(*LOOP))
    assert state.visits("judge") == 2  # not m[a].judge, not judgement
    assert state.visits("judge", "m[a].") == 1
    assert state.visits("judge", "m[b].") == 0
    assert state.visits("judgement") == 1
    assert state.pending_decision_target("judge") == "accept"
    assert state.pending_decision_target("judge", "m[a].") == "left"
    assert state.pending_decision_target("revise") is None

    # Mid-loop: the latest completed visit decides where the run goes on.
    mid = fold("run_f", log(*LOOP[:5], attempt("judge.visit[1]", "judge", "decision", 1)))
    assert mid.visits("judge") == 1
    assert mid.pending_decision_target("judge") == "revise"
    assert mid.steps["judge.visit[1]"].status == "running"


def test_apply_one_event_at_a_time_equals_fold() -> None:
    records = log(*LOOP)
    state = RunState(run_id="run_f")
    for record in records:
        apply(state, record)
    assert state == fold("run_f", records)


def test_attempts_failures_and_an_uncompleted_execute_result() -> None:
    state = fold(
        "run_f",
        log(
            STARTED,
            attempt("call", "call"),
            StepAttemptFailed(
                step_path="call", attempt=1, error_code="E", message="m", will_retry=True
            ),
            attempt("call", "call"),
            HarnessExecuteStepSucceeded(step_path="call", attempt=2, result=7),
            attempt("sub", "sub", "workflow"),
            SubRunStarted(
                step_path="sub", sub_run_id="run_s", workflow_name="c", definition_hash="h"
            ),
        ),
    )
    call = state.steps["call"]
    assert (call.attempts, call.failures, call.status) == (2, 1, "running")
    assert (call.has_execute_result, call.execute_result) == (True, 7)
    assert call.last_error == "E: m"
    assert state.steps["sub"].sub_run_id == "run_s"


def test_a_retry_reopens_the_failed_run_and_its_failed_steps() -> None:
    failed = (
        STARTED,
        attempt("call", "call"),
        StepAttemptFailed(
            step_path="call", attempt=1, error_code="E", message="m", will_retry=False
        ),
        StepFailed(step_path="call", step_id="call", cause_code="step_failed", message="m"),
        RunFailed(cause_code="step_failed", message="m", step_path="call"),
    )
    state = fold("run_f", log(*failed))
    assert state.status is RunStatus.FAILED
    assert (state.failure_cause, state.failure_step) == ("step_failed", "call")
    assert state.steps["call"].status == "failed"

    resumed = fold("run_f", log(*failed, RunResumed(reason="resume")))
    assert resumed.status is RunStatus.FAILED  # only a retry reopens it
    retried = fold("run_f", log(*failed, RunResumed(reason="retry")))
    assert retried.status is RunStatus.RUNNING
    assert (retried.steps["call"].status, retried.steps["call"].failures) == ("running", 0)
    assert retried.resumes == 1


def test_the_first_event_must_be_run_started() -> None:
    with pytest.raises(CorruptDataError, match="not RunStarted"):
        fold("run_f", log(attempt("a", "a")))


def test_a_step_completed_twice_is_corrupt() -> None:
    with pytest.raises(CorruptDataError, match="completed twice"):
        fold("run_f", log(STARTED, attempt("a", "a"), done("a", "a"), done("a", "a")))


def test_a_completed_step_started_again_is_corrupt() -> None:
    with pytest.raises(CorruptDataError, match="started again"):
        fold("run_f", log(STARTED, attempt("a", "a"), done("a", "a"), attempt("a", "a")))


@pytest.mark.parametrize(
    "seqs",
    [(1, 3), (1, 2, 2), (2,), (1, 2, 4)],
    ids=["gap", "duplicate", "starts-late", "gap-later"],
)
def test_sequence_numbers_must_be_gap_free(seqs: tuple[int, ...]) -> None:
    events = [STARTED, attempt("a", "a"), done("a", "a")]
    records = [
        RecordedEvent(run_id="run_f", seq=seq, ts=1.0, event=event)
        for seq, event in zip(seqs, events, strict=False)
    ]
    with pytest.raises(CorruptDataError, match="seq"):
        fold("run_f", records)


def test_an_empty_log_is_corrupt() -> None:
    with pytest.raises(CorruptDataError, match="no events"):
        fold("run_f", [])


def test_events_about_a_step_nobody_started_are_corrupt() -> None:
    with pytest.raises(CorruptDataError, match="no StepAttemptStarted"):
        fold(
            "run_f",
            log(
                STARTED,
                StepAttemptFailed(
                    step_path="x", attempt=1, error_code="E", message="m", will_retry=False
                ),
            ),
        )


def test_nothing_but_a_resume_may_follow_the_end_of_a_run() -> None:
    with pytest.raises(CorruptDataError, match="after the run ended"):
        fold("run_f", log(STARTED, RunCompleted(output=1), attempt("a", "a")))
    state = fold("run_f", log(STARTED, RunCompleted(output=1), RunResumed()))
    assert state.status is RunStatus.COMPLETED
