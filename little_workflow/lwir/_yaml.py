"""YAML workflow documents, read as JSON written differently (see ``_load``).

Kept apart from ``_load`` so that PyYAML is imported only when a YAML document is
read; ``_load.read_document`` imports this module on demand.
"""

from __future__ import annotations

import math
import re

import yaml

from little_workflow.codec import JsonValue
from little_workflow.errors import LwirSyntaxError, LwirTooLargeError
from little_workflow.lwir._load import (
    _FLOAT_RE,
    _INT_RE,
    _MAX_NUMBER_CHARS,
    MAX_NESTING_DEPTH,
    MAX_YAML_NODES,
)

__all__ = ["read_yaml"]

_TAG = "tag:yaml.org,2002:"


class _JsonScalarLoader(yaml.SafeLoader):
    """PyYAML's safe loader with JSON's implicit scalars instead of YAML 1.1's."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}  # noqa: RUF012


_JsonScalarLoader.add_implicit_resolver(
    _TAG + "bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_JsonScalarLoader.add_implicit_resolver(
    _TAG + "null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
# int before float: for a first character both accept, resolvers are tried in order.
_JsonScalarLoader.add_implicit_resolver(
    _TAG + "int", re.compile(rf"^{_INT_RE.pattern}$"), list("-+0123456789")
)
_JsonScalarLoader.add_implicit_resolver(
    _TAG + "float", re.compile(rf"^{_FLOAT_RE.pattern}$"), list("-+.0123456789")
)


def read_yaml(text: str, source: str | None) -> JsonValue:
    try:
        root = yaml.compose(text, Loader=_JsonScalarLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise LwirSyntaxError(
            f"malformed YAML: {exc.problem or exc.context}",
            source=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise LwirSyntaxError(f"malformed YAML: {exc}", source=source) from None
    except RecursionError:
        raise LwirTooLargeError(
            f"{source or 'workflow document'} is nested more than {MAX_NESTING_DEPTH} deep"
        ) from None
    if root is None:
        return None
    return _YamlConverter(source).convert(root, 0)


class _YamlConverter:
    def __init__(self, source: str | None) -> None:
        self.source = source
        self.nodes = 0
        self.active: set[int] = set()

    def fail(self, node: yaml.Node, message: str) -> LwirSyntaxError:
        return LwirSyntaxError(
            message,
            source=self.source,
            line=node.start_mark.line + 1,
            column=node.start_mark.column + 1,
        )

    def convert(self, node: yaml.Node, depth: int) -> JsonValue:
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:
            raise LwirTooLargeError(
                f"{self.source or 'workflow document'} expands to more than {MAX_YAML_NODES} "
                "nodes (through YAML aliases?); refusing it"
            )
        if depth > MAX_NESTING_DEPTH:
            raise LwirTooLargeError(
                f"{self.source or 'workflow document'} is nested more than {MAX_NESTING_DEPTH} deep"
            )
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if id(node) in self.active:
            raise self.fail(node, "a YAML alias refers to a node that contains it")
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode) and node.tag == _TAG + "seq":
                return [self.convert(child, depth + 1) for child in node.value]
            if isinstance(node, yaml.MappingNode) and node.tag == _TAG + "map":
                return self.mapping(node, depth)
        finally:
            self.active.discard(id(node))
        raise self.fail(node, f"unsupported YAML tag {node.tag!r}")

    def mapping(self, node: yaml.MappingNode, depth: int) -> dict[str, JsonValue]:
        result: dict[str, JsonValue] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "..."
                raise self.fail(key_node, f"mapping keys must be strings; quote the key {shown!r}")
            key = str(key_node.value)
            if key == "<<" and key_node.style is None:
                raise self.fail(key_node, "YAML merge keys (<<) are not supported")
            if key in result:
                raise self.fail(key_node, f"duplicate key {key!r}")
            result[key] = self.convert(value_node, depth + 1)
        return result

    def scalar(self, node: yaml.ScalarNode) -> JsonValue:
        value = str(node.value)
        tag = node.tag.removeprefix(_TAG)
        if tag == "str":
            return value
        if tag == "null" and value in ("~", "null", "Null", "NULL", ""):
            return None
        if tag == "bool" and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if tag == "int" and len(value) <= _MAX_NUMBER_CHARS and _INT_RE.fullmatch(value):
            return int(value)
        if tag == "float" and len(value) <= _MAX_NUMBER_CHARS and _FLOAT_RE.fullmatch(value):
            number = float(value)
            if math.isfinite(number):
                return number
        raise self.fail(node, f"unsupported YAML scalar {value!r} with tag {node.tag!r}")
