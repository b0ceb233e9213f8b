"""The optional dependencies, by extra, and the one check that names the extra to install.

The core (SQLite, the command line, the harness, the scripted and HTTP providers) installs
with ``pip install little-workflow``. A feature that needs more calls ``require`` where it
starts, before importing anything of its extra or writing anything, so a missing package is
one line naming the command that installs it (``MissingExtraError``, exit 3), not a
``ModuleNotFoundError`` from deep inside a backend. Keep this table and ``pyproject.toml``'s
``[project.optional-dependencies]`` in step (``tests/test_extras.py`` checks they agree).
"""

from __future__ import annotations

import importlib

from little_workflow.errors import MissingExtraError

#: extra -> the modules it provides (import names, not distribution names).
EXTRAS: dict[str, tuple[str, ...]] = {
    "anthropic": ("anthropic",),
    "openai": ("openai",),
    # Never required: tracing turns itself on when the application set a tracer provider
    # (``_tracing``), so nothing asks for this extra by name.
    "otel": ("opentelemetry",),
    "postgres": ("psycopg", "psycopg_pool"),
    "ui": ("starlette", "uvicorn"),
    "ws": ("websockets",),
}


def require(extra: str, feature: str) -> None:
    """Import ``extra``'s modules, or raise ``MissingExtraError`` naming the extra.

    ``feature`` is what the user asked for, as the message names it ("a postgresql://
    store"). Importing (not just finding) the modules is what catches a psycopg that is
    installed but finds no libpq: without ``psycopg[binary]`` or ``psycopg[c]`` it needs
    the system's, and says so only when imported.
    """
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = getattr(exc, "name", None)
            if module == "psycopg" and missing is None:
                # psycopg lists every implementation it tried, one per line: the first says it.
                reason = str(exc).splitlines()[0] if str(exc) else "no libpq"
                raise MissingExtraError(
                    f"{feature} needs psycopg, which is installed but cannot load a libpq wrapper "
                    f"({reason}): pip install 'psycopg[binary]' (or install the system's libpq)",
                    extra=extra,
                ) from exc
            raise MissingExtraError(
                f"{feature} needs the {extra!r} extra ({missing or module} is not installed): "
                f"pip install 'little-workflow[{extra}]'",
                extra=extra,
            ) from exc
