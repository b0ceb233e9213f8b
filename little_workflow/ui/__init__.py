"""The web UI: runs, a run's step tree, events, model and tool calls, loops, artifacts.

``create_app(data_dir)`` is the Starlette application (read-only JSON API, server-sent
events for live pages, static HTML/CSS/JS with no build step); ``serve(data_dir)`` runs
it on uvicorn, on 127.0.0.1 by default, requiring a token anywhere else.
"""

from __future__ import annotations

from little_workflow._extras import require

# The whole package is the UI: importing it without Starlette and uvicorn says which extra
# to install, instead of a ModuleNotFoundError from inside ``_app``.
require("ui", "the web UI")

from little_workflow.ui._app import create_app  # noqa: E402
from little_workflow.ui._server import serve  # noqa: E402

__all__ = ["create_app", "serve"]
