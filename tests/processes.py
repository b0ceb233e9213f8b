"""Reading a child process to its end after a ``readline`` on its pipes.

``Popen.communicate`` reads the pipes' file descriptors, not their Python buffers, so
whatever a ``readline`` on ``process.stdout`` buffered past its line is lost to it: a
child that printed two lines quickly loses the second. These read through the same
file objects the earlier ``readline`` used, both pipes at once (so neither fills).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import AnyStr


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
