"""``ArtifactStore``: files a run produces, each with a manifest, under ``artifacts/``.

Layout::

    artifacts/
      objects/<2 hex>/<sha256>        the content, named by its SHA-256; written once
      manifests/<artifactId>.json     one manifest per artifact (ArtifactManifest)

Content is stored by hash, so identical bytes are stored once however many artifacts
hold them. A put writes the content first (temp file, fsync, rename, fsync directory),
then the manifest the same way: a kill between the two leaves an object no manifest
names, never a manifest whose content is missing or torn. Reads check the content
against the manifest's hash and size; a mismatch is ``CorruptDataError`` naming the
file, never a silent wrong answer.

Replay. Inside a run, an artifact's id is a hash of (run id, step path, name). A step
that runs again (after a crash before its completion was committed, or as a retry) puts
to the same id: the same bytes change nothing, other bytes replace the manifest, since
the earlier attempt's result was never committed and nothing downstream saw it.
Outside a run every put is a new artifact.

File I/O runs inline, as the file KV store does (see ``storage._file``): the API is
synchronous, so a step or tool may call it whether it is sync or async, and so may the
command line. Objects that lost their last manifest are collected by ``sweep_objects``
(``Runtime.gc``), which spares any younger than its grace period.

Rejected: one directory per artifact holding content and manifest (identical bytes
stored again for every run that makes them); a single index file (every put would
rewrite it, and two processes would race on it).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from little_workflow.artifacts._manifest import (
    FORMAT_VERSION,
    ArtifactManifest,
    artifact_id_for,
    check_step_path,
    guess_media_type,
    validate_artifact_name,
)
from little_workflow.codec import dumps, loads
from little_workflow.errors import (
    ArtifactNotFoundError,
    CorruptDataError,
    InvalidInputError,
    InvalidValueError,
    StorageError,
)
from little_workflow.ids import validate_id
from little_workflow.platform._atomic import atomic_write
from little_workflow.storage._blobs_file import restore_aside, sweep_file

__all__ = ["ArtifactStore"]

_TEMP_PREFIX = ".~"  # atomic_write's temp files


class ArtifactStore:
    """The artifacts of one data directory (``<data_dir>/artifacts/``); see the module doc.

    ``clock`` gives ``created_at`` (seconds since the epoch); tests may pin it.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.root = Path(data_dir).absolute() / "artifacts"
        self._clock = clock

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    # --- paths ------------------------------------------------------------------------

    def _object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256[:2] / sha256

    def _manifest_path(self, artifact_id: str) -> Path:
        return self.root / "manifests" / f"{validate_id(artifact_id, what='artifact id')}.json"

    def _make_dirs(self, directory: Path) -> None:
        """Create ``directory`` (0700) and its missing parents, each made durable.

        A new directory's entry is durable only once its parent is fsynced; the content
        written into it next relies on that.
        """
        missing: list[Path] = []
        current = directory
        while not current.is_dir():
            missing.append(current)
            current = current.parent
        for path in reversed(missing):
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue  # another process made it; it fsyncs the parent itself
            except OSError as exc:
                raise StorageError(f"cannot create {str(path)!r}: {exc.strerror or exc}") from exc
            _fsync_dir(path.parent)

    # --- writing ----------------------------------------------------------------------

    def put(
        self,
        name: str,
        data: bytes,
        *,
        media_type: str | None = None,
        run_id: str | None = None,
        step_path: str | None = None,
    ) -> ArtifactManifest:
        """Store ``data`` as artifact ``name``; return its manifest once both are durable.

        ``media_type`` defaults to a guess from the name's suffix. With ``run_id`` (and
        ``step_path``) the id is derived from where it was made, so putting it again from
        the same place returns the same artifact (see the module doc). A bad name
        (``InvalidKeyError``), id (``InvalidIdError``) or media type
        (``InvalidValueError``) is refused before anything is written.
        """
        validate_artifact_name(name)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidValueError(
                f"artifact {name!r}: data must be bytes, not {type(data).__name__} "
                "(encode text first, e.g. text.encode())"
            )
        content = bytes(data)
        kind = guess_media_type(name, media_type)
        if run_id is not None:
            validate_id(run_id, what="run id")
        if step_path is not None:
            check_step_path(step_path)
        artifact_id = artifact_id_for(run_id, step_path, name)
        digest = hashlib.sha256(content).hexdigest()
        manifest_path = self._manifest_path(artifact_id)
        existing = self._load(manifest_path, artifact_id) if manifest_path.exists() else None
        if existing is not None and (existing.sha256, existing.media_type) == (digest, kind):
            self._write_object(digest, content)  # an object lost to a disk error is restored
            return existing
        self._write_object(digest, content)
        manifest = ArtifactManifest(
            artifact_id=artifact_id,
            name=name,
            sha256=digest,
            size=len(content),
            media_type=kind,
            run_id=run_id,
            step_path=step_path,
            created_at=self._clock(),
        )
        self._make_dirs(manifest_path.parent)
        stored = {"format": FORMAT_VERSION, **manifest.to_json()}
        atomic_write(manifest_path, dumps(stored).encode("utf-8") + b"\n")
        return manifest

    def _write_object(self, digest: str, content: bytes) -> None:
        path = self._object_path(digest)
        try:
            if path.stat().st_size == len(content):
                # The same bytes, stored whole (objects are only ever renamed in). Touched:
                # the collector spares objects younger than its grace period, and this
                # one is about to be named by a manifest again.
                os.utime(path)
                return
        except FileNotFoundError:
            pass  # never written, or swept since (see ``sweep_objects``): written below
        except OSError as exc:
            raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
        self._make_dirs(path.parent)
        atomic_write(path, content)

    # --- reading ----------------------------------------------------------------------

    def get(self, artifact_id: str) -> ArtifactManifest:
        """The manifest of ``artifact_id``; ``ArtifactNotFoundError`` if there is none."""
        path = self._manifest_path(artifact_id)
        if not path.exists():
            raise ArtifactNotFoundError(
                f"no artifact {artifact_id!r} in {str(self.root)!r}; "
                "'little-workflow artifacts' lists them"
            )
        return self._load(path, artifact_id)

    def _load(self, path: Path, artifact_id: str) -> ArtifactManifest:
        text = _read(path)
        manifest = ArtifactManifest.from_json(
            loads(text, where=f"artifact manifest {str(path)!r}"), source=repr(str(path))
        )
        if manifest.artifact_id != artifact_id:
            raise CorruptDataError(
                f"artifact manifest {str(path)!r} names artifact {manifest.artifact_id!r}"
            )
        return manifest

    def read_bytes(self, artifact_id: str) -> bytes:
        """The content of ``artifact_id``, checked against its manifest's SHA-256 and size.

        ``CorruptDataError`` naming the file if the content is missing or altered.
        """
        manifest = self.get(artifact_id)
        path = self._object_path(manifest.sha256)
        try:
            try:
                content = _read(path)
            except ArtifactNotFoundError:
                # A sweep killed while it had this object moved aside: put it back.
                restore_aside(path.parent, path.name)
                content = _read(path)
        except ArtifactNotFoundError as exc:
            raise CorruptDataError(
                f"the content of artifact {artifact_id!r} ({str(path)!r}) is missing"
            ) from exc
        if len(content) != manifest.size or hashlib.sha256(content).hexdigest() != manifest.sha256:
            raise CorruptDataError(
                f"the content of artifact {artifact_id!r} ({str(path)!r}) does not match its "
                f"manifest: expected {manifest.size} bytes with SHA-256 {manifest.sha256}"
            )
        return content

    def list(self, run_id: str | None = None) -> builtins.list[ArtifactManifest]:
        """Every artifact (or those ``run_id`` made), oldest first.

        A manifest that cannot be read raises ``CorruptDataError``: it is reported, not
        skipped.
        """
        if run_id is not None:
            validate_id(run_id, what="run id")
        directory = self.root / "manifests"
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {str(directory)!r}: {exc.strerror or exc}") from exc
        found: builtins.list[ArtifactManifest] = []
        for entry in names:
            if entry.startswith(_TEMP_PREFIX):
                continue  # a writer's temp file, in flight or left by a kill
            if not entry.endswith(".json"):
                raise CorruptDataError(f"unexpected file {str(directory / entry)!r}")
            manifest = self._load(directory / entry, entry.removesuffix(".json"))
            if run_id is None or manifest.run_id == run_id:
                found.append(manifest)
        found.sort(key=lambda manifest: (manifest.created_at, manifest.artifact_id))
        return found

    def export(
        self, artifact_id: str, dest_path: str | os.PathLike[str], *, overwrite: bool = False
    ) -> Path:
        """Write the (checked) content of ``artifact_id`` to ``dest_path``; the path written.

        A directory as ``dest_path`` receives a file with the artifact's name. The file is
        written atomically, mode 0600 (artifacts may hold what the run saw). An existing
        file is replaced only with ``overwrite``; else ``InvalidInputError``
        (``destination_exists``), and nothing is written.
        """
        manifest = self.get(artifact_id)
        content = self.read_bytes(artifact_id)
        dest = Path(dest_path)
        if dest.is_dir():
            dest = dest / manifest.name
        if dest.exists() and not overwrite:
            raise InvalidInputError(
                f"{str(dest)!r} exists; choose another destination or overwrite it",
                code="destination_exists",
            )
        atomic_write(dest, content)
        return dest

    # --- retention ---------------------------------------------------------------------

    def delete_runs(self, run_ids: Iterable[str]) -> builtins.list[ArtifactManifest]:
        """Delete the manifests of every artifact the named runs made; return them.

        The content objects stay until ``sweep_objects``: other artifacts may share them.
        A manifest that cannot be read raises ``CorruptDataError`` before any is deleted.
        """
        wanted = {validate_id(run_id, what="run id") for run_id in run_ids}
        doomed = [manifest for manifest in self.list() if manifest.run_id in wanted]
        directory = self.root / "manifests"
        for manifest in doomed:
            path = self._manifest_path(manifest.artifact_id)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot delete {str(path)!r}: {exc.strerror or exc}") from exc
        if doomed:
            _fsync_dir(directory)
        return doomed

    def sweep_objects(self, *, grace: float) -> builtins.list[tuple[str, int]]:
        """Delete content objects no manifest names, last written ``grace`` seconds ago or
        more; return their (SHA-256, size).

        A put writes (or touches) its object before its manifest, so an object younger
        than ``grace`` may belong to a put in flight, and is spared. Each object is moved
        aside before it is judged, so a put that touches it meanwhile either shows in its
        time (it is put back) or finds it gone and writes it again.
        """
        named = {manifest.sha256 for manifest in self.list()}
        objects = self.root / "objects"
        cutoff = time.time() - grace
        swept: builtins.list[tuple[str, int]] = []
        try:
            shards = sorted(os.listdir(objects))
        except FileNotFoundError:
            return swept
        except OSError as exc:
            raise StorageError(f"cannot list {str(objects)!r}: {exc.strerror or exc}") from exc
        for shard_name in shards:
            shard = objects / shard_name
            restore_aside(shard)
            try:
                entries = sorted(os.listdir(shard))
            except (NotADirectoryError, FileNotFoundError):
                continue
            except OSError as exc:
                raise StorageError(f"cannot list {str(shard)!r}: {exc.strerror or exc}") from exc
            removed = False
            for name in entries:
                if name.startswith(_TEMP_PREFIX) or name in named:
                    continue  # a temp file, or one a killed sweep left aside (put back above)
                try:
                    stat = sweep_file(shard / name, cutoff)
                except OSError as exc:
                    raise StorageError(f"cannot sweep {str(shard / name)!r}: {exc}") from exc
                if stat is not None:
                    swept.append((name, stat.st_size))
                    removed = True
            if removed:
                _fsync_dir(shard)
        return swept

    def find(self, run_id: str, name: str) -> ArtifactManifest | None:
        """The latest artifact named ``name`` that ``run_id`` made, if any."""
        named = [manifest for manifest in self.list(run_id) if manifest.name == name]
        return named[-1] if named else None


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError as exc:
        raise ArtifactNotFoundError(f"{str(path)!r} does not exist") from exc
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StorageError(f"cannot open {str(directory)!r}: {exc.strerror or exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some filesystems cannot fsync a directory; the data is as durable as they allow.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise StorageError(f"cannot sync {str(directory)!r}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
