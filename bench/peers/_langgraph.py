"""LangGraph: a one-node graph that loops on itself, one superstep per step.

Backends: ``sqlite`` (``SqliteSaver``, WAL, SQLite's default ``synchronous=FULL``) and
``pg`` (``PostgresSaver``, its tables in this job's schema), both with
``durability="sync"``: the checkpoint of each superstep is committed before the next one
starts, LangGraph's per-step durable mode. ``sqlite-async`` is LangGraph's default mode
(checkpoints written in the background while the next step runs), measured in the kill
workload only, to show what a kill costs in it. In the history workload the state's
``messages`` channel has an ``operator.add`` reducer, LangGraph's usual shape for a chat
history: each node returns its new message.
"""

from __future__ import annotations

import operator
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

# Ignores for mypy in the project's venv, where the peers are (rightly) absent.
from langgraph.checkpoint.base import BaseCheckpointSaver  # type: ignore[import-not-found, unused-ignore]
from langgraph.graph import END, START, StateGraph  # type: ignore[import-not-found, unused-ignore]

from bench.peers._common import Body, Calls, History, Job, message, pg_bytes, sqlite_bytes

_body = Body()


class Counter(TypedDict):
    """The trivial state: how many steps have run."""

    i: int
    n: int


class Chat(TypedDict):
    """The growing history."""

    i: int
    n: int
    messages: Annotated[list[dict[str, str]], operator.add]


def step(state: Counter) -> dict[str, int]:
    """A trivial step; in the kill workload it logs its call, and one of them kills."""
    index = state["i"]
    _body.step(index)
    return {"i": index + 1}


def say(state: Chat) -> dict[str, Any]:
    """One turn: sees the history, returns the new message."""
    index = state["i"]
    _body.turn(index)
    return {"i": index + 1, "messages": [message(index)]}


def _again(state: Counter | Chat) -> str:
    return END if state["i"] >= state["n"] else "step"


def _graph(saver: BaseCheckpointSaver[Any], chat: bool) -> Any:
    builder: StateGraph[Any] = StateGraph(Chat if chat else Counter)
    builder.add_node("step", say if chat else step)  # type: ignore[arg-type, unused-ignore]
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", _again)
    return builder.compile(checkpointer=saver)


@contextmanager
def _saver(job: Job) -> Iterator[BaseCheckpointSaver[Any]]:
    if job.backend == "pg":
        import psycopg
        from langgraph.checkpoint.postgres import (  # type: ignore[import-not-found, unused-ignore]
            PostgresSaver,
        )
        from psycopg.rows import dict_row

        # The connection settings PostgresSaver.from_conn_string uses, plus our schema.
        with psycopg.connect(
            job.pg_url,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,  # type: ignore[arg-type, unused-ignore]
            options=f"-c search_path={job.schema}",
        ) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {job.schema}")
            pg_saver = PostgresSaver(conn)  # type: ignore[arg-type, unused-ignore]
            pg_saver.setup()
            yield pg_saver
    else:
        from langgraph.checkpoint.sqlite import (  # type: ignore[import-not-found, unused-ignore]
            SqliteSaver,
        )

        lite = sqlite3.connect(Path(job.dir) / "lg.db", check_same_thread=False)
        try:
            yield SqliteSaver(lite)
        finally:
            lite.close()


def _invoke(graph: Any, state: dict[str, Any] | None, thread: str, job: Job) -> Any:
    durability = "async" if job.backend == "sqlite-async" else "sync"
    config = {"configurable": {"thread_id": thread}, "recursion_limit": job.steps + 10}
    return graph.invoke(state, config, durability=durability)


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` on LangGraph."""
    with _saver(job) as saver:
        if job.workload == "steps":
            graph = _graph(saver, chat=False)
            if job.warmup:
                _invoke(graph, {"i": 0, "n": job.warmup}, "warm", job)
            wall, cpu = time.perf_counter(), time.process_time()
            _invoke(graph, {"i": 0, "n": job.steps}, "run", job)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            return {
                "us_per_step": wall / job.steps * 1e6,
                "cpu_us_per_step": cpu / job.steps * 1e6,
            }
        if job.workload == "kill":
            _body.calls = Calls(job.counter_path)
            graph = _graph(saver, chat=False)
            if job.phase == "first":
                _body.kill_at = job.kill_at
                _invoke(graph, {"i": 0, "n": job.steps}, "killed", job)
                raise AssertionError("the step at kill_at did not kill this process")
            # None as the input continues the thread from its last checkpoint.
            final = _invoke(graph, None, "killed", job)
            assert final["i"] == job.steps, final
            return {"done_wall": time.time()}
        if job.workload == "history":
            if job.backend == "pg":
                _body.history = History(job.steps, lambda: pg_bytes(job.pg_url, job.schema))
            else:
                _body.history = History(job.steps, lambda: sqlite_bytes(Path(job.dir) / "lg.db"))
            _body.history.bytes_start = _body.history.size()
            graph = _graph(saver, chat=True)
            _invoke(graph, {"i": 0, "n": job.steps, "messages": []}, "history", job)
            return _body.history.result(_body.history.size())
    raise ValueError(f"unknown workload {job.workload!r}")
