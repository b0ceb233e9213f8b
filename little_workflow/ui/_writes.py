"""The UI's one write: answering a run that waits (``POST /api/runs/{runId}/send``).

Who may write is who may read (``_security.Guard``: the token, or a loopback ``Host``
without one), and a write must also come from the UI's own page, never from another
site the user's browser has open:

* the body must be ``application/json``: a page of another site can send that only
  after a CORS preflight, which this server never answers;
* an ``Origin`` header, when there is one (browsers send it with every ``POST``), must
  be this server's own origin; so must ``Sec-Fetch-Site`` say ``same-origin`` when sent.

The token cookie is ``SameSite=Strict`` as well, so a cross-site request carries no
token. A client that is no browser (``curl`` with ``Authorization: Bearer``) sends no
``Origin`` and passes. The send itself is ``Runtime.send``: the same checks as the CLI's
(the wait's schema, a run that no longer waits), and its ``key`` makes a double submit
deliver once; the page makes one key per form it shows.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from little_workflow.errors import ConfigError, EventRefusedError, InvalidInputError
from little_workflow.runtime import Runtime

__all__ = ["refuse_foreign", "send_event"]

_MAX_BODY = 1 << 20


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def refuse_foreign(request: Request) -> Response | None:
    """A refusal of a write that did not come from the UI's own page, else ``None``."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        return _error(415, "unsupported_media_type", "a write takes a JSON body")
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin is not None and origin.rstrip("/") != own:
        return _error(403, "cross_origin", f"a write from {origin} is refused: not this UI")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return _error(403, "cross_origin", f"a write from a {site} page is refused")
    return None


async def _body(request: Request) -> dict[str, Any] | Response:
    """The request's ``{"event", "data", "key"}``, or the response refusing it."""
    refused = refuse_foreign(request)
    if refused is not None:
        return refused
    body = await request.body()
    if len(body) > _MAX_BODY:
        return _error(413, "too_large", f"the body is over {_MAX_BODY} bytes")
    try:
        payload: Any = json.loads(body)
    except ValueError as exc:
        return _error(400, "bad_request", f"the body is not JSON: {exc}")
    shape = 'the body is {"event": NAME, "data": JSON, "key": K}, key optional'
    if not isinstance(payload, dict) or not isinstance(payload.get("event"), str):
        return _error(400, "bad_request", shape)
    if payload.get("key") is not None and not isinstance(payload["key"], str):
        return _error(400, "bad_request", shape)
    return payload


async def send_event(runtime: Runtime, request: Request, run_id: str) -> Response:
    """Send the body's ``{"event", "data", "key"}`` to ``run_id``.

    Answers ``{"runId", "event", "key", "outcome"}``, or the refusal
    (``invalid_event_payload``, ``not_waiting``, ...).
    """
    payload = await _body(request)
    if isinstance(payload, Response):
        return payload
    try:
        result = await runtime.send(
            run_id, payload["event"], payload.get("data"), key=payload.get("key")
        )
    except EventRefusedError as exc:
        # A payload the schema refuses is the sender's to fix (400); a run that no
        # longer waits conflicts with the send (409).
        status = 400 if exc.code == "invalid_event_payload" else 409
        return _error(status, exc.code, exc.message)
    except InvalidInputError as exc:
        return _error(400, exc.code, exc.message)
    except ConfigError as exc:
        return _error(404 if exc.code == "run_not_found" else 400, exc.code, exc.message)
    return JSONResponse(
        {
            "runId": result.run_id,
            "event": result.event,
            "key": result.key,
            "outcome": result.outcome,
        }
    )
