"""Who may talk to the UI, and what a browser may do with its pages.

Run logs hold prompts, inputs and tool results, so the UI is closed by default:

* **Without a token** (the default, on 127.0.0.1) it answers only requests whose
  ``Host`` is a loopback name. Listening on loopback alone does not stop a web page in
  the user's browser from reaching it by DNS rebinding (a hostile name that resolves to
  127.0.0.1); checking ``Host`` does.
* **With a token** (required when bound to any other address) every request must carry
  it: ``Authorization: Bearer <token>``, the ``lw_ui_token`` cookie, or ``?token=`` on
  a page URL. A page opened with ``?token=`` gets the cookie (HttpOnly, SameSite=Strict)
  and is redirected to the same URL without it, so the token does not stay in the
  address bar or the history. Tokens are compared in constant time.

Every response carries a Content-Security-Policy that allows only the UI's own scripts
and styles: even if run data reached the page as markup, no script in it would run.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["TOKEN_COOKIE", "Guard", "is_loopback"]

TOKEN_COOKIE = "lw_ui_token"  # noqa: S105 - the cookie's name, not a secret

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is loopback."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else ""
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware: the host or token check, then the security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = None if token is None else token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._check(scope)
        if refused is not None:
            await _secured(refused)(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_secured)

    def _check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        if self.token is None:
            if is_loopback(_hostname(headers.get("host", ""))):
                return None
            return PlainTextResponse(
                "This UI answers only to localhost (start it with --token to serve other names).\n",
                status_code=403,
            )
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        from_query = query.get("token")
        for supplied in (
            _bearer(headers.get("authorization", "")),
            _cookie(headers.get("cookie", "")),
            from_query,
        ):
            if supplied is not None and hmac.compare_digest(supplied.encode("utf-8"), self.token):
                page = not scope["path"].startswith("/api/")
                if from_query is not None and supplied is from_query and page:
                    return _keep_in_cookie(scope, query, from_query)
                return None
        return PlainTextResponse(
            "A token is required: open the URL the server printed, or send "
            "'Authorization: Bearer <token>'.\n",
            status_code=401,
            headers={"www-authenticate": "Bearer"},
        )


def _bearer(value: str) -> str | None:
    scheme, _, credentials = value.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials else None


def _cookie(value: str) -> str | None:
    for part in value.split(";"):
        name, _, content = part.strip().partition("=")
        if name == TOKEN_COOKIE and content:
            return content
    return None


def _keep_in_cookie(scope: Scope, query: dict[str, str], token: str) -> Response:
    query.pop("token")
    target = scope["path"] + (f"?{urlencode(query)}" if query else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _secured(response: Response) -> Response:
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    return response
