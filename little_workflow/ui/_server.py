"""``serve()``: the UI on uvicorn, bound to 127.0.0.1 unless told otherwise.

The socket is bound and listening before the URL is printed, so whoever reads the URL
(a person, a test, a script) can connect at once; with port 0 the kernel picks a free
port and the printed URL names it.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable

from little_workflow.ui._app import create_app
from little_workflow.ui._security import is_loopback
from little_workflow.views import PriceTable

__all__ = ["bind", "serve", "url_for"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port). ``OSError`` if taken."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_for(host: str, port: int, token: str | None) -> str:
    """The URL to open: the host as given (IPv6 in brackets), and the token if any."""
    name = host.strip("[]")
    shown = f"[{name}]" if ":" in name else name
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(
    data_dir: str | os.PathLike[str],
    *,
    store: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    prices: PriceTable | None = None,
    announce: Callable[[str], None] = print,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the UI until interrupted. ``announce`` is given one line naming the URL.

    Bound to anything but a loopback address, the UI requires a token: ``token``, or a
    new random one (printed in the URL). ``on_ready`` gets the URL once the socket
    listens (to open a browser, say). ``prices`` costs the model usage the pages show.
    """
    import uvicorn

    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(32)
    sock = bind(host, port)
    url = url_for(host, sock.getsockname()[1], token)
    app = create_app(data_dir, store=store, token=token, prices=prices)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Open run pages hold event streams; do not wait for them on shutdown.
        timeout_graceful_shutdown=1,
    )
    announce(f"little-workflow ui: {url}")
    if on_ready is not None:
        on_ready(url)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
