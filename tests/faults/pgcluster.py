"""A private PostgreSQL cluster for one test: initdb, start, restart, stop, remove.

The shared server must never be restarted, so the restart tests make their own: a
cluster initialised in a fresh directory, listening on 127.0.0.1 on a free port (and on
a Unix socket in that directory only), with trust authentication. Run as root, the
server's programs run as the ``postgres`` user (``runuser``), since ``postgres``
refuses to run as root; the directory is then a ``mkdtemp`` owned by that user, because
pytest's ``tmp_path`` lies under root-only directories it cannot enter.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN = Path(os.environ.get("LITTLE_WORKFLOW_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateCluster:
    """One PostgreSQL cluster of this test's own; ``start()`` says why it cannot run."""

    def __init__(self, *settings: str) -> None:
        #: ``name=value`` server settings added to the command line.
        self.settings = settings
        self.port = _free_port()
        self.root: Path | None = None
        self._prefix: list[str] = []

    @property
    def url(self) -> str:
        """The store URL of its ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        subprocess.run(
            [*self._prefix, str(BIN / program), *args],
            check=True,
            capture_output=True,
            timeout=timeout,
        )

    def _options(self) -> str:
        assert self.root is not None
        settings = ("listen_addresses=127.0.0.1", "fsync=off", *self.settings)
        return f"-p {self.port} -k {self.root} " + " ".join(f"-c {item}" for item in settings)

    def start(self) -> str | None:
        """initdb and start the server; the reason it cannot, or ``None`` once running."""
        if not (BIN / "initdb").exists():
            return f"no PostgreSQL server programs in {BIN}"
        self.root = Path(tempfile.mkdtemp(prefix="lw-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                return "running as root and there is no 'postgres' user to run the server as"
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._prefix = ["runuser", "-u", "postgres", "--"]
        try:
            self._run(
                "initdb",
                "-D",
                str(self.root / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
            self.pg_ctl("start")
        except (OSError, subprocess.SubprocessError) as exc:
            return f"cannot start a private PostgreSQL cluster: {exc}"
        return None

    def pg_ctl(self, action: str, *, mode: str = "fast") -> None:
        """``pg_ctl start|stop|restart`` (``-m mode`` for stop and restart), waiting."""
        assert self.root is not None
        args = ["-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w"]
        if action != "start":
            args += ["-m", mode]
        if action != "stop":
            args += ["-o", self._options()]
        self._run("pg_ctl", action, *args)

    def log(self) -> str:
        """The server's log, for a failing test's message."""
        assert self.root is not None
        with contextlib.suppress(OSError):
            return (self.root / "log").read_text(errors="replace")
        return ""

    def remove(self) -> None:
        """Stop the server (immediately) and delete the cluster."""
        if self.root is None:
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.pg_ctl("stop", mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
