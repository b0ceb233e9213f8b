"""Lazy re-exports for package ``__init__`` modules (PEP 562).

Every process pays for what ``import little_workflow`` imports: a resumed run, each
CLI command, every spawned child. Importing the whole library eagerly (pydantic and
every event and LWIR model, websockets, the harness, the artifacts store) took about
0.3 s, most of it for code a given process never touches. A package that re-exports
through ``lazy_exports`` imports a name's module on first access instead; its
``__init__`` also imports the same names under ``if TYPE_CHECKING:`` so type checkers
and editors see them exactly as before (``tests/test_lazy_imports.py`` checks the two
lists agree).

Rejected: ``importlib.util.LazyLoader`` (it defers whole modules, so an attribute
access anywhere can trigger an import with a confusing traceback, and it does not
work with ``from x import y`` of a sub-module's names); a third-party lazy-loader
(a dependency for twenty lines).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    exports: Mapping[str, Iterable[str]],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose globals are ``namespace``.

    ``exports`` maps a module (absolute name) to the names ``package`` re-exports from
    it. A name is imported on first access and then stored in ``namespace``, so the
    next access is an ordinary global lookup.
    """
    origin = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = origin.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(origin))

    return __getattr__, __dir__
