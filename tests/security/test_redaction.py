"""Per-tool redaction: a secret argument and a secret result are absent from every stored
byte, while the tool and the model saw the real values in the live run; after a restart
the redacted form replays, and a call whose argument was redacted is never made with the
placeholder.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from little_workflow.errors import RunFailedError, ToolDefinitionError
from little_workflow.harness import REDACTED, ModelSlot, Redaction, tool
from little_workflow.harness.models import ModelRequest, ScriptedProvider, scripted
from little_workflow.runtime import Runtime
from little_workflow.storage import open_storage, parse_store_url
from tests.harness.durable_support import Crash, durable_harness
from tests.runtime.support import FakeSleep, cli, of_type

FLOW = Path(__file__).resolve().parent / "flows" / "login.yaml"


class Service:
    """The ``login`` tool, recording what it was called with; ``crash`` kills it once."""

    def __init__(self, *, crash: bool = False) -> None:
        self.password = "pw-" + secrets.token_hex(12)
        self.session = "sess-" + secrets.token_hex(12)
        self.received: list[dict[str, Any]] = []
        self.crash = crash
        self.tool = tool(
            self.login,
            name="login",
            redact=Redaction(arguments=("password",), result=("session",)),
        )
        self.vault_tool = tool(self.vault, name="vault", redact=Redaction(result=("password",)))

    def vault(self, user: str) -> dict[str, Any]:
        """The password of a user.

        Args:
            user: Whose.
        """
        return {"user": user, "password": self.password}

    def login(self, user: str, password: str) -> dict[str, Any]:
        """Log in.

        Args:
            user: Who.
            password: Their password.
        """
        self.received.append({"user": user, "password": password})
        if user == "mallory":
            raise ValueError(f"wrong password {password!r} for {user}")
        if self.crash:
            self.crash = False
            raise Crash
        return {"user": user, "session": self.session, "profile": {"session": self.session}}


class Model:
    """Logs in (first as the wrong user, if ``mistake``), then answers with what the tool
    result said (as the model saw it)."""

    def __init__(self, service: Service, *, mistake: bool = False) -> None:
        self.service = service
        self.users = ["mallory", "ada"] if mistake else ["ada"]
        self.seen: list[str] = []

    def __call__(self, request: ModelRequest) -> Any:
        tools = [m for m in request.messages if m.role == "tool"]
        self.seen += [m.content or "" for m in tools[len(self.seen) :]]
        if len(tools) < len(self.users):
            arguments = {"user": self.users[len(tools)], "password": self.service.password}
            call = {"id": f"c_login{len(tools)}", "name": "login", "arguments": arguments}
            return {"tool_calls": [call]}
        if tools[-1].is_error:
            return f"could not log in: {tools[-1].content}"
        return "logged in"

    def provider(self) -> ScriptedProvider:
        return scripted(self)


def _secrets_in(root: Path, service: Service) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            for name, value in (("password", service.password), ("session", service.session)):
                if value.encode() in data:
                    found.append(f"the {name} in {path.relative_to(root)}")
    return found


class Echo(Model):
    """Logs in, then answers with the session token the tool result held: a model
    repeating a redacted value in its final answer."""

    def __call__(self, request: ModelRequest) -> Any:
        answer = super().__call__(request)
        tools = [m for m in request.messages if m.role == "tool"]
        if isinstance(answer, str) and tools and not tools[-1].is_error:
            return f"logged in; your session is {json.loads(tools[-1].content or '')['session']}"
        return answer


def stored_secrets(data: Path, store: str | None, service: Service) -> list[str]:
    """Where the password or the session is in a stored byte: the data directory's files
    (the SQLite database and its WAL, blobs), and on PostgreSQL every row of the store's
    tables (events, keys, blobs) as the server holds it."""
    found = _secrets_in(data, service)
    if store is None:
        return found
    spec = parse_store_url(store)
    assert spec.conninfo is not None
    with psycopg.connect(spec.conninfo) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(spec.schema)))
        for table, column in (("events", "data"), ("kv", "value"), ("blobs", "data")):
            query = sql.SQL("SELECT {}::bytea FROM {}").format(
                sql.Identifier(column), sql.Identifier(table)
            )
            for (raw,) in conn.execute(query):
                for name, value in (("password", service.password), ("session", service.session)):
                    if value.encode() in bytes(raw):
                        found.append(f"the {name} in a row of {table}")
    return found


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str | None:
    """The run's store: the data directory's SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


async def test_a_failing_tool_step_stores_no_redacted_value(
    tmp_path: Path, store: str | None
) -> None:
    """The login fails with an exception quoting the password, which a tool step fetched
    (redacted as stored): neither the call's failure nor the step's failed attempt, nor
    the run's failure, stores it."""
    service = Service()
    data = tmp_path / "data"
    flow = FLOW.with_name("vault_login.yaml")
    async with Runtime(
        data, store=store, tools=[service.tool, service.vault_tool], inline_payload_bytes=64
    ) as runtime:
        with pytest.raises(RunFailedError):
            await runtime.run(flow, {"user": "mallory"}, run_id="run_fail")
        events = [record.event for record in await runtime.events.read("run_fail")]
    # Live, the login got the real password, and failed quoting it.
    assert service.received[0] == {"user": "mallory", "password": service.password}
    failed = [e for e in events if type(e).__name__ == "StepAttemptFailed"]
    assert failed
    assert all(f"wrong password '{REDACTED}' for mallory" in e.message for e in failed)
    assert stored_secrets(data, store, service) == []


async def test_a_model_echoing_a_redacted_value_stores_none(
    tmp_path: Path, store: str | None
) -> None:
    """The model's final answer repeats the session token the tool returned: the agent
    step's output, the session's and the run's are stored with it redacted."""
    service = Service()
    model = Echo(service)
    data = tmp_path / "data"
    options: dict[str, Any] = {
        "model_slots": {"main": ModelSlot(provider=model.provider(), model="m")},
        "tools": [service.tool],
        "sleep": FakeSleep(),
        "inline_payload_bytes": 64,
    }
    async with Runtime(data, store=store, **options) as rt:
        result = await rt.run(FLOW, {"user": "ada"}, run_id="run_echo")
        events = await rt.events.read("run_echo")
    # Live, the answer held the real token (the run's caller gets it).
    assert result.output == f"logged in; your session is {service.session}"
    [completed] = [e for e in of_type(events, "StepCompleted") if e.step_path == "agent"]
    assert completed.output == f"logged in; your session is {REDACTED}"
    assert stored_secrets(data, store, service) == []


async def test_a_sub_run_handed_a_redacted_value_stores_none(tmp_path: Path) -> None:
    """The echoed token goes on as a sub-workflow's input: the sub-run's log (its
    ``RunStarted`` input, its output) stores it redacted too, and the sub-run's result, read
    from its log, is the redacted form."""
    service = Service()
    model = Echo(service)
    data = tmp_path / "data"
    options: dict[str, Any] = {
        "model_slots": {"main": ModelSlot(provider=model.provider(), model="m")},
        "tools": [service.tool],
        "sleep": FakeSleep(),
    }
    async with Runtime(data, **options) as rt:
        result = await rt.run(FLOW.with_name("login_sub.yaml"), {"user": "ada"}, run_id="run_sub")
        [child] = await rt.events.list_runs(parent_run_id="run_sub")
        started = of_type(await rt.events.read(child.run_id), "RunStarted")
    # What a sub-run returns is what it stored: the redacted form.
    assert result.output == f"logged in; your session is {REDACTED}"
    assert started[0].input == {"answer": f"logged in; your session is {REDACTED}"}
    assert _secrets_in(data, service) == []


def test_a_redaction_rule_is_typed() -> None:
    with pytest.raises(ToolDefinitionError):
        Redaction(arguments="password")  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError):
        tool(len, redact={"arguments": ["x"]})  # type: ignore[call-overload]
    kept = tool(Service().tool, name="login2")
    assert kept.redaction == Redaction(arguments=("password",), result=("session",))


async def test_a_run_stores_no_redacted_value(tmp_path: Path) -> None:
    service = Service()
    model = Model(service, mistake=True)
    data = tmp_path / "data"
    options: dict[str, Any] = {
        "model_slots": {"main": ModelSlot(provider=model.provider(), model="m")},
        "tools": [service.tool],
        "sleep": FakeSleep(),
        "inline_payload_bytes": 64,  # the payloads go to blobs too, which are scanned
    }
    async with Runtime(data, **options) as rt:
        result = await rt.run(FLOW, {"user": "ada"}, run_id="run_red")
        assert result.output == "logged in"
        events = await rt.events.read("run_red")
    # Live: the tool got the real password, the model the real error and session token.
    assert service.received == [
        {"user": "mallory", "password": service.password},
        {"user": "ada", "password": service.password},
    ]
    assert service.password in model.seen[0]
    assert service.session in model.seen[1]
    # Stored: the placeholder, with the rest of the call intact.
    started = of_type(events, "harness.tool_call.started")
    [failed] = of_type(events, "harness.tool_call.failed")
    [succeeded] = of_type(events, "harness.tool_call.succeeded")
    assert [event.arguments for event in started] == [
        {"user": "mallory", "password": REDACTED},
        {"user": "ada", "password": REDACTED},
    ]
    assert failed.message == f"ValueError: wrong password '{REDACTED}' for mallory"
    assert succeeded.result == {
        "user": "ada",
        "session": REDACTED,
        "profile": {"session": REDACTED},
    }
    assert _secrets_in(data, service) == []
    shown = cli(data, "events", "run_red", "--json")
    assert shown.returncode == 0, shown.stderr
    assert REDACTED in shown.stdout
    assert service.password not in shown.stdout
    assert service.session not in shown.stdout

    # A replay of the completed run returns its output and calls nothing.
    async with Runtime(data, **options) as rt:
        again = await rt.resume("run_red")
    assert again.output == "logged in"
    assert len(service.received) == 2


async def test_a_checkpointed_harness_stores_no_redacted_value(tmp_path: Path) -> None:
    service = Service()
    model = Model(service)
    root = tmp_path / "checkpoints"
    storage = await open_storage(f"file://{root}")
    try:
        harness = durable_harness(storage, provider=model.provider(), tools=[service.tool])
        ctx = harness.create_context(id="exec_red")
        assert await harness.execute(ctx, "log in") == "logged in"
        await harness.checkpoint(ctx)
        # The live context keeps the real values: the conversation goes on with them.
        assert any(service.session in (item.message.content or "") for item in ctx.items.items)
        assert await storage.list("execution:exec_red:ledger:")
    finally:
        await storage.close()
    assert service.received == [{"user": "ada", "password": service.password}]
    assert _secrets_in(root, service) == []


async def test_after_a_restart_a_redacted_argument_is_never_sent(tmp_path: Path) -> None:
    """The process dies inside the tool call: the model's answer asking for it is recorded
    (redacted), the call is not. The restarted process replays the answer and would call
    ``login`` with ``"[REDACTED]"``; the call fails with ``tool_arguments_redacted``, and
    the model is told so."""
    service = Service(crash=True)
    model = Model(service)
    storage = await open_storage(f"file://{tmp_path / 'checkpoints'}")
    try:
        first = durable_harness(storage, provider=model.provider(), tools=[service.tool])
        ctx = first.create_context(id="exec_crash")
        with pytest.raises(Crash):
            await first.execute(ctx, "log in")
        # A new harness: a new process, whose memory holds no secret.
        second = durable_harness(storage, provider=model.provider(), tools=[service.tool])
        resumed = await second.resume("exec_crash")
    finally:
        await storage.close()
    assert resumed is not None
    _ctx, output = resumed
    assert isinstance(output, str)
    assert output.startswith("could not log in")
    assert "were redacted when they were stored" in output
    # Called once, live, with the real password; never with the placeholder.
    assert service.received == [{"user": "ada", "password": service.password}]
    assert _secrets_in(tmp_path / "checkpoints", service) == []


def greet(login: dict[str, Any]) -> str:
    """The step after the login: proves it got the real session while the run lived."""
    return f"hello {login['user']}, session of {len(str(login['session']))} characters"


async def test_a_tool_step_stores_no_redacted_value(tmp_path: Path) -> None:
    service = Service()
    flow = FLOW.with_name("login_step.yaml")
    async with Runtime(tmp_path / "data", tools=[service.tool]) as runtime:
        # The password is part of the run's input here, which is stored as given: what
        # is checked is what the tool step itself stores.
        result = await runtime.run(
            flow, {"user": "alice", "password": service.password}, run_id="run_step"
        )
        events = [record.event for record in await runtime.events.read("run_step")]
    assert service.received == [{"user": "alice", "password": service.password}]
    # The next step got the real session live (its length, not the placeholder's).
    assert result.output == f"hello alice, session of {len(service.session)} characters"
    started = [e for e in events if type(e).__name__ == "HarnessToolCallStarted"]
    assert [e.arguments["password"] for e in started] == [REDACTED]
    completed = [
        e for e in events if type(e).__name__ == "StepCompleted" and e.step_path == "login"
    ]
    assert completed[0].output["session"] == REDACTED
    # Nothing stored holds the session; the password only in the run's input.
    found = [item for item in _secrets_in(tmp_path / "data", service) if "session" in item]
    assert found == []
