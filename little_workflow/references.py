"""Import by reference: ``package.module:attr`` names a module-level object.

The one resolver for every place a Python object is named across a boundary it cannot
cross itself: a child process's target, a workflow's ``execute`` function,
``--setup``, ``--supervise``, a fake model server's ``--script``. ``attr`` may be
dotted (``Class.method``). With ``public_only``, no part may start with ``_``: what a
document or another process names should be a module's public surface.
"""

from __future__ import annotations

import importlib
from typing import Any

from little_workflow.errors import ConfigError

__all__ = ["import_reference"]


def import_reference(reference: str, *, what: str = "reference", public_only: bool = False) -> Any:
    """The object ``reference`` names; ``ConfigError`` saying what and why if none.

    ``what`` names the reference in messages ("spawn target", "--setup", ...).
    """
    if not isinstance(reference, str):
        raise ConfigError(f"{what} must be a 'package.module:attr' string, not {reference!r}")
    module_name, _, attribute = reference.partition(":")
    parts = [*module_name.split("."), *attribute.split(".")]
    if not module_name or not attribute or any(not part for part in parts):
        raise ConfigError(f"{what} {reference!r}: write package.module:attr")
    if public_only and any(part.startswith("_") for part in parts):
        raise ConfigError(
            f"{what} {reference!r}: write package.module:attr with no private ('_') parts"
        )
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{what} {reference!r}: cannot import module {module_name!r}: {exc}"
        ) from exc
    for name in attribute.split("."):
        try:
            found = getattr(found, name)
        except AttributeError as exc:
            raise ConfigError(
                f"{what} {reference!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from exc
    return found
