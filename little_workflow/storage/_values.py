"""How a ``StorageAdapter`` value becomes the JSON text a backend stores.

Shared by every backend so that a value refused by one (``None``, ``NaN``, bytes, a
custom object) is refused by all, with the same message.
"""

from __future__ import annotations

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidValueError

__all__ = ["encode_value"]


def encode_value(key: str, value: JsonValue) -> str:
    """The JSON text stored for ``value``; refuses ``None`` and non-JSON values."""
    if value is None:
        raise InvalidValueError(
            f"cannot store None at {key!r}: None means 'missing' to get(); use delete()"
        )
    return codec.dumps(value, where=f"value for key {key!r}")
