"""Commands over what runs keep beside their logs: ``artifacts``, ``export-artifact``, ``memory``.

Listings print a table for a person, or with ``--json`` one JSON document for a script
(the manifests' and entries' own camelCase form).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from little_workflow.cli._inspect import _when
from little_workflow.cli._main import EXIT_INVALID, Options, execute, print_json
from little_workflow.cli._runs import _runtime
from little_workflow.cli._tables import print_table

if TYPE_CHECKING:
    from little_workflow.artifacts import ArtifactManifest
    from little_workflow.memory import MemoryEntry

# A value longer than this is cut in a table; --json prints it whole.
_PREVIEW = 60


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def artifacts(options: Options, *, run_id: str | None, as_json: bool) -> None:
    """List the artifacts (of RUN_ID, or of every run), oldest first."""
    from little_workflow.artifacts import ArtifactStore

    async def work() -> list[ArtifactManifest]:
        return ArtifactStore(options.data_dir).list(run_id)

    found = execute(options, work)
    if as_json:
        print_json([manifest.to_json() for manifest in found])
        return
    rows = [
        (
            manifest.artifact_id,
            manifest.name,
            manifest.media_type,
            _size(manifest.size),
            manifest.run_id or "-",
            manifest.step_path or "-",
            _when(manifest.created_at),
        )
        for manifest in found
    ]
    columns = ("id", "name", "media type", "size", "run", "step", "created")
    print_table(columns, rows, "no artifacts")


@click.command("export-artifact")
@click.argument("artifact_id")
@click.argument("dest", type=click.Path(path_type=Path, allow_dash=True))
@click.option("--force", is_flag=True, help="Replace DEST if it exists.")
@click.pass_obj
def export_artifact(options: Options, *, artifact_id: str, dest: Path, force: bool) -> None:
    """Write ARTIFACT_ID's content to DEST (a file, a directory, or - for stdout).

    The content is checked against the manifest's SHA-256 first: a corrupt artifact is
    an error, never a silently wrong file.
    """
    from little_workflow.artifacts import ArtifactStore

    async def work() -> bytes | Path:
        store = ArtifactStore(options.data_dir)
        if str(dest) == "-":
            return store.read_bytes(artifact_id)
        return store.export(artifact_id, dest, overwrite=force)

    written = execute(options, work)
    if isinstance(written, bytes):
        sys.stdout.buffer.write(written)
        sys.stdout.buffer.flush()
        return
    click.echo(f"exported {artifact_id} to {written}", err=True)


def _preview(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


@click.command()
@click.argument("namespace", required=False)
@click.argument("key", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def memory(options: Options, *, namespace: str | None, key: str | None, as_json: bool) -> None:
    """Show the agents' memory: the namespaces; NAMESPACE's keys and values; or KEY's value.

    With KEY the value is printed as JSON (and the exit code is 3 if nothing is
    remembered there).
    """

    if namespace is None:
        _namespaces(options, as_json)
    elif key is None:
        _entries(options, namespace, as_json)
    else:
        _entry(options, namespace, key, as_json)


def _namespaces(options: Options, as_json: bool) -> None:
    async def work() -> dict[str, int]:
        async with _runtime(options) as runtime:
            store = runtime.memory
            return {name: len(await store.list(name)) for name in await store.namespaces()}

    found = execute(options, work)
    if as_json:
        print_json([{"namespace": name, "keys": count} for name, count in found.items()])
        return
    rows = [(name, str(count)) for name, count in found.items()]
    print_table(("namespace", "keys"), rows, "no memory")


def _entries(options: Options, namespace: str, as_json: bool) -> None:
    async def work() -> list[MemoryEntry]:
        async with _runtime(options) as runtime:
            entries: list[MemoryEntry] = await runtime.memory.list(namespace)
            return entries

    found = execute(options, work)
    if as_json:
        print_json([entry.to_json() for entry in found])
        return
    rows = [
        (
            entry.key,
            _preview(entry.value),
            _when(entry.updated_at),
            entry.run_id or "-",
            entry.step_path or "-",
        )
        for entry in found
    ]
    columns = ("key", "value", "updated", "run", "step")
    print_table(columns, rows, f"nothing remembered in {namespace!r}")


def _entry(options: Options, namespace: str, key: str, as_json: bool) -> None:
    async def work() -> MemoryEntry | None:
        async with _runtime(options) as runtime:
            entry: MemoryEntry | None = await runtime.memory.entry(namespace, key)
            return entry

    found = execute(options, work)
    if found is None:
        click.echo(f"error: nothing is remembered at {namespace}/{key}", err=True)
        sys.exit(EXIT_INVALID)
    print_json(found.to_json() if as_json else found.value)
