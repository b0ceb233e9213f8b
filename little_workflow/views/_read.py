"""The read model: run summaries, step rows and trees, sessions, events as plain JSON.

Everything here is derived from ``fold`` of a run's log. ``RunReader`` keeps the folded
state of the runs it has read and, when asked again, folds only the events appended
since (``apply``): a runs list refreshed every few seconds, or a run page following a
live run, reads each event once rather than the whole log each time.

Rejected: counting ``StepCompleted`` rows with SQL for the runs list. It would be
cheaper on a cold cache, but it needs a query per backend in the storage layer for one
column, and it could disagree with the fold (a retried run, a step completed twice in a
corrupt log). Measured on SQLite: a cold 50-run page of the review flow (28 events a run)
folds in about 9 ms (some 6 µs an event) against 0.3 ms for the bare run index; warm,
with nothing new, 0.8 ms (one ``read(after=...)`` per run). A page of runs with
thousands of events each costs proportionally more, once.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeAlias, cast

from little_workflow.codec import JsonValue
from little_workflow.errors import CorruptDataError
from little_workflow.events import HarnessModelResponded, RecordedEvent, RunStatus
from little_workflow.runtime import RunState, apply
from little_workflow.storage import EventLog, PayloadLog, RunInfo
from little_workflow.views._collector import collector_paused
from little_workflow.views._pages import STEPS_PAGE, TreePages
from little_workflow.views._usage import PriceTable, UsageFold, UsageReport

__all__ = [
    "INTERRUPTED",
    "TERMINAL",
    "WAITING",
    "FindInterrupted",
    "RunReader",
    "RunSummary",
    "RunView",
    "StepRow",
    "TreeNode",
    "event_row",
    "reported_status",
    "segments",
    "step_rows",
    "step_tree",
]

#: Events read (and decoded) at once while a run is folded.
FOLD_PAGE: Final = 1000

#: The statuses a run never leaves.
TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})

#: The status reported for an unfinished run that nobody drives (its process died): derived
#: when read, never recorded; the log still says ``running``, and a resume makes it so again.
INTERRUPTED: Final = "interrupted"
#: The status reported for an unfinished run parked at a wait (an event or a timer) that no
#: process drives now (docs/waits.md): derived like ``interrupted``.
WAITING: Final = "waiting"


def reported_status(text: str) -> RunStatus | Literal["interrupted", "waiting"]:
    """A status filter as a person gives it: a logged status, ``interrupted`` or ``waiting``.

    Raises ``ValueError`` for anything else.
    """
    if text in (INTERRUPTED, WAITING):
        return cast(Literal["interrupted", "waiting"], text)
    return RunStatus(text)


#: Of some runs, the unfinished ones nobody drives now: run id -> one line saying why
#: (``Runtime.interrupted_runs``).
FindInterrupted: TypeAlias = Callable[[Sequence[RunInfo]], Awaitable[Mapping[str, str]]]
#: Of some runs, the ones parked at a wait: run id -> what it waits for
#: (``Runtime.waiting_runs``: ``{"path", "event", "since", "wakeAt", ...}``).
FindWaiting: TypeAlias = Callable[
    [Sequence[RunInfo]], Awaitable[Mapping[str, Mapping[str, JsonValue]]]
]


def event_row(record: RecordedEvent) -> dict[str, Any]:
    """One event as JSON: ``seq``, ``ts``, ``type`` and the event's fields (camelCase)."""
    return {
        "seq": record.seq,
        "ts": record.ts,
        "type": record.type,
        "event": record.event.model_dump(mode="json", by_alias=True),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRow:
    """One step visit (a path) as a table or a tree shows it."""

    path: str
    step_id: str
    kind: str
    visit: int | None
    #: ``running``, ``completed`` or ``failed``.
    status: str
    #: Attempts begun (at least 1 once the step completed).
    attempts: int
    #: Attempts that raised.
    failures: int
    started_at: float | None
    ended_at: float | None
    route: str | None
    #: ``code: message`` of the latest failure, if any.
    error: str | None
    sub_run_id: str | None
    output: JsonValue

    def to_json(self) -> dict[str, Any]:
        """The row in camelCase (what ``show --json`` prints for each step)."""
        cause = self.error.partition(":")[0] if self.status == "failed" and self.error else None
        return {
            "path": self.path,
            "stepId": self.step_id,
            "visit": self.visit,
            "kind": self.kind,
            "status": self.status,
            "attempts": self.attempts,
            "failures": self.failures,
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "route": self.route,
            "cause": cause,
            "error": self.error,
            "subRunId": self.sub_run_id,
            "output": self.output,
        }


def step_rows(state: RunState) -> list[StepRow]:
    """One row per step visit, in the order the log first mentions them."""
    return [
        StepRow(
            path=record.path,
            step_id=record.step_id,
            kind=record.kind,
            visit=record.visit,
            status=record.status,
            attempts=max(record.attempts, 1) if record.status == "completed" else record.attempts,
            failures=record.failures,
            started_at=record.started_at,
            ended_at=record.finished_at,
            route=record.route,
            error=record.last_error,
            sub_run_id=record.sub_run_id,
            output=record.output,
        )
        for record in state.steps.values()
    ]


#: A segment of a path whose brackets do not nest: a name (after a dot, or first) or a key.
_SEGMENT = re.compile(r"\.?[^.\[\]]+|\[[^\[\]]*\][^.\[\]]*")


def segments(path: str) -> list[str]:
    """``a.b[x].c`` as ``["a", ".b", "[x]", ".c"]``: joined, each prefix is a path.

    A decision loop's ``.visit[n]`` is one segment, not two.
    """
    # One regular expression for the common path (a map of 100,000 branches is that many
    # paths); a path it does not cover whole (nested brackets) goes the long way.
    found = _SEGMENT.findall(path)
    parts = found if "".join(found) == path else _walked(path)
    merged: list[str] = []
    for part in parts:
        if merged and merged[-1] == ".visit" and part.startswith("["):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


def _walked(path: str) -> list[str]:
    """``segments`` before the ``.visit`` merge, a character at a time (nesting counted)."""
    parts: list[str] = []
    current = ""
    depth = 0
    for char in path:
        if char == "." and depth == 0 and current:
            parts.append(current)
            current = char
            continue
        if char == "[" and depth == 0 and current:
            parts.append(current)
            current = ""
        depth += char == "["
        depth -= char == "]"
        current += char
    if current:
        parts.append(current)
    return parts


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeNode:
    """A node of the step tree, in depth-first order.

    A map branch (``review-candidates[cand_1]``) or a decision with visits (``judge``)
    is a node without a step of its own: ``step`` is ``None`` and its children hold the
    rows.
    """

    path: str
    label: str
    #: 0 for a top-level step.
    depth: int
    step: StepRow | None

    def to_json(self) -> dict[str, Any]:
        """The node in camelCase, with its step row (or ``null``)."""
        return {
            "path": self.path,
            "label": self.label,
            "depth": self.depth,
            "step": None if self.step is None else self.step.to_json(),
        }


def step_tree(rows: list[StepRow]) -> list[TreeNode]:
    """The rows as a tree: each path under its prefixes, children in the order they began."""
    with collector_paused():  # a node per path: see ``_collector``
        return _tree(rows)


def _tree(rows: list[StepRow]) -> list[TreeNode]:
    # Plain dicts keyed by path and a loop, not a node object per prefix and a recursive
    # walk: a map of 50,000 branches is 100,000 nodes (and a deep tree no recursion limit).
    children: dict[str, list[str]] = {"": []}
    placed: dict[str, tuple[str, int]] = {}  # path -> label, depth
    steps: dict[str, StepRow] = {}
    for row in rows:
        parent = prefix = ""
        for depth, part in enumerate(segments(row.path)):
            prefix += part
            if prefix not in placed:
                placed[prefix] = (part.lstrip("."), depth)
                children[parent].append(prefix)
                children[prefix] = []
            parent = prefix
        steps[row.path] = row
    flat: list[TreeNode] = []
    pending = children[""][::-1]
    while pending:
        path = pending.pop()
        label, depth = placed[path]
        flat.append(TreeNode(path=path, label=label, depth=depth, step=steps.get(path)))
        pending += children[path][::-1]
    return flat


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """A run in a list: the run index's row plus how many steps are done."""

    run_id: str
    workflow: str | None
    #: The status its log records.
    status: RunStatus | None
    parent_run_id: str | None
    events: int
    #: Completed step visits (map branches and decision visits each count); ``None``
    #: when the log could not be folded (``show`` names the problem).
    steps_done: int | None
    created_at: float
    #: The time of its latest event (an interrupted run's duration ends there).
    updated_at: float
    #: Why nobody drives this unfinished run now, or ``None`` when somebody does (or it
    #: is finished, or nobody looked: a reader without ``interrupted``).
    interruption: str | None = None
    #: What this run waits for (docs/waits.md), or ``None``: ``{"path", "kind", "event",
    #: "since", "wakeAt"}`` (``event`` ``None`` for a timer).
    waiting: Mapping[str, JsonValue] | None = None
    #: This run's own model usage (``paid``, ``replayed``; its sub-runs are rows of
    #: their own), ``None`` when the log could not be folded.
    usage: UsageReport | None = None

    @property
    def finished(self) -> bool:
        """Whether the run reached a final status."""
        return self.status in TERMINAL

    @property
    def interrupted(self) -> bool:
        """Whether the run is unfinished and nobody drives it (its process died)."""
        return self.interruption is not None

    @property
    def reported_status(self) -> str | None:
        """What ``runs``, ``show`` and the UI call its status: ``waiting``, ``interrupted``
        or the log's."""
        if self.waiting is not None and not self.finished:
            return WAITING
        if self.interrupted:
            return INTERRUPTED
        return None if self.status is None else self.status.value

    def to_json(self) -> dict[str, Any]:
        """The summary in camelCase (what ``runs --json`` prints for each run)."""
        return {
            "runId": self.run_id,
            "workflow": self.workflow,
            "status": self.reported_status,
            "interruption": self.interruption,
            "waiting": None if self.waiting is None else _waiting_json(self.waiting),
            "parentRunId": self.parent_run_id,
            "events": self.events,
            "stepsDone": self.steps_done,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "usage": None if self.usage is None else _usage_totals(self.usage),
        }


def _usage_totals(report: UsageReport) -> dict[str, Any]:
    return {
        "paid": report.paid.to_json(),
        "replayed": report.replayed.to_json(),
        "interrupted": report.interrupted,
    }


def _waiting_json(record: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    return {
        name: record.get(name)
        for name in (
            "path",
            "kind",
            "event",
            "since",
            "wakeAt",
            "runId",
            "ready",
            "schema",
            "question",
        )
    }


def _summary(
    info: RunInfo,
    state: RunState | None,
    interruption: str | None,
    waiting: Mapping[str, JsonValue] | None = None,
    usage: UsageReport | None = None,
) -> RunSummary:
    return RunSummary(
        run_id=info.run_id,
        workflow=info.workflow,
        status=info.status,
        parent_run_id=info.parent_run_id,
        events=max(info.last_seq, state.last_seq if state is not None else 0),
        steps_done=None if state is None else _steps_done(state),
        created_at=info.created_at,
        updated_at=max(info.updated_at, state.updated_at if state is not None else 0.0),
        interruption=interruption,
        waiting=waiting,
        usage=usage,
    )


def _reported(
    info: RunInfo, interrupted: Mapping[str, str], waits: Mapping[str, object]
) -> str | None:
    """A running run's reported status, as ``summaries`` filters it."""
    if info.run_id in interrupted:
        return INTERRUPTED
    return WAITING if info.run_id in waits else "running"


def _steps_done(state: RunState) -> int:
    return sum(1 for record in state.steps.values() if record.status == "completed")


def _sessions(state: RunState) -> list[dict[str, Any]]:
    return [
        {
            "sessionId": session.session_id,
            "role": session.role,
            "stepPath": session.step_path,
            "completed": session.completed,
            "output": session.output,
            "calls": [
                {
                    "callId": call.call_id,
                    "kind": call.kind,
                    **call.detail,
                    "done": call.done,
                    "ok": call.ok,
                    "value": call.value,
                    "errorCode": call.error_code,
                    "message": call.message,
                }
                for call in session.calls.values()
            ],
        }
        for session in state.sessions.values()
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunView:
    """Everything a run's page shows, detached from the reader's cached state."""

    summary: RunSummary
    #: The run's own fields: input, output, failure, hashes, parent, outer loop.
    run: dict[str, Any]
    steps: list[StepRow]
    #: ``steps`` as a tree (``step_tree``), with what its pages need.
    tree: TreePages
    #: Harness sessions with their model and tool calls.
    sessions: list[dict[str, Any]]
    sub_runs: list[RunSummary]
    #: Model usage of the run and, in ``sub_runs``, of its sub-runs (docs/usage.md).
    usage: UsageReport

    def to_json(self, *, steps: int = STEPS_PAGE) -> dict[str, Any]:
        """The view as one JSON object: ``run``, the first ``steps`` nodes of ``tree``
        (each with its step row, or ``null``) and ``treeNext`` (the cursor of the next
        page, ``TreePages.page``), ``stepCounts`` (rows by status), ``sessions``,
        ``subRuns``, ``usage``."""
        with collector_paused():
            tree, following = self.tree.page(None, steps)
            return {
                "run": {**self.summary.to_json(), **self.run},
                "tree": tree,
                "treeNext": following,
                "stepCounts": self.tree.counts,
                "sessions": self.sessions,
                "subRuns": [sub.to_json() for sub in self.sub_runs],
                "usage": self.usage.to_json(),
            }


def _run_fields(state: RunState) -> dict[str, Any]:
    failure = None
    if state.failure_cause is not None or state.status is RunStatus.CANCELLED:
        failure = {
            "cause": state.failure_cause or "cancelled",
            "message": state.failure_message,
            "stepPath": state.failure_step,
        }
    result = state.outer_loop_result
    loop_result = None if result is None else result.model_dump(mode="json", by_alias=True)
    return {
        "input": state.input,
        "output": state.output,
        "failure": failure,
        "definitionHash": state.definition_hash,
        "workflowVersionId": state.workflow_version_id,
        "parentStepPath": state.parent_step_path,
        "outerLoopId": state.outer_loop_id,
        "cycleNumber": state.cycle_number,
        "outerLoopResult": loop_result,
        "resumes": state.resumes,
        "startedAt": state.started_at,
        "code": code_of(state),
    }


def code_of(state: RunState) -> dict[str, Any] | None:
    """Which code a code-first run started with, and every drift a resume accepted:
    ``{"workflow": {name, hash}, "steps": [{name, hash}], "drift": [{seq, changes}]}``
    (``None`` for an LWIR run)."""
    prefix = "code:"  # a code-first run's ``workflowVersionId`` (``_code_api``)
    if not state.workflow_version_id.startswith(prefix):
        return None
    return {
        "workflow": {
            "name": state.workflow_version_id[len(prefix) :],
            "hash": state.definition_hash,
        },
        "steps": [{"name": name, "hash": digest} for name, digest in state.code_started.items()],
        "drift": [
            {
                "seq": seq,
                "changes": [change.model_dump(mode="json", by_alias=True) for change in changes],
            }
            for seq, changes in state.code_drifts
        ],
    }


class RunReader:
    """Reads runs from an event log, keeping the folded state of the latest ones read.

    Not thread-safe; meant for one event loop (a command, or the UI's server).

    On a ``PayloadLog`` the states are folded from the events as stored, so a runs list
    never fetches a blob: payload fields (outputs, calls) may hold references there,
    and ``view`` resolves the ones it shows.

    With ``interrupted`` (``Runtime.interrupted_runs``), an unfinished run nobody drives
    is reported ``interrupted``; without, every unfinished run is ``running``.
    """

    def __init__(
        self,
        log: EventLog,
        *,
        cache_size: int = 256,
        interrupted: FindInterrupted | None = None,
        waiting: FindWaiting | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.log = log
        self._cache_size = cache_size
        self._states: OrderedDict[str, RunState] = OrderedDict()
        #: Beside each cached state, the usage fold of the same events.
        self._usage: dict[str, UsageFold] = {}
        self.prices = prices
        self._payloads = log if isinstance(log, PayloadLog) else None
        self._interrupted = interrupted
        self._waiting = waiting
        #: The step rows (payloads resolved) and tree of the latest runs viewed, with the
        #: last seq they were built at: a page of a run's tree, or its view again with
        #: nothing new, builds neither again (a run of 100,000 events: about 0.5 s).
        self._trees: OrderedDict[str, tuple[int, list[StepRow], TreePages]] = OrderedDict()

    async def state(self, run_id: str) -> RunState:
        """The run's folded state, reading only the events past the cached state.

        Raises ``CorruptDataError`` for a log that does not fold (or has no events).
        """
        # Taken out of the cache while it is read: two concurrent callers never fold
        # into one state, and a log that fails to fold half-way is folded from the
        # start next time (reporting the same problem again).
        state = self._states.pop(run_id, None) or RunState(run_id=run_id)
        usage = self._usage.pop(run_id, None)
        if usage is None or usage.last_seq != state.last_seq:
            state, usage = RunState(run_id=run_id), UsageFold(run_id)
        read = self.log.read if self._payloads is None else self._payloads.read_stored
        with collector_paused():
            while True:
                # A page at a time: what is held is the folded state (a record per step)
                # and one page of events, not every event of a long run at once.
                page = await read(run_id, after=state.last_seq, limit=FOLD_PAGE)
                for record in page:
                    apply(state, record)
                    usage.add(
                        await self._with_response(record)
                        if isinstance(record.event, HarnessModelResponded)
                        else record
                    )
                if len(page) < FOLD_PAGE:
                    break
        if state.last_seq == 0:
            raise CorruptDataError(f"run {run_id!r} has no events")
        self._states[run_id] = state
        self._usage[run_id] = usage
        while len(self._states) > self._cache_size:
            evicted, _ = self._states.popitem(last=False)
            self._usage.pop(evicted, None)
        return state

    async def _with_response(self, record: RecordedEvent) -> RecordedEvent:
        """A ``harness.model.responded`` stored by reference, with what its usage fold
        reads of it: the summary kept in the event, or (in a log written before
        summaries) the response resolved. Only a large response is a reference."""
        event = record.event
        if (
            not isinstance(event, HarnessModelResponded)
            or not isinstance(event.response, dict)
            or not ("$blob" in event.response or "$lit" in event.response)
        ):
            return record
        response: JsonValue
        if event.summary is not None:
            response = event.summary
        elif self._payloads is not None:
            response = await self._payloads.resolve(event.response, where=f"run {record.run_id!r}")
        else:
            return record
        return replace(record, event=event.model_copy(update={"response": response}))

    async def usage(self, run_id: str) -> UsageReport:
        """The run's usage report, its sub-runs' (to any depth) attached.

        Raises ``CorruptDataError`` for a log that does not fold (or has no events).
        """
        await self.state(run_id)
        report = self._usage[run_id].report(self.prices)
        children = await self.log.list_runs(parent_run_id=run_id)
        subs = [await self.usage(child.run_id) for child in reversed(children)]
        return report.with_sub_runs(subs)

    def _own_usage(self, run_id: str) -> UsageReport | None:
        usage = self._usage.get(run_id)
        return None if usage is None else usage.report(self.prices)

    async def interruptions(self, runs: Sequence[RunInfo]) -> Mapping[str, str]:
        """Of ``runs``, the unfinished ones nobody drives: run id -> why."""
        if self._interrupted is None:
            return {}
        return await self._interrupted(runs)

    async def waits(self, runs: Sequence[RunInfo]) -> Mapping[str, Mapping[str, JsonValue]]:
        """Of ``runs``, the ones parked at a wait: run id -> what it waits for."""
        if self._waiting is None:
            return {}
        return await self._waiting(runs)

    async def summaries(
        self,
        *,
        status: RunStatus | Literal["interrupted", "waiting"] | None = None,
        workflow: str | None = None,
        parent_run_id: str | None = None,
        sub_runs: bool = False,
        before: tuple[float, str] | None = None,
        limit: int = 50,
    ) -> list[RunSummary]:
        """Runs matching the filters, most recent first; sub-runs only if ``sub_runs``
        (or when ``parent_run_id`` names their parent).

        ``status`` is the reported one: ``running`` leaves out the interrupted and
        waiting runs, ``interrupted`` or ``waiting`` keeps only those. ``before`` is the
        ``(created_at, run_id)`` of the last run of the previous page
        (``EventLog.list_runs``).
        """
        logged = (
            None
            if status is None
            else RunStatus("running" if status in (INTERRUPTED, WAITING) else status)
        )

        async def page(after: tuple[float, str] | None, size: int) -> list[RunInfo]:
            return await self.log.list_runs(
                status=logged,
                workflow=workflow,
                parent_run_id=parent_run_id,
                top_level=not sub_runs and parent_run_id is None,
                before=after,
                limit=size,
            )

        wanted: list[RunInfo] = []
        interrupted: dict[str, str] = {}
        waits: dict[str, Mapping[str, JsonValue]] = {}
        if logged is not RunStatus.RUNNING:
            # The page is the log's page: the store reads ``limit`` rows, whatever its size.
            wanted = await page(before, limit)
            interrupted.update(await self.interruptions(wanted))
            waits.update(await self.waits(wanted))
        # Which running runs are interrupted or waiting is known only once each was looked
        # at: a batch of the log at a time, until the page is full or the log ends.
        batch = max(limit, 100)
        while logged is RunStatus.RUNNING and len(wanted) < limit:
            found = await page(before, batch)
            interrupted.update(await self.interruptions(found))
            waits.update(await self.waits(found))
            wanted += [info for info in found if _reported(info, interrupted, waits) == status]
            if len(found) < batch:
                break
            before = (found[-1].created_at, found[-1].run_id)
        wanted = wanted[:limit]
        return [
            await self._summarize(info, interrupted.get(info.run_id), waits.get(info.run_id))
            for info in wanted
        ]

    async def _summarize(
        self,
        info: RunInfo,
        interruption: str | None,
        waiting: Mapping[str, JsonValue] | None = None,
    ) -> RunSummary:
        try:
            state: RunState | None = await self.state(info.run_id)
        except CorruptDataError:
            state = None
        usage = None if state is None else self._own_usage(info.run_id)
        return _summary(info, state, interruption, waiting, usage)

    async def view(self, run_id: str) -> RunView | None:
        """Everything about one run, or ``None`` if the log has no such run."""
        with collector_paused():  # a row per step: see ``_collector``
            return await self._view(run_id)

    async def _view(self, run_id: str) -> RunView | None:
        info = await self.log.get_run(run_id)
        if info is None:
            return None
        state = await self.state(run_id)
        children = await self.log.list_runs(parent_run_id=run_id)
        interrupted = await self.interruptions([info, *children])
        waits = await self.waits([info, *children])
        run, sessions = _run_fields(state), _sessions(state)
        if self._payloads is not None:
            run, sessions = await _resolved(run, sessions, self._payloads.resolve)
        steps, tree = await self._tree(state)
        usage = await self.usage(run_id)
        return RunView(
            summary=_summary(
                info, state, interrupted.get(run_id), waits.get(run_id), self._own_usage(run_id)
            ),
            run=run,
            steps=steps,
            tree=tree,
            sessions=sessions,
            sub_runs=[
                await self._summarize(child, interrupted.get(child.run_id), waits.get(child.run_id))
                for child in reversed(children)
            ],
            usage=usage,
        )

    async def tree(self, run_id: str) -> TreePages | None:
        """The run's step tree, to page through; ``None`` if the log has no such run."""
        if await self.log.get_run(run_id) is None:
            return None
        with collector_paused():
            return (await self._tree(await self.state(run_id)))[1]

    async def _tree(self, state: RunState) -> tuple[list[StepRow], TreePages]:
        """The run's step rows, payloads resolved, and their tree: cached per last seq."""
        run_id = state.run_id
        cached = self._trees.pop(run_id, None)
        if cached is None or cached[0] != state.last_seq:
            steps = step_rows(state)
            if self._payloads is not None:
                steps = await _resolved_steps(steps, self._payloads.resolve)
            cached = (state.last_seq, steps, TreePages(steps))
        self._trees[run_id] = cached
        while len(self._trees) > _TREES_KEPT:
            self._trees.popitem(last=False)
        return cached[1], cached[2]


#: Runs whose step rows and tree a reader keeps (the run pages open now, most likely).
_TREES_KEPT: Final = 4


async def _resolved_steps(
    steps: list[StepRow], resolve: Callable[[JsonValue], Awaitable[JsonValue]]
) -> list[StepRow]:
    """The rows' outputs as values (a row is new only where its output was a reference)."""
    resolved = []
    for row in steps:
        output = await resolve(row.output)
        resolved.append(row if output is row.output else replace(row, output=output))
    return resolved


async def _resolved(
    run: dict[str, Any],
    sessions: list[dict[str, Any]],
    resolve: Callable[[JsonValue], Awaitable[JsonValue]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A view's payloads as values: with ``_resolved_steps``, the only place a run's page
    reads blobs."""
    run = {**run, "input": await resolve(run["input"]), "output": await resolve(run["output"])}
    resolved_sessions = []
    for session in sessions:
        calls = []
        for recorded in session["calls"]:
            call = dict(recorded)
            for key in ("request", "arguments", "value"):
                if key in call:
                    call[key] = await resolve(call[key])
            calls.append(call)
        resolved_sessions.append(
            {**session, "output": await resolve(session["output"]), "calls": calls}
        )
    return run, resolved_sessions
