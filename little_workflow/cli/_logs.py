"""Log records on stderr: one line per event, the traceback only with ``--debug``.

A worker logs what happens to it while it runs (a claim the database refused, a run that
ended in an error, a lease that lapsed). An operator reads those lines, or a log
collector takes one line per event: a multi-line driver message or a 40-line traceback
per database hiccup is noise there. With ``--debug`` the traceback is kept, for a bug
report.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["OneLineFormatter", "log_to_stderr"]


class OneLineFormatter(logging.Formatter):
    """A record's message on one line, with its exception's one-line summary if any.

    A record of a logger outside ``little_workflow`` (psycopg's pool, uvicorn) is
    prefixed with that logger's name.

    ``debug`` keeps the full traceback after the line instead.
    """

    def __init__(self, *, debug: bool) -> None:
        super().__init__("%(message)s")
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        if self.debug:
            return super().format(record)
        line = record.getMessage()
        if not record.name.startswith("little_workflow"):
            # A library's own warning ("discarding closed connection", from the pool)
            # says nothing of where it comes from: the logger's name says it.
            line = f"{record.name}: {line}"
        if record.exc_info is not None and record.exc_info[1] is not None:
            line = f"{line}: {_summary(record.exc_info[1])}"
        # Driver messages span lines ("...failed: Connection refused\n\tIs the server
        # running..."): the words are kept, the line breaks and tabs are not.
        return " ".join(line.split())


def _summary(exc: BaseException) -> str:
    from little_workflow.errors import LittleWorkflowError

    try:
        if isinstance(exc, LittleWorkflowError):
            return f"{exc.code}: {exc.message}"
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ raises is user code too
        return type(exc).__name__


def log_to_stderr(*, debug: bool) -> None:
    """Send warnings and errors of every logger to stderr, formatted by ``OneLineFormatter``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(debug=debug))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
