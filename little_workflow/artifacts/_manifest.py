"""``ArtifactManifest`` and the checks on what goes into one (names, media types, paths).

A manifest is the artifact: its content file is only reachable through it. Names are
validated as file names (``export`` to a directory uses the name) even though nothing is
stored under them, so an artifact made anywhere can be exported anywhere.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.errors import (
    CorruptDataError,
    InvalidKeyError,
    InvalidValueError,
    SchemaVersionError,
)
from little_workflow.errors import shown as _shown
from little_workflow.ids import is_valid_id, new_id
from little_workflow.storage import validate_prefix

__all__ = [
    "FORMAT_VERSION",
    "ArtifactManifest",
    "artifact_id_for",
    "check_step_path",
    "guess_media_type",
    "validate_artifact_name",
]

#: The manifest format this program writes; a manifest with another is refused.
FORMAT_VERSION = 1

#: What a file name may take on Linux, in UTF-8 bytes.
MAX_NAME_BYTES = 255
#: As long as a storage key: a step path inside a map inside a session stays well below.
MAX_STEP_PATH_LENGTH = 1024
# type "/" subtype, then parameters: RFC 6838's restricted names, loosely.
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(;.*)?")
_OCTET_STREAM = "application/octet-stream"


def _check_text(value: object, what: str) -> str:
    """``value`` if it is text a storage key could hold (the same rules: no control
    character, valid Unicode, at most 1,024 characters), else ``InvalidValueError``."""
    try:
        return validate_prefix(value)
    except InvalidKeyError as exc:
        raise InvalidValueError(f"{what} is not acceptable: {exc.message}") from exc


def validate_artifact_name(name: object) -> str:
    """Return ``name`` if it can name an artifact, else ``InvalidKeyError`` saying why.

    A name is one file name: not empty, not ``.`` or ``..``, no ``/`` or ``\\``, no control
    character (NUL included), valid Unicode, at most 255 UTF-8 bytes.
    """
    if not isinstance(name, str):
        raise InvalidKeyError(
            f"an artifact name must be a string, not {type(name).__name__}",
            code="invalid_artifact_name",
        )
    try:
        _check_text(name, "artifact name")
    except InvalidValueError as exc:
        raise InvalidKeyError(exc.message, code="invalid_artifact_name") from exc
    reason = None
    if name in ("", ".", ".."):
        reason = "it is empty" if not name else f"it is {name!r}"
    elif "/" in name or "\\" in name:
        reason = "it contains a path separator; an artifact name is a file name, not a path"
    elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
        reason = f"it is longer than {MAX_NAME_BYTES} bytes"
    if reason is not None:
        raise InvalidKeyError(
            f"invalid artifact name {_shown(name)}: {reason}", code="invalid_artifact_name"
        )
    return name


def check_step_path(step_path: object) -> str:
    """A step path as recorded in a manifest: text without control characters, bounded."""
    text = _check_text(step_path, "step path")
    if not text or len(text) > MAX_STEP_PATH_LENGTH:
        raise InvalidValueError(
            f"step path {_shown(text)} must be 1 to {MAX_STEP_PATH_LENGTH} characters"
        )
    return text


def guess_media_type(name: str, media_type: str | None) -> str:
    """``media_type`` checked, or the one ``mimetypes`` guesses from the name's suffix."""
    if media_type is None:
        guessed, _encoding = mimetypes.guess_type(name, strict=False)
        return guessed or _OCTET_STREAM
    _check_text(media_type, "media type")
    if len(media_type) > MAX_NAME_BYTES or _MEDIA_TYPE.fullmatch(media_type) is None:
        raise InvalidValueError(
            f"media type {_shown(media_type)} is not of the form type/subtype "
            "(e.g. 'text/markdown')"
        )
    return media_type


def artifact_id_for(run_id: str | None, step_path: str | None, name: str) -> str:
    """The id of artifact ``name`` made at ``step_path`` of ``run_id``.

    Inside a run the id is a hash of where the artifact was made, so a step that runs
    again after a crash (or a retry) puts to the same id instead of adding a second
    artifact. Outside a run nothing runs again, and every put is a new artifact.
    """
    if run_id is None:
        return new_id("art")
    where = "\x00".join((run_id, step_path or "", name))
    return "art_" + hashlib.sha256(where.encode("utf-8")).hexdigest()[:26]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactManifest:
    """What is known about one artifact: its content's hash and size, and who made it."""

    #: ``art_`` + 26 characters; derived from run, step path and name inside a run.
    artifact_id: str
    #: The file name it was given (``report.md``).
    name: str
    #: The SHA-256 of the content, 64 lowercase hex digits.
    sha256: str
    #: The content's size in bytes.
    size: int
    #: ``text/markdown``, ...; guessed from the name when not given.
    media_type: str
    #: The run that made it, if one did.
    run_id: str | None
    #: Where in that run: a step path, or ``<session>/<tool call path>`` for an agent's tool.
    step_path: str | None
    #: Seconds since the epoch when this version of it was written.
    created_at: float

    def to_json(self) -> dict[str, JsonValue]:
        """The manifest as stored and printed: camelCase keys."""
        return {
            "artifactId": self.artifact_id,
            "name": self.name,
            "sha256": self.sha256,
            "size": self.size,
            "mediaType": self.media_type,
            "runId": self.run_id,
            "stepPath": self.step_path,
            "createdAt": self.created_at,
        }

    @classmethod
    def from_json(cls, value: object, *, source: str) -> ArtifactManifest:
        """Rebuild a manifest from its stored form; ``CorruptDataError`` naming ``source``."""
        if not isinstance(value, dict):
            raise CorruptDataError(f"artifact manifest {source} is not a JSON object")
        version = value.get("format")
        if type(version) is not int:
            # No version at all is damage, not a format from another release.
            raise CorruptDataError(
                f"artifact manifest {source} has no format version (format={version!r}); "
                "it is not a manifest this program writes"
            )
        if version != FORMAT_VERSION:
            raise SchemaVersionError(
                f"artifact manifest {source} has format {version!r}; this program reads "
                f"format {FORMAT_VERSION}"
            )
        try:
            manifest = cls(
                artifact_id=_field(value, "artifactId", str),
                name=_field(value, "name", str),
                sha256=_field(value, "sha256", str),
                size=_field(value, "size", int),
                media_type=_field(value, "mediaType", str),
                run_id=_optional(value, "runId"),
                step_path=_optional(value, "stepPath"),
                created_at=float(_field(value, "createdAt", (int, float))),
            )
        except (KeyError, TypeError, OverflowError) as exc:  # OverflowError: float(10**400)
            raise CorruptDataError(f"artifact manifest {source} is malformed: {exc}") from exc
        if (
            not is_valid_id(manifest.artifact_id)
            or re.fullmatch(r"[0-9a-f]{64}", manifest.sha256) is None
            or manifest.size < 0
        ):
            raise CorruptDataError(f"artifact manifest {source} holds an invalid id, hash or size")
        # The name becomes a file name on export (and the media type a header in the UI):
        # a manifest is checked like a put, so '../x' cannot leave the export directory.
        try:
            validate_artifact_name(manifest.name)
            guess_media_type(manifest.name, manifest.media_type)
        except (InvalidKeyError, InvalidValueError) as exc:
            raise CorruptDataError(f"artifact manifest {source}: {exc.message}") from exc
        return manifest


def _field(value: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    found = value[key]
    if not isinstance(found, kind) or isinstance(found, bool):
        raise TypeError(f"{key!r} is a {type(found).__name__}")
    return found


def _optional(value: dict[str, Any], key: str) -> str | None:
    found = value.get(key)
    if found is not None and not isinstance(found, str):
        raise TypeError(f"{key!r} is a {type(found).__name__}")
    return found
