"""Key and prefix rules shared by every ``StorageAdapter`` backend.

One set of rules for all backends, so a key accepted by the in-memory store is accepted
by the file store and the databases, and a hostile key is refused everywhere before any
backend sees it.

A key is a non-empty string of at most ``MAX_KEY_LENGTH`` characters, made of segments
separated by ``/``. Any character is allowed (``:``, spaces, non-ASCII) except control
characters (NUL included) and lone surrogates; no segment may be empty, ``.`` or ``..``,
so ``/etc/passwd``, ``../x``, ``a//b`` and ``a/`` are refused. The file backend maps
segments to directories; these rules are what make "a key can never resolve outside
``root``" true by construction rather than by a path check after the fact.
"""

from __future__ import annotations

import re

from little_workflow.errors import InvalidKeyError
from little_workflow.errors import shown as _shown

__all__ = ["MAX_KEY_LENGTH", "prefix_upper_bound", "validate_key", "validate_prefix"]

MAX_KEY_LENGTH = 1024
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidKeyError(f"storage {what} must be a string, not {type(value).__name__}")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidKeyError(
            f"storage {what} {_shown(value)} is {len(value)} characters; "
            f"the limit is {MAX_KEY_LENGTH}"
        )
    match = _CONTROL_RE.search(value)
    if match is not None:
        raise InvalidKeyError(
            f"storage {what} {_shown(value)} contains the control character "
            f"{match.group()!r} at position {match.start()}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(
            f"storage {what} {_shown(value)} is not valid Unicode (a lone surrogate "
            f"at position {exc.start})"
        ) from exc
    return value


def validate_key(key: object) -> str:
    """Return ``key`` if it is acceptable, else raise ``InvalidKeyError`` saying why."""
    text = _check_text(key, "key")
    if not text:
        raise InvalidKeyError("storage key is empty")
    if text.startswith("/"):
        raise InvalidKeyError(f"storage key {_shown(text)} is absolute (starts with '/')")
    for segment in text.split("/"):
        if segment in ("", ".", ".."):
            name = "an empty segment" if not segment else f"a {segment!r} segment"
            raise InvalidKeyError(
                f"storage key {_shown(text)} has {name}; keys are '/'-separated names "
                "and may not be empty, '.' or '..'"
            )
    return text


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it can be listed; ``""`` lists everything.

    A prefix need not be a valid key (``"runs/"`` is a fine prefix), but it obeys the
    character rules, so a NUL or a surrogate is refused the same way everywhere.
    """
    return _check_text(prefix, "prefix")


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with ``prefix``.

    Byte-wise (UTF-8) order and code-point order agree, so ``key >= prefix AND key <
    bound`` is an exact, index-friendly prefix match in SQLite and in PostgreSQL with
    the ``C`` collation. ``None`` when no bound exists (empty prefix, or one made only of
    the highest code point): the caller then filters by the prefix alone.
    """
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return None
    last = ord(stripped[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # skip the surrogate block, which cannot be stored
        last = 0xE000
    return stripped[:-1] + chr(last)
