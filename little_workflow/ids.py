"""Ids: generation and validation.

An id that becomes part of a path or a storage key (run ids, outer-loop ids, execution
ids, handle ids) must match ``[A-Za-z0-9][A-Za-z0-9._:-]*`` extended with ``_``, contain
no ``..``, and be at most 200 characters. The underscore is accepted because the seed's
own ids use it (``run_abc123``, ``cand_123``) and it is inert in paths and keys.

Generated ids are ``<prefix>_<26 chars>``: 48 bits of milliseconds then 80 random bits in
lowercase Crockford base32, so ids sort by creation time, which makes run listings and
key scans come out in a sensible order without a separate timestamp.
"""

from __future__ import annotations

import os
import re
import time

from little_workflow.errors import InvalidIdError, shown

__all__ = ["MAX_ID_LENGTH", "is_valid_id", "new_id", "validate_id"]

MAX_ID_LENGTH = 200
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,15}")
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is an acceptable id (see the module docstring)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and ".." not in value
        and _ID_RE.fullmatch(value) is not None
    )


def validate_id(value: object, *, what: str = "id") -> str:
    """Return ``value`` if it is an acceptable id, else raise ``InvalidIdError``.

    ``what`` names the id in the message ("run id", "outer loop id", ...).
    """
    if is_valid_id(value):
        assert isinstance(value, str)
        return value
    if not isinstance(value, str):
        reason = f"it is a {type(value).__name__}, not a string"
    elif not value:
        reason = "it is empty"
    elif len(value) > MAX_ID_LENGTH:
        reason = f"it is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
    elif ".." in value:
        reason = "it contains '..'"
    else:
        reason = "it must start with a letter or digit and contain only letters, digits and . _ : -"
    raise InvalidIdError(f"invalid {what} {shown(value)}: {reason}")


def _encode_base32(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_CROCKFORD[number & 31])
        number >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """A fresh, time-ordered id such as ``run_01jd3k5x0r8g2y7s9v4q6m1n0p``.

    ``prefix`` is a short lowercase word (``run``, ``ol``, ``wv``, ``exec``).
    """
    if _PREFIX_RE.fullmatch(prefix) is None:
        raise InvalidIdError(f"invalid id prefix {prefix!r}: use 1-16 lowercase letters/digits")
    millis = time.time_ns() // 1_000_000
    randomness = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode_base32(millis, 10)}{_encode_base32(randomness, 16)}"
