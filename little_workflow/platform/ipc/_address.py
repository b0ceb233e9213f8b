"""``IpcAddress``: where an IPC server listens, parsed once at the edge.

Text forms: ``unix:/path/to/socket``, ``tcp://127.0.0.1:7000``, ``ws://127.0.0.1:7000``
(IPv6 hosts in brackets: ``tcp://[::1]:7000``). Port 0 asks the system for a free port;
a started server reports the bound one.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Literal

from little_workflow.errors import InvalidAddressError

__all__ = ["MAX_UNIX_PATH_BYTES", "IpcAddress", "TransportKind"]

TransportKind = Literal["unix", "tcp", "ws"]

#: ``sun_path`` is 108 bytes on Linux, one of them the terminating NUL.
MAX_UNIX_PATH_BYTES = 107


def _check_host(host: object) -> str:
    if not isinstance(host, str) or not host:
        raise InvalidAddressError("an IPC host must be a non-empty string")
    if any(ch in host for ch in "/[]@ ") or not host.isprintable():
        raise InvalidAddressError(f"invalid IPC host {host!r}")
    return host


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidAddressError(f"an IPC port must be an integer from 0 to 65535, not {port!r}")
    return port


@dataclass(frozen=True, slots=True, kw_only=True)
class IpcAddress:
    """A Unix socket path, or a TCP or WebSocket host and port.

    Build one with ``IpcAddress.unix(path)``, ``.tcp(host, port)``, ``.ws(host, port)``
    or ``IpcAddress.parse(text)``; ``str()`` gives the text form back.
    """

    kind: TransportKind
    path: str | None = None
    host: str | None = None
    port: int | None = None

    @classmethod
    def unix(cls, path: str | os.PathLike[str]) -> IpcAddress:
        """A Unix socket at ``path`` (at most 107 bytes, the kernel's limit)."""
        text = os.fspath(path)
        if not isinstance(text, str) or not text:
            raise InvalidAddressError("a Unix socket path must be a non-empty string")
        if "\x00" in text:
            raise InvalidAddressError(f"a Unix socket path may not contain NUL: {text!r}")
        size = len(text.encode("utf-8", "surrogateescape"))
        if size > MAX_UNIX_PATH_BYTES:
            raise InvalidAddressError(
                f"the Unix socket path {text!r} is {size} bytes; the limit is "
                f"{MAX_UNIX_PATH_BYTES}. Use a shorter directory."
            )
        return cls(kind="unix", path=text)

    @classmethod
    def tcp(cls, host: str = "127.0.0.1", port: int = 0) -> IpcAddress:
        """TCP at ``host:port`` (loopback unless the server has a token)."""
        return cls(kind="tcp", host=_check_host(host), port=_check_port(port))

    @classmethod
    def ws(cls, host: str = "127.0.0.1", port: int = 0) -> IpcAddress:
        """A WebSocket server at ``host:port`` (loopback unless the server has a token)."""
        return cls(kind="ws", host=_check_host(host), port=_check_port(port))

    @classmethod
    def parse(cls, text: str) -> IpcAddress:
        """Parse ``unix:/path``, ``tcp://host:port`` or ``ws://host:port[/]``."""
        if not isinstance(text, str):
            raise InvalidAddressError(f"an IPC address must be a string, not {type(text).__name__}")
        if text.startswith("unix:"):
            return cls.unix(text[len("unix:") :])
        for scheme in ("tcp", "ws"):
            lead = scheme + "://"
            if not text.startswith(lead):
                continue
            rest = text[len(lead) :]
            if scheme == "ws" and rest.endswith("/"):
                rest = rest[:-1]
            if rest.startswith("["):
                host, sep, port_text = rest[1:].partition("]:")
            else:
                host, sep, port_text = rest.rpartition(":")
            if not sep or not port_text.isascii() or not port_text.isdigit():
                raise InvalidAddressError(f"invalid IPC address {text!r}: expected {lead}HOST:PORT")
            make = cls.tcp if scheme == "tcp" else cls.ws
            return make(host, int(port_text))
        raise InvalidAddressError(
            f"invalid IPC address {text!r}: expected unix:/path, tcp://host:port or ws://host:port"
        )

    @property
    def is_loopback(self) -> bool:
        """Whether only this machine can reach the address (always true for ``unix``)."""
        if self.kind == "unix":
            return True
        assert self.host is not None
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name other than localhost may resolve anywhere

    def with_port(self, port: int) -> IpcAddress:
        """The same TCP or WebSocket address with another port (the bound one)."""
        assert self.kind != "unix"
        return IpcAddress(kind=self.kind, host=self.host, port=_check_port(port))

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{self.kind}://{host}:{self.port}"
