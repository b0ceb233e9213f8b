"""Retention: ``Runtime.gc`` deletes finished runs, then the blobs and artifacts no one needs.

**What goes.** The unit is a *family*: a top-level run with every sub-run under it (by
the run index's parent links). A sub-run never goes on its own, and a family goes only if
its top-level run matches the filters (finished with a status in ``status``, of
``workflow``, last updated more than ``older_than`` ago, not among the ``keep_last`` most
recent matching) and every one of its runs is finished. A matching family is **kept**
(and reported, with the reason) when

* ``locked``: a process holds one of its run locks (it is being resumed or retried);
* ``cancel_requested``: a cancellation request younger than ``grace`` names one of its
  runs (a ``cancel`` call may still be waiting on it);
* ``outer_loop``: one of its runs is a cycle of an outer loop whose manifest records no
  result (the loop is unfinished, or its manifest is missing or unreadable: a resume
  reads its cycles' runs);
* ``referenced``: a run that stays refers to one of its runs. A fork's copy of a kept
  ``workflow`` step names the source's sub-run; an orchestrator's ``start_workflow`` call
  names the run it started. A fork needs its source (``forkedFrom``) only for the
  artifacts the source's steps made, which keep their run's id: so a fork keeps its
  source's family when that family made artifacts, or when the source is itself a fork
  that needs its own source (the chain must stay whole for the next collection).
  Otherwise a fork is self-contained (its log holds copies of the kept events) and its
  source may go.
* ``changed``: between the listing and the lock, a run of it was appended to.

**Order of writes** (so that a kill at any point leaves only orphans, never a remaining
event that points at something missing): per family, an intent record
``gc:pending:<runId>`` for each run, then the events and index rows in one transaction,
then the runs' scratch directories and their cancellation requests; then the deleted
runs' artifact manifests, then the intents are dropped; then the sweeps. A collection
that starts finds the intents a killed one left and finishes them (a run whose events
are still there is judged afresh). Blobs and artifact objects are swept by reachability,
so a kill during a sweep leaves only what the next sweep deletes.

**Sweeps.** Blobs: mark every blob the remaining runs' events refer to (following
conversation chains), then delete the rest that were last put more than ``grace`` ago
(``BlobStore.sweep``: atomic against a concurrent put). A live run puts a blob before
the event that refers to it, and a repeated put refreshes the blob's time, so a blob a
live run is about to refer to is younger than ``grace``. Artifact objects: delete those
no manifest names and older than ``grace`` (a put writes or touches its object before
its manifest). One collection runs at a time per data directory (``locks/gc-store.lock``).

Rejected: deleting a run's blobs with the run (blobs are shared by content: a fork, or
another run with the same large value, refers to the same blob); reference counts kept
on append (a write on every append, for a collection that runs once a day).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from little_workflow.durable import FileLock
from little_workflow.errors import ConfigError, CorruptDataError, StorageError
from little_workflow.events import (
    Event,
    HarnessToolCallStarted,
    RunStarted,
    RunStatus,
    SubRunStarted,
)
from little_workflow.runtime._cancel import CANCEL_PREFIX, CancelRequest, cancel_key
from little_workflow.runtime._run_lock import RunLock
from little_workflow.storage import PayloadRef, RunInfo, payload_refs, referenced_digests

if TYPE_CHECKING:
    from little_workflow.runtime._host import ServiceHost

__all__ = ["FINISHED", "GcReport", "KeptRun", "collect_garbage"]

#: The statuses a run can be collected in (and ``gc``'s default filter).
FINISHED: frozenset[RunStatus] = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}
)
PENDING_PREFIX = "gc:pending:"
_PAGE = 2000

KeepReason = Literal["locked", "cancel_requested", "outer_loop", "referenced", "changed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptRun:
    """A top-level run that matched the filters but was kept, and why."""

    run_id: str
    reason: KeepReason
    #: Which run of the family, and what holds it (a person reads this).
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GcReport:
    """What ``Runtime.gc`` deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    #: Every run deleted, top-level runs and their sub-runs.
    runs_deleted: tuple[str, ...]
    events_deleted: int
    blobs_deleted: int
    blob_bytes_freed: int
    #: Artifact manifests deleted (the deleted runs' artifacts).
    artifacts_deleted: int
    #: Content objects no manifest named any more.
    artifact_objects_deleted: int
    artifact_bytes_freed: int
    kept: tuple[KeptRun, ...]

    def to_json(self) -> dict[str, object]:
        """camelCase, as ``little-workflow gc --json`` prints it."""
        return {
            "dryRun": self.dry_run,
            "runsDeleted": list(self.runs_deleted),
            "eventsDeleted": self.events_deleted,
            "blobsDeleted": self.blobs_deleted,
            "blobBytesFreed": self.blob_bytes_freed,
            "artifactsDeleted": self.artifacts_deleted,
            "artifactObjectsDeleted": self.artifact_objects_deleted,
            "artifactBytesFreed": self.artifact_bytes_freed,
            "kept": [
                {"runId": kept.run_id, "reason": kept.reason, "detail": kept.detail}
                for kept in self.kept
            ],
        }


@dataclass(slots=True)
class _Index:
    """The run index at the start of a collection, with families and first events."""

    runs: dict[str, RunInfo]
    root: dict[str, str] = field(default_factory=dict)
    families: dict[str, list[str]] = field(default_factory=dict)
    started: dict[str, RunStarted] = field(default_factory=dict)

    @classmethod
    def build(cls, infos: Iterable[RunInfo]) -> _Index:
        index = cls(runs={info.run_id: info for info in infos})
        for run_id in index.runs:
            index.root[run_id] = index._root_of(run_id)
        for run_id in sorted(index.runs, key=lambda r: (index.runs[r].created_at, r)):
            index.families.setdefault(index.root[run_id], []).append(run_id)
        for root, members in index.families.items():
            members.remove(root)
            members.insert(0, root)
        return index

    def _root_of(self, run_id: str) -> str:
        seen = {run_id}
        current = run_id
        while True:
            parent = self.runs[current].parent_run_id
            # A parent no longer in the index (or a loop, which a log cannot make):
            # the run heads its own family.
            if parent is None or parent not in self.runs or parent in seen:
                return current
            seen.add(parent)
            current = parent

    def updated(self, root: str) -> float:
        return max(self.runs[member].updated_at for member in self.families[root])


def _limits(
    older_than: timedelta | None, keep_last: int | None, status: Iterable[RunStatus], grace: float
) -> frozenset[RunStatus]:
    if older_than is None and keep_last is None:
        raise ConfigError(
            "gc needs a limit: older_than (--older-than) or keep_last (--keep-last); "
            "it never deletes every finished run by default",
            code="gc_needs_a_limit",
        )
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError("older_than must not be negative", code="gc_invalid_limit")
    if keep_last is not None and keep_last < 0:
        raise ConfigError("keep_last must be 0 or more", code="gc_invalid_limit")
    if grace < 0:
        raise ConfigError("grace must not be negative", code="gc_invalid_limit")
    statuses = frozenset(RunStatus(value) for value in status)
    if not statuses or not statuses <= FINISHED:
        raise ConfigError(
            "gc collects finished runs only: status must be some of completed, failed, "
            f"cancelled (not {', '.join(sorted(s.value for s in statuses - FINISHED)) or 'none'})",
            code="gc_invalid_status",
        )
    return statuses


async def collect_garbage(
    runtime: ServiceHost,
    *,
    older_than: timedelta | None,
    status: Iterable[RunStatus],
    keep_last: int | None,
    workflow: str | None,
    grace: timedelta,
    dry_run: bool,
) -> GcReport:
    """``Runtime.gc`` (see there, and the module docstring)."""
    grace_s = grace.total_seconds()
    statuses = _limits(older_than, keep_last, status, grace_s)
    await runtime.open()
    lock = FileLock(runtime.data_dir.lock_path("gc", "store"), purpose="garbage collection")
    await lock.acquire(timeout=runtime.lock_timeout)
    try:
        collection = _Collection(runtime, grace_s, dry_run)
        if not dry_run:
            await collection.finish_pending()
        index = _Index.build(await runtime.events.list_runs())
        doomed = _select(index, statuses, workflow, older_than, keep_last)
        await collection.exclude(index, doomed)
        if dry_run:
            collection.would_delete(index)
        else:
            await collection.delete(index)
        await collection.sweep()
        return collection.report()
    finally:
        lock.release()


def _select(
    index: _Index,
    statuses: frozenset[RunStatus],
    workflow: str | None,
    older_than: timedelta | None,
    keep_last: int | None,
) -> list[str]:
    """The top-level runs the filters pick, newest first."""
    matching = [
        root
        for root in index.families
        if index.runs[root].status in statuses
        and (workflow is None or index.runs[root].workflow == workflow)
    ]
    matching.sort(key=lambda root: (index.updated(root), root), reverse=True)
    if keep_last is not None:
        matching = matching[keep_last:]
    if older_than is not None:
        cutoff = time.time() - older_than.total_seconds()
        matching = [root for root in matching if index.updated(root) <= cutoff]
    # A family with a run still going (an orphaned sub-run left running) is not finished.
    return [
        root
        for root in matching
        if all(index.runs[member].status in FINISHED for member in index.families[root])
    ]


class _Collection:
    """One collection's state and counts."""

    def __init__(self, runtime: ServiceHost, grace: float, dry_run: bool) -> None:
        self.runtime = runtime
        self.grace = grace
        self.dry_run = dry_run
        self.doomed: dict[str, list[str]] = {}
        self.kept: list[KeptRun] = []
        self.deleted: list[str] = []
        self.events = 0
        self.blobs = 0
        self.blob_bytes = 0
        self.artifacts = 0
        self.objects = 0
        self.object_bytes = 0

    def report(self) -> GcReport:
        return GcReport(
            dry_run=self.dry_run,
            runs_deleted=tuple(self.deleted),
            events_deleted=self.events,
            blobs_deleted=self.blobs,
            blob_bytes_freed=self.blob_bytes,
            artifacts_deleted=self.artifacts,
            artifact_objects_deleted=self.objects,
            artifact_bytes_freed=self.object_bytes,
            kept=tuple(sorted(self.kept, key=lambda kept: kept.run_id)),
        )

    def _keep(self, root: str, reason: KeepReason, detail: str) -> None:
        if self.doomed.pop(root, None) is not None:
            self.kept.append(KeptRun(run_id=root, reason=reason, detail=detail))

    # --- deciding -----------------------------------------------------------------------

    async def exclude(self, index: _Index, roots: list[str]) -> None:
        """Take out of ``roots`` every family something still needs (module docstring)."""
        self.doomed = {root: index.families[root] for root in roots}
        if not self.doomed:
            # Nothing to spare: each check below reads every run's log (a million runs,
            # minutes), only to find which doomed family another run needs.
            return
        events = self.runtime.events.inner
        for run_id in index.runs:
            first = await events.read(run_id, limit=1)
            if first and isinstance(first[0].event, RunStarted):
                index.started[run_id] = first[0].event
        await self._exclude_requests(index)
        self._exclude_outer_loops(index)
        await self._exclude_referenced(index)

    async def _exclude_requests(self, index: _Index) -> None:
        from little_workflow.storage import read_many

        keys = {cancel_key(m): root for root, ms in self.doomed.items() for m in ms}
        found = await read_many(self.runtime.kv, keys)
        cutoff = time.time() - self.grace
        for key, value in found.items():
            request = CancelRequest.from_json(value)
            # A finished run's request is left over (its owner died between recording
            # the cancellation and dropping the request); a recent one may be a cancel
            # call still waiting to see the run finish.
            if request.requested_at > cutoff:
                run_id = key.removeprefix(CANCEL_PREFIX)
                self._keep(keys[key], "cancel_requested", f"run {run_id} has a cancel request")

    def _exclude_outer_loops(self, index: _Index) -> None:
        verdicts: dict[str, str | None] = {}
        for root, members in list(self.doomed.items()):
            for member in members:
                started = index.started.get(member)
                loop_id = None if started is None else started.outer_loop_id
                if loop_id is None:
                    continue
                if loop_id not in verdicts:
                    verdicts[loop_id] = self._loop_holds(loop_id)
                why = verdicts[loop_id]
                if why is not None:
                    self._keep(root, "outer_loop", f"run {member} is a cycle of {why}")
                    break

    def _loop_holds(self, loop_id: str) -> str | None:
        """Why the cycles of ``loop_id`` must stay, or ``None`` if the loop is finished."""
        # Here, not at the top: ``Runtime`` imports this module for ``FINISHED``, and a
        # process that never collects (a resume) need not build the outer-loop models.
        from little_workflow.runtime._outer import manifest_path, read_manifest

        try:
            manifest = read_manifest(manifest_path(self.runtime, loop_id))
        except CorruptDataError:
            return f"outer loop {loop_id}, whose manifest cannot be read"
        except ConfigError:
            return f"outer loop {loop_id!r}"
        if manifest is None:
            return f"outer loop {loop_id}, whose manifest is not in this data directory"
        if manifest.result is None:
            return f"outer loop {loop_id}, which is unfinished"
        return None

    async def _exclude_referenced(self, index: _Index) -> None:
        artifact_runs = {m.run_id for m in self.runtime.artifacts.list() if m.run_id}
        needs: dict[str, bool] = {}

        def needs_source(run_id: str, depth: int = 0) -> bool:
            """Whether a fork of ``run_id`` needs ``run_id``'s family (module docstring)."""
            if run_id not in index.runs:
                return False
            if run_id not in needs:
                needs[run_id] = False  # a cycle of forks cannot be, but must not recurse
                family = index.families[index.root[run_id]]
                started = index.started.get(run_id)
                source = None if started is None or not started.forked_from else started.forked_from
                needs[run_id] = any(member in artifact_runs for member in family) or (
                    source is not None and depth < 1000 and needs_source(source.run_id, depth + 1)
                )
            return needs[run_id]

        references: dict[str, set[str]] = {}
        scanned: set[str] = set()
        changed = True
        while changed:
            changed = False
            doomed_runs = {member for members in self.doomed.values() for member in members}
            for run_id in index.runs:
                if run_id in doomed_runs:
                    continue
                if run_id not in scanned:
                    scanned.add(run_id)
                    references[run_id] = await self._referred(run_id)
                    started = index.started.get(run_id)
                    if started is not None and started.forked_from is not None:
                        source = started.forked_from.run_id
                        if needs_source(source):
                            references[run_id].add(source)
                for target in sorted(references[run_id] & doomed_runs):
                    root = index.root[target]
                    if root in self.doomed:
                        self._keep(
                            root, "referenced", f"run {target} is referenced by run {run_id}"
                        )
                        changed = True

    async def _referred(self, run_id: str) -> set[str]:
        """The runs ``run_id``'s log names: sub-runs of ``workflow`` steps (a fork's copies
        name its source's) and runs ``start_workflow`` calls started."""
        found: set[str] = set()
        async for event in _stored_events(self.runtime, run_id):
            if isinstance(event, SubRunStarted):
                found.add(event.sub_run_id)
            elif isinstance(event, HarnessToolCallStarted) and event.tool_name == "start_workflow":
                arguments = event.arguments
                if isinstance(arguments, dict) and isinstance(arguments.get("subRunId"), str):
                    found.add(str(arguments["subRunId"]))
        return found

    # --- deleting -----------------------------------------------------------------------

    def would_delete(self, index: _Index) -> None:
        """Count what ``delete`` would delete (a dry run)."""
        for members in self.doomed.values():
            self.deleted.extend(members)
            self.events += sum(index.runs[member].last_seq for member in members)
        doomed = set(self.deleted)
        manifests = self.runtime.artifacts.list()
        self.artifacts = sum(1 for m in manifests if m.run_id in doomed)
        staying = {m.sha256 for m in manifests if m.run_id not in doomed}
        freed = {m.sha256: m.size for m in manifests if m.run_id in doomed}
        self.objects = sum(1 for sha in freed if sha not in staying)
        self.object_bytes = sum(size for sha, size in freed.items() if sha not in staying)

    async def delete(self, index: _Index) -> None:
        """Delete the doomed families, each under its run locks (module docstring)."""
        runtime = self.runtime
        for root, members in sorted(self.doomed.items()):
            # The store-wide lock for the family's root only, as a run takes it: its
            # sub-runs are driven under their root's.
            locks = [
                RunLock(runtime, m, purpose=f"gc of run {m!r}", shared=m == root) for m in members
            ]
            held: list[RunLock] = []
            try:
                for lock, member in zip(locks, members, strict=True):
                    if not await lock.try_acquire():
                        self.kept.append(
                            KeptRun(
                                run_id=root,
                                reason="locked",
                                detail=f"run {member} is held by a live process",
                            )
                        )
                        break
                    held.append(lock)
                else:
                    why = await self._changed(index, members)
                    if why is not None:
                        self.kept.append(KeptRun(run_id=root, reason="changed", detail=why))
                        continue
                    await self._delete_family(members)
                    runtime.faults.reached("gc.after_family")
            finally:
                for lock in held:
                    await lock.release()
        if self.deleted:
            # The intents are dropped once the manifests are gone: a kill before that
            # leaves intents for the next collection to finish.
            manifests = runtime.artifacts.delete_runs(self.deleted)
            self.artifacts += len(manifests)
            runtime.faults.reached("gc.after_manifests")
            for run_id in self.deleted:
                await runtime.kv.delete(PENDING_PREFIX + run_id)

    async def _changed(self, index: _Index, members: list[str]) -> str | None:
        """Why a family locked now is not the one judged (``None`` if it is)."""
        for member in members:
            now = await self.runtime.events.get_run(member)
            before = index.runs[member]
            if now is None or now.last_seq != before.last_seq or now.status not in FINISHED:
                return f"run {member} changed while this collection ran"
            value = await self.runtime.kv.get(cancel_key(member))
            if value is not None:
                request = CancelRequest.from_json(value)
                if request.requested_at > time.time() - self.grace:
                    return f"run {member} has a cancel request"
        # A sub-run started since the listing (a retry, which would have changed a
        # member's log too, but cheap to be sure of).
        for member in members:
            for child in await self.runtime.events.list_runs(parent_run_id=member):
                if child.run_id not in members:
                    return f"run {member} has a sub-run this collection did not see"
        return None

    async def _delete_family(self, members: list[str]) -> None:
        runtime = self.runtime
        for member in members:
            await runtime.kv.set(PENDING_PREFIX + member, {"at": time.time()})
        self.events += await runtime.events.delete_runs(members)
        self.deleted.extend(members)
        runtime.faults.reached("gc.after_events")
        await self._remove_leftovers(members)

    async def _remove_leftovers(self, run_ids: Iterable[str]) -> None:
        """Scratch directories, key-value records and queue rows of deleted runs."""
        run_ids = list(run_ids)
        queue = self.runtime.store.queue
        if queue is not None:
            await queue.forget(run_ids)
        for run_id in run_ids:
            directory = self.runtime.data_dir.run_dir(run_id)
            try:
                shutil.rmtree(directory)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(
                    f"cannot delete the scratch directory {str(directory)!r}: {exc}"
                ) from exc
            await self.runtime.kv.delete(cancel_key(run_id))

    async def finish_pending(self) -> None:
        """Finish what a killed collection left: the intents whose runs are gone."""
        kv = self.runtime.kv
        pending = [key.removeprefix(PENDING_PREFIX) for key in await kv.list(PENDING_PREFIX)]
        gone = [run_id for run_id in pending if await self.runtime.events.get_run(run_id) is None]
        await self._remove_leftovers(gone)
        if gone:
            self.artifacts += len(self.runtime.artifacts.delete_runs(gone))
        # A run whose events are still there was not deleted: judged afresh below.
        for run_id in pending:
            await kv.delete(PENDING_PREFIX + run_id)

    # --- sweeping -----------------------------------------------------------------------

    async def sweep(self) -> None:
        """Mark the blobs the remaining runs reach; sweep the rest, and artifact objects."""
        runtime = self.runtime
        doomed = set(self.deleted) if self.dry_run else set()
        stored = await runtime.blobs.list()
        refs: list[PayloadRef] = []
        # Without a blob there is nothing to mark: the marking reads every event stored.
        for info in await runtime.events.list_runs() if stored else []:
            if info.run_id in doomed:
                continue
            async for event in _stored_events(runtime, info.run_id):
                refs.extend(payload_refs(event))
        marked = await referenced_digests(refs, runtime.blobs) if stored else set()
        unmarked = [info for info in stored if info.digest not in marked]
        if self.dry_run:
            cutoff = time.time() - self.grace
            old = [info for info in unmarked if info.created_at <= cutoff]
            self.blobs, self.blob_bytes = len(old), sum(info.size for info in old)
            return
        runtime.faults.reached("gc.before_sweep")
        swept = await runtime.blobs.sweep([info.digest for info in unmarked], grace=self.grace)
        self.blobs, self.blob_bytes = len(swept), sum(info.size for info in swept)
        objects = runtime.artifacts.sweep_objects(grace=self.grace)
        self.objects, self.object_bytes = len(objects), sum(size for _, size in objects)


async def _stored_events(runtime: ServiceHost, run_id: str) -> AsyncIterator[Event]:
    """``run_id``'s events as stored (references unresolved), a page at a time."""
    after = 0
    while True:
        page = await runtime.events.inner.read(run_id, after=after, limit=_PAGE)
        for record in page:
            yield record.event
        if len(page) < _PAGE:
            return
        after = page[-1].seq
