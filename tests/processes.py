"""Child processes in tests: reading one to its end, and the fake model server as one.

``Popen.communicate`` reads the pipes' file descriptors, not their Python buffers, so
whatever a ``readline`` on ``process.stdout`` buffered past its line is lost to it: a
child that printed two lines quickly loses the second. ``finish`` reads through the
same file objects the earlier ``readline`` used, both pipes at once (so neither fills).

``fake_model_server`` runs ``python -m little_workflow.testing.fake_models`` in its own
process, for the tests that kill their client: its count file, written as each request
arrives, outlives whatever dies.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import AnyStr

#: The repository's root: where ``tests.…`` script references import from.
REPO = Path(__file__).resolve().parents[1]


def finish(process: subprocess.Popen[AnyStr], timeout: float) -> tuple[AnyStr, AnyStr]:
    """The rest of ``process``'s stdout and stderr once it has exited."""
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None
    assert stderr is not None
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            out = pool.submit(stdout.read)
            err = pool.submit(stderr.read)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            return out.result(), err.result()
    finally:
        stdout.close()
        stderr.close()


@contextlib.contextmanager
def fake_model_server(
    script: str,
    *,
    count_file: Path,
    options: Sequence[str] = (),
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """The fake model server in a process of its own, answering from ``script``; its URL.

    ``script`` is a JSON file or a ``package.module:attr`` importable from ``cwd``;
    ``options`` are more of its command-line options (``--event-delay 0.03``). The
    server is terminated on leaving, and waited for.
    """
    # stderr is left to the test's: pytest shows it when the test fails, and the server
    # writes nothing there unless something is wrong, so no pipe can fill and stall it.
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "little_workflow.testing.fake_models",
            "--script",
            script,
            "--count-file",
            str(count_file),
            *options,
        ],
        cwd=cwd,
        env=dict(os.environ if env is None else env),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise AssertionError(f"the fake model server did not start; it printed {url!r}")
        yield url
    finally:
        if server.poll() is None:
            server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            raise
        finally:
            server.stdout.close()
