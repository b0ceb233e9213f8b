"""Store URLs: parsed once, at the edge, into a ``StoreSpec``; nothing deeper sniffs strings.

==============================  ============================================
``memory:``                     in-memory (a new, empty store per open)
``file:///abs/root``            file storage under a directory (KV only)
``file:relative/root``
``sqlite:///relative/db.sqlite``  SQLite file (WAL); a directory, or a path ending in
``sqlite:////abs/db.sqlite``      ``/``, means ``little-workflow.db`` inside it
``postgresql://user@host/db``   PostgreSQL; ``?schema=NAME`` picks the schema
==============================  ============================================

SQLite takes ``?synchronous=FULL|NORMAL`` and ``?busy_timeout=SECONDS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from little_workflow.errors import InvalidStoreUrlError

__all__ = ["SQLITE_DEFAULT_FILENAME", "StoreSpec", "parse_store_url"]

SQLITE_DEFAULT_FILENAME = "little-workflow.db"
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
BackendKind = Literal["memory", "file", "sqlite", "postgres"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSpec:
    """A parsed store URL: which backend, where, and its options."""

    kind: BackendKind
    #: The directory (file) or database file (sqlite); ``None`` otherwise.
    path: Path | None = None
    #: The libpq connection string without our own options (postgres only).
    conninfo: str | None = None
    #: The PostgreSQL schema that holds the tables (postgres only).
    schema: str = "little_workflow"
    #: ``FULL`` (fsync every commit) or ``NORMAL`` (sqlite only).
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    #: Seconds a writer waits for a busy database before it gives up (sqlite only).
    busy_timeout: float = 10.0

    @property
    def blob_dir(self) -> Path | None:
        """Where a SQLite store keeps its blobs: ``blobs/`` beside a database with the
        default name (``.little-workflow/blobs/``), ``<name>.blobs/`` beside any other, so
        two databases in one directory never share (and collect) each other's blobs."""
        if self.kind != "sqlite" or self.path is None:
            return None
        if self.path.name == SQLITE_DEFAULT_FILENAME:
            return self.path.parent / "blobs"
        return self.path.with_name(f"{self.path.name}.blobs")


def _local_path(raw: str, url: str) -> Path:
    if not raw:
        raise InvalidStoreUrlError(f"store URL {url!r} has no path")
    if "\x00" in raw:
        raise InvalidStoreUrlError(f"store URL {url!r} contains a NUL character")
    return Path(raw)


def parse_store_url(url: str) -> StoreSpec:
    """Parse a store URL (see the module docstring) or raise ``InvalidStoreUrlError``."""
    if not isinstance(url, str) or not url:
        raise InvalidStoreUrlError("store URL is empty")
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "memory":
        return StoreSpec(kind="memory")
    if scheme == "file":
        raw_root = rest[2:] if rest.startswith("//") else rest
        return StoreSpec(kind="file", path=_local_path(raw_root.split("?", 1)[0], url))
    if scheme == "sqlite":
        if not rest.startswith("///"):
            raise InvalidStoreUrlError(
                f"store URL {url!r}: write sqlite:///relative/path or sqlite:////absolute/path"
            )
        raw_path, _, raw_query = rest[3:].partition("?")
        options = dict(parse_qsl(raw_query, keep_blank_values=True))
        path = _local_path(raw_path, url)
        if raw_path.endswith("/") or path.is_dir():
            path = path / SQLITE_DEFAULT_FILENAME
        synchronous = options.pop("synchronous", "FULL").upper()
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidStoreUrlError(
                f"store URL {url!r}: synchronous must be FULL or NORMAL, not {synchronous!r}"
            )
        busy_raw = options.pop("busy_timeout", "10")
        try:
            busy_timeout = float(busy_raw)
        except ValueError:
            busy_timeout = -1.0
        if not 0 <= busy_timeout <= 3600:
            raise InvalidStoreUrlError(
                f"store URL {url!r}: busy_timeout must be seconds between 0 and 3600"
            )
        if options:
            raise InvalidStoreUrlError(f"store URL {url!r}: unknown option(s) {sorted(options)}")
        return StoreSpec(
            kind="sqlite",
            path=path,
            synchronous="FULL" if synchronous == "FULL" else "NORMAL",
            busy_timeout=busy_timeout,
        )
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        schema = params.pop("schema", "little_workflow")
        if _SCHEMA_RE.fullmatch(schema) is None:
            raise InvalidStoreUrlError(
                f"store URL: schema {schema!r} must be a lowercase SQL identifier"
            )
        conninfo = urlunsplit(
            ("postgresql", parts.netloc, parts.path, urlencode(params), parts.fragment)
        )
        return StoreSpec(kind="postgres", conninfo=conninfo, schema=schema)
    known = "memory:, file:, sqlite:, postgresql:"
    raise InvalidStoreUrlError(f"store URL {url!r} has an unknown scheme {scheme!r}; use {known}")
