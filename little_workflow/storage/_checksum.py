"""The checksum of a stored event: computed at append, verified on every read.

A flipped byte inside an event's JSON string leaves valid JSON, which would be read back
as data, and a resume would replay it as the step's answer. So every row of ``events``
(SQLite and PostgreSQL) carries ``checksum``: a 32-bit value over every column of the
row, checked on every read; a mismatch is ``CorruptDataError`` naming the run and seq.

What it is: ``CRC32(run_id NUL type NUL data) XOR fold(seq, ts)``, where ``CRC32`` is
zlib's (over the UTF-8 bytes) and ``fold`` mixes the seq and the 64 bits of the
timestamp (an IEEE double) into 32 bits with shifts and XORs. The CRC part is computed
by the writer in Python on both backends; the fold part by the writer on SQLite and by
``lw_append()`` on PostgreSQL, where the seq and the timestamp are decided by the server
(integer operations SQL has, so the same value comes out on both sides).

Why CRC32: it is what finds accidental change (a bit flipped on disk or in memory, a
byte overwritten by a stray write, a row edited by hand): every change confined to 32
consecutive bits of the hashed bytes (so any one changed byte) is detected, and any other
change with probability 1 - 2^-32. It costs a few instructions per byte in zlib.
Rejected: a cryptographic hash (SHA-256, BLAKE2): 5-15 times the instructions, and no
defence gained against deliberate tampering, since anyone who can rewrite a row can
recompute any unkeyed checksum beside it; a keyed MAC needs a key, and a key kept beside
the data protects nothing. A change to the seq or the timestamp alone flips bits of the
fold one to one, so it is detected too; a change to both that cancels in the fold is
not (two independent errors, in two numeric columns).

Rows written before checksums existed hold ``NULL``: they are read unverified. Within one
read, a row without a checksum after a row with one is ``CorruptDataError`` too: once a
run's rows carry checksums every later one does, so a checksum turned into ``NULL`` (one
bit of SQLite's record header) is not a way around the check.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final

from little_workflow.errors import CorruptDataError
from little_workflow.events import RecordedEvent, decode_event

__all__ = [
    "FOLD_SQL",
    "MASK",
    "Row",
    "check_row",
    "checked_records",
    "data_crc",
    "event_checksum",
    "fold",
    "time_fold",
]

#: Checksums are unsigned 32-bit.
MASK: Final = 0xFFFFFFFF
_DOUBLE: Final = struct.Struct(">d")
_QUAD: Final = struct.Struct(">q")

#: ``fold(seq, ts)`` in SQL, for ``lw_append``: ``float8send`` gives the timestamp's 8
#: bytes big-endian, read back as a signed bigint; ``>>`` on bigint is arithmetic, as
#: Python's on a negative int, so both sides agree bit for bit.
FOLD_SQL: Final = (
    "((('x' || encode(float8send({ts}), 'hex'))::bit(64)::bigint"
    " # ((('x' || encode(float8send({ts}), 'hex'))::bit(64)::bigint) >> 32)"
    " # {seq} # ({seq} >> 32)) & 4294967295)"
)


def data_crc(run_id: str, type_name: str, data: str) -> int:
    """The CRC part: over ``run_id``, the event type and its JSON, as stored.

    One string, one encoding, one call: this runs for every event appended. A lone
    surrogate is hashed as ``surrogatepass`` encodes it, so this stays total; the
    database's own encoding refuses it (``InvalidValueError``), as before checksums.
    """
    text = f"{run_id}\0{type_name}\0{data}"
    try:
        raw = text.encode()
    except UnicodeEncodeError:
        raw = text.encode(errors="surrogatepass")
    return zlib.crc32(raw)


def time_fold(ts: float) -> int:
    """The timestamp's part of ``fold``: the same for every event of one append."""
    bits: int = _QUAD.unpack(_DOUBLE.pack(ts))[0]
    return bits ^ (bits >> 32)


def fold(seq: int, ts: float) -> int:
    """The seq and the timestamp's 64 bits, folded into 32 (see ``FOLD_SQL``)."""
    return (time_fold(ts) ^ seq ^ (seq >> 32)) & MASK


def event_checksum(run_id: str, seq: int, type_name: str, ts: float, data: str) -> int:
    """The checksum of one row of ``events``."""
    return data_crc(run_id, type_name, data) ^ fold(seq, ts)


#: A row of ``events`` as read: seq, type, ts, data, checksum.
Row = tuple[int, str, float, str, int | None]


def check_row(
    run_id: str, row: Row, *, expected_seq: int, checked_before: bool, where: str
) -> bool:
    """Raise ``CorruptDataError`` unless the row is the ``expected_seq`` one and matches its
    checksum.

    Returns whether the row carried one. ``checked_before``: an earlier row of this read
    did, so this one must too (see the module docstring). A run's seqs are 1, 2, 3, ...
    with no gap (both backends reserve them under a lock), so a row missing from the
    middle of the log is corrupt data too, not a shorter history.
    """
    seq, type_name, ts, data, checksum = row
    if seq != expected_seq:
        raise CorruptDataError(
            f"run {run_id!r} seq {expected_seq} in {where}: the event is missing (the next "
            f"one stored is seq {seq}); the log was changed after it was written"
        )
    if checksum is None:
        if checked_before:
            raise CorruptDataError(
                f"run {run_id!r} seq {seq} in {where}: the event has no checksum, but the "
                "events before it have one; the row was changed after it was written"
            )
        return False
    found = event_checksum(run_id, seq, type_name, ts, data)
    if found != checksum:
        raise CorruptDataError(
            f"run {run_id!r} seq {seq} in {where}: the stored event does not match its "
            f"checksum (stored {checksum:08x}, computed {found:08x}); the row was changed "
            "after it was written. Nothing was read from it: restore the store from a "
            "backup, or delete the run"
        )
    return True


def checked_records(
    run_id: str, rows: Sequence[Row], *, after: int, where: str
) -> list[RecordedEvent]:
    """``rows`` (a read of ``run_id``'s events with ``seq > after``, in order) checked and
    decoded; the read of every backend's event log ends here.

    Each row is checked before it is decoded, and a changed one raises before anything is
    returned, so no caller ever sees part of a log with corrupt data in it.
    """
    # ``check_row``'s checks, inlined for the common row (the next seq, a checksum that
    # matches); any other row goes through ``check_row`` for its error. A page of 1,000
    # events costs 1.1 ms less this way (docs/performance.md, "One run of 100,000
    # events"): no call per row, and the timestamp's fold computed once per append (the
    # events of one append share their ``ts``), not once per event.
    checked = False
    records: list[RecordedEvent] = []
    prefix = f"{run_id}\0"
    last_ts: float | None = None
    at = 0
    crc32 = zlib.crc32
    for expected, row in enumerate(rows, start=max(after, 0) + 1):
        seq, type_name, ts, data, checksum = row
        if ts != last_ts:
            last_ts, at = ts, time_fold(ts)
        try:
            raw = f"{prefix}{type_name}\0{data}".encode()
        except UnicodeEncodeError:
            raw = b""  # a lone surrogate: ``check_row`` hashes it as ``data_crc`` does
        if (
            seq != expected
            or checksum is None
            or not raw
            or (crc32(raw) ^ at ^ seq ^ (seq >> 32)) & MASK != checksum
        ):
            checked = check_row(
                run_id, row, expected_seq=expected, checked_before=checked, where=where
            )
        else:
            checked = True
        records.append(
            RecordedEvent(
                run_id=run_id,
                seq=seq,
                ts=ts,
                event=decode_event(type_name, data, where=f"run {run_id!r} seq {seq}"),
            )
        )
    return records
