"""The UI's Starlette application: three pages (one HTML file) and a read-only JSON API.

Pages: ``/`` (runs and outer loops), ``/runs/{runId}``, ``/loops/{outerLoopId}``; each
is ``static/index.html``, whose script renders the page from the API. A run's view holds
the first page of its step tree; ``/api/runs/{runId}/steps?after=`` gives the next ones
(``little_workflow.views._pages``), which the page loads as it is scrolled. A run's page
follows the run through ``/api/runs/{runId}/stream``, a server-sent event stream: the
server polls the log (a cheap ``read(after=...)``) and sends only what is new, with the
run's view refreshed from the folded state. Rejected: a WebSocket (nothing flows from
the page to the server, and an ``EventSource`` reconnects and resumes by itself, from
``Last-Event-ID``), and a change feed in the storage layer (SQLite has none across
processes; polling one index row per open page is cheap).

A run whose process died is reported ``interrupted`` (``Runtime.interrupted_runs``, through
the read model): its page stops counting, and its stream ends, as for a finished run.

While the run goes on, the stream also sends ``delta`` messages: the model answers of
its agent steps as they stream in, from the process driving the run, through a socket
in the data directory (``_live``, ``little_workflow._live``). They are never journaled;
the page replaces them with the committed answer when its event arrives.

One write: ``POST /api/runs/{runId}/send`` answers a run that waits (``_writes``), with
the checks every write has there; nothing else changes a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from little_workflow.errors import (
    ConfigError,
    CorruptDataError,
    InvalidInputError,
    LittleWorkflowError,
    StorageError,
)
from little_workflow.events import RunStatus
from little_workflow.ids import validate_id
from little_workflow.runtime import Runtime
from little_workflow.ui._artifacts import Artifacts
from little_workflow.ui._live import LiveWatch, remove_own
from little_workflow.ui._security import Guard
from little_workflow.ui._writes import send_event
from little_workflow.views import (
    INTERRUPTED,
    STEPS_PAGE,
    TERMINAL,
    PriceTable,
    RunReader,
    event_row,
    reported_status,
)

__all__ = ["create_app"]

STATIC = Path(__file__).resolve().parent / "static"
_PAGE_LIMIT = 500
#: The most nodes one page of a run's step tree may ask for.
_STEPS_LIMIT = 5000
_KEEPALIVE_SECONDS = 15.0
#: How often a stream that sees no new events asks whether its run was interrupted.
_LOOK_SECONDS = 1.0


class _Backend:
    """The runtime (store and data directory) and the read model, opened with the app."""

    def __init__(
        self, data_dir: str | os.PathLike[str], store: str | None, prices: PriceTable | None
    ) -> None:
        self.runtime = Runtime(data_dir, store=store, import_functions=False)
        self.prices = prices
        self.artifacts = Artifacts(self.runtime.data_dir.root)
        self._reader: RunReader | None = None

    @property
    def reader(self) -> RunReader:
        assert self._reader is not None, "the app's lifespan opens the store"
        return self._reader

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        await self.runtime.open()
        self._reader = RunReader(
            self.runtime.events,
            interrupted=self.runtime.interrupted_runs,
            waiting=self.runtime.waiting_runs,
            prices=self.prices,
        )
        try:
            yield
        finally:
            self._reader = None
            remove_own(self.runtime.data_dir.root)  # streams cut at exit may leave some
            await self.runtime.close()


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def _not_found(what: str) -> HTTPException:
    return HTTPException(404, f"no {what} in this store")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise HTTPException(400, f"{name} must be an integer from {low} to {high}")
    return int(text)


def _cursor(text: str | None) -> tuple[float, str] | None:
    """``?before=``: a ``next`` of the runs list, ``<createdAt>:<runId>``."""
    if text is None:
        return None
    created, _, run_id = text.partition(":")
    try:
        created_at = float(created)
    except ValueError:
        created_at = math.nan
    if not math.isfinite(created_at) or not run_id:
        raise HTTPException(400, "before must be a runs list's next: <createdAt>:<runId>")
    return created_at, validate_id(run_id, what="run id")


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true", "yes", "on")


class _Api:
    """The request handlers, over one backend."""

    def __init__(self, backend: _Backend, poll_interval: float) -> None:
        self.backend = backend
        self.poll_interval = poll_interval

    async def page(self, _request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def runs(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        try:
            wanted = None if status is None else reported_status(status)
        except ValueError:
            raise HTTPException(400, f"unknown status {status!r}") from None
        parent = request.query_params.get("parent") or None
        limit = _int(request, "limit", 50, 1, 1000)
        found = await self.backend.reader.summaries(
            status=wanted,
            workflow=request.query_params.get("workflow") or None,
            parent_run_id=None if parent is None else validate_id(parent, what="run id"),
            sub_runs=_flag(request, "subRuns"),
            before=_cursor(request.query_params.get("before") or None),
            limit=limit,
        )
        last = found[-1] if len(found) == limit else None
        return JSONResponse(
            {
                "runs": [summary.to_json() for summary in found],
                # Where the next page starts (?before=), or null after the last page.
                "next": None if last is None else f"{last.created_at!r}:{last.run_id}",
            }
        )

    async def run_payload(self, run_id: str) -> dict[str, Any] | None:
        view = await self.backend.reader.view(run_id)
        if view is None:
            return None
        payload = view.to_json()
        loop_id = view.run.get("outerLoopId")
        payload["outerLoop"] = None if loop_id is None else await self.loop_payload(loop_id)
        payload["artifacts"] = await self.backend.artifacts.listing(run_id)
        return payload

    async def run(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        payload = await self.run_payload(run_id)
        if payload is None:
            raise _not_found(f"run {run_id!r}")
        return JSONResponse(payload)

    async def steps(self, request: Request) -> Response:
        """A page of the run's step tree: the nodes after ``?after=`` (a page's ``next``:
        the path of its last node), at most ``?limit=`` of them (``views._pages``)."""
        run_id = validate_id(request.path_params["run_id"], what="run id")
        limit = _int(request, "limit", STEPS_PAGE, 1, _STEPS_LIMIT)
        tree = await self.backend.reader.tree(run_id)
        if tree is None:
            raise _not_found(f"run {run_id!r}")
        nodes, following = tree.page(request.query_params.get("after"), limit)
        return JSONResponse({"tree": nodes, "next": following, "stepCounts": tree.counts})

    async def events(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        log = self.backend.runtime.events
        if await log.get_run(run_id) is None:
            raise _not_found(f"run {run_id!r}")
        after = _int(request, "after", 0, 0, 2**62)
        limit = _int(request, "limit", _PAGE_LIMIT, 1, 10_000)
        records = await log.read(run_id, after=after, limit=limit)
        types = set(request.query_params.getlist("type"))
        return JSONResponse(
            {
                "events": [event_row(r) for r in records if not types or r.type in types],
                "lastSeq": records[-1].seq if records else after,
                "more": len(records) == limit,
            }
        )

    async def stream(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        if await self.backend.runtime.events.get_run(run_id) is None:
            raise _not_found(f"run {run_id!r}")
        # An EventSource that reconnects says where it was; that wins over ?after=.
        resumed = request.headers.get("last-event-id", "")
        after = int(resumed) if resumed.isdigit() else _int(request, "after", 0, 0, 2**62)
        return StreamingResponse(
            _follow(self.backend, run_id, after, self.run_payload, self.poll_interval),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def artifacts(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        return JSONResponse(await self.backend.artifacts.listing(run_id))

    async def artifact(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        artifact_id = validate_id(request.path_params["artifact_id"], what="artifact id")
        found = await self.backend.artifacts.download(run_id, artifact_id)
        if found is None:
            raise _not_found(f"artifact {artifact_id!r} of run {run_id!r}")
        name, data = found
        # Always a download, never rendered here: an HTML or SVG artifact opened on
        # this origin could run its scripts against the API.
        return Response(
            data,
            media_type="application/octet-stream",
            headers={
                "content-disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
                "content-security-policy": "sandbox",
                "cache-control": "no-store",
            },
        )

    async def loop_payload(self, loop_id: str) -> dict[str, Any]:
        manifest = self.backend.runtime.outer_loop_status(loop_id)
        payload: dict[str, Any] = manifest.model_dump(mode="json", by_alias=True)
        wanted = [cycle.run_id for cycle in manifest.cycles]
        if manifest.pending_cycle_run_id is not None:
            wanted.append(manifest.pending_cycle_run_id)
        infos = [await self.backend.runtime.events.get_run(run_id) for run_id in wanted]
        found = [info for info in infos if info is not None]
        interrupted = await self.backend.reader.interruptions(found)
        summaries = {}
        for info in found:
            logged = None if info.status is None else info.status.value
            summaries[info.run_id] = {
                "status": INTERRUPTED if info.run_id in interrupted else logged,
                "events": info.last_seq,
                "createdAt": info.created_at,
                "updatedAt": info.updated_at,
            }
        payload["runs"] = summaries
        return payload

    async def loops(self, _request: Request) -> Response:
        found: list[dict[str, Any]] = []
        paths = sorted(
            self.backend.runtime.data_dir.outer_loops.glob("*.json"),
            key=lambda path: path.stat().st_mtime,
            reverse=True,
        )
        for path in paths:
            try:
                manifest = self.backend.runtime.outer_loop_status(path.stem)
            except InvalidInputError:
                continue  # not a manifest's name (an editor's backup, a temp file)
            except CorruptDataError as exc:
                found.append({"outerLoopId": path.stem, "error": exc.message})
                continue
            found.append(
                {
                    "outerLoopId": manifest.outer_loop_id,
                    "maxCycles": manifest.max_cycles,
                    "cycles": len(manifest.cycles),
                    "pendingCycleRunId": manifest.pending_cycle_run_id,
                    "result": None if manifest.result is None else manifest.result.kind,
                    "updatedAt": path.stat().st_mtime,
                }
            )
        return JSONResponse({"loops": found})

    async def send(self, request: Request) -> Response:
        run_id = validate_id(request.path_params["run_id"], what="run id")
        return await send_event(self.backend.runtime, request, run_id)

    async def loop(self, request: Request) -> Response:
        loop_id = validate_id(request.path_params["loop_id"], what="outer loop id")
        return JSONResponse(await self.loop_payload(loop_id))


def create_app(
    data_dir: str | os.PathLike[str],
    store: str | None = None,
    token: str | None = None,
    *,
    poll_interval: float = 0.25,
    prices: PriceTable | None = None,
) -> Starlette:
    """The UI for the runs in ``data_dir`` (and ``store``, if the log lives elsewhere).

    With ``token``, every request must carry it (see ``_security``); without, only
    requests to a loopback host name are answered. ``poll_interval`` is how often an
    open run page's stream looks for new events, in seconds. ``prices`` costs the model
    usage the pages show (``views.load_prices``).
    """
    backend = _Backend(data_dir, store, prices)
    api = _Api(backend, poll_interval)
    routes = [
        Route("/", api.page),
        Route("/runs/{run_id}", api.page),
        Route("/loops/{loop_id}", api.page),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/api/runs", api.runs),
        Route("/api/runs/{run_id}", api.run),
        Route("/api/runs/{run_id}/events", api.events),
        Route("/api/runs/{run_id}/steps", api.steps),
        Route("/api/runs/{run_id}/send", api.send, methods=["POST"]),
        Route("/api/runs/{run_id}/stream", api.stream),
        Route("/api/runs/{run_id}/artifacts", api.artifacts),
        Route("/api/runs/{run_id}/artifacts/{artifact_id}", api.artifact),
        Route("/api/loops", api.loops),
        Route("/api/loops/{loop_id}", api.loop),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token)],
        lifespan=backend.lifespan,
        exception_handlers={
            HTTPException: _http_error,
            LittleWorkflowError: _library_error,
        },
    )


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {400: "bad_request", 404: "not_found"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, exc.detail)


async def _library_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LittleWorkflowError)
    if isinstance(exc, ConfigError) and exc.code == "outer_loop_not_found":
        return _error(404, exc.code, exc.message)
    if isinstance(exc, InvalidInputError):
        return _error(400, exc.code, exc.message)
    if isinstance(exc, StorageError):
        return _error(503 if exc.code == "storage_unavailable" else 500, exc.code, exc.message)
    return _error(500, exc.code, exc.message)


def _sse(kind: str, data: object, *, event_id: int | None = None) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {event_id}\n" if event_id is not None else ""
    # JSON never holds a raw newline, so the data is one ``data:`` line.
    return f"{head}event: {kind}\ndata: {text}\n\n"


async def _follow(
    backend: _Backend,
    run_id: str,
    after: int,
    run_payload: Callable[[str], Awaitable[dict[str, Any] | None]],
    poll_interval: float,
) -> AsyncIterator[str]:
    """``update`` messages (new events; the run's view with the last of a backlog), then
    ``end`` once the run is finished, or interrupted, and every event was sent; while
    the run goes on, ``delta`` messages in between (the answers streaming in)."""
    watch: LiveWatch | None = None
    tried = False
    try:
        async for message in _messages(backend, run_id, after, run_payload, poll_interval):
            if isinstance(message, str):
                # What the socket holds first: a call's deltas all left before its answer
                # was committed, so none comes after the update that holds the answer.
                batches = [] if watch is None else watch.take()
                if batches:
                    yield _sse("delta", {"batches": batches})
                yield message
                continue
            # The run goes on: listen, from now on, for its answers streaming in (tried
            # once: a socket that cannot be bound is logged, and the page goes without).
            if not tried:
                tried = True
                watch = LiveWatch(backend.runtime.data_dir.root, run_id)
                if not watch.open():
                    watch = None
            if watch is None:
                await asyncio.sleep(message)
                continue
            loop = asyncio.get_running_loop()
            deadline = loop.time() + message
            while (left := deadline - loop.time()) > 0:
                await watch.wait(left)
                batches = watch.take()
                if batches:
                    yield _sse("delta", {"batches": batches})
    finally:
        if watch is not None:
            watch.close()


async def _messages(
    backend: _Backend,
    run_id: str,
    after: int,
    run_payload: Callable[[str], Awaitable[dict[str, Any] | None]],
    poll_interval: float,
) -> AsyncIterator[str | float]:
    """The stream's messages, with a pause (seconds, a float) between two looks at the
    log of a run that goes on: ``_follow`` sleeps there, or listens."""
    log = backend.runtime.events
    position = after
    quiet = unlooked = 0.0
    first = True
    shown: str | None = None  # the run's status in the last view sent
    while True:
        # The status first: once it is terminal, the read below has every event.
        info = await log.get_run(run_id)
        records = await log.read(run_id, after=position, limit=_PAGE_LIMIT)
        # Asked before a view is built, so that the page's last view says so too; a run
        # whose holder dies after this look is found at a later one.
        interrupted = False
        quiet_run = info is not None and info.status is RunStatus.RUNNING and not records
        if (
            info is not None
            and quiet_run
            and (first or shown == INTERRUPTED or unlooked >= _LOOK_SECONDS)
        ):
            unlooked = 0.0
            interrupted = run_id in await backend.reader.interruptions([info])
        if records or first or (interrupted and shown != INTERRUPTED):
            first = False
            quiet = 0.0
            position = records[-1].seq if records else position
            caught_up = len(records) < _PAGE_LIMIT
            view = await run_payload(run_id) if caught_up else None
            shown = None if view is None else view["run"]["status"]
            update: dict[str, Any] = {
                "events": [event_row(record) for record in records],
                "run": view,
            }
            yield _sse("update", update, event_id=position)
            if not caught_up:
                continue
        if info is not None and info.status in TERMINAL and not records:
            yield _sse("end", {"lastSeq": position, "status": info.status.value})
            return
        if interrupted:
            yield _sse("end", {"lastSeq": position, "status": INTERRUPTED})
            return
        if quiet >= _KEEPALIVE_SECONDS:
            quiet = 0.0
            yield ": keepalive\n\n"  # lets a proxy, and the server, see a dead client
        yield poll_interval
        quiet += poll_interval
        unlooked += poll_interval
