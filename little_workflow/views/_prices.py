"""A price table from a file: what ``show --prices FILE`` reads.

The library ships no prices. Providers change them, per model and per date, and a
report that multiplied tokens by a stale guess would look authoritative and be wrong;
a model the user did not price shows its tokens with cost unknown instead.

The file is TOML (or JSON, by its ``.json`` suffix), one table per model id, the id as
the slot names it (``ModelSlot.model``), prices per million tokens::

    [models."gpt-4o-mini"]
    input = 0.15
    cached_input = 0.075
    output = 0.60

    [models."claude-sonnet"]
    input = 3.0
    cache_write = 3.75
    cached_input = 0.30
    output = 15.0
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from little_workflow.errors import ConfigError
from little_workflow.views._usage import ModelPrice, PriceTable

__all__ = ["load_prices", "parse_prices"]

_FIELDS = ("input", "output", "cached_input", "cache_write")


def _price(model: str, entry: object, where: str) -> ModelPrice:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: the price of model {model!r} is not a table")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"{where}: model {model!r} has unknown price fields {unknown} "
            f"(known: {', '.join(_FIELDS)})"
        )
    values: dict[str, float] = {}
    for name in _FIELDS:
        value = entry.get(name)
        if value is None:
            if name in ("input", "output"):
                raise ConfigError(f"{where}: model {model!r} has no {name!r} price")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: model {model!r}: {name!r} is not a number")
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: model {model!r}: {name!r} must be a price >= 0")
        values[name] = float(value)
    return ModelPrice(**values)


def parse_prices(data: Any, *, where: str = "price table") -> PriceTable:
    """``{"models": {model id: {input, output, cached_input?, cache_write?}}}`` as a table.

    Raises ``ConfigError`` naming the model and field for anything else.
    """
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError(f"{where}: expected a 'models' table of model id -> prices")
    return {str(model): _price(str(model), entry, where) for model, entry in models.items()}


def load_prices(path: str | Path) -> PriceTable:
    """The price table in the TOML (or ``.json``) file at ``path``."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
        data = json.loads(text) if target.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read the price table {str(target)!r}: {exc}") from exc
    return parse_prices(data, where=str(target))
