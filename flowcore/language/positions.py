"""YAML with positions: the safe loader specs are read with (YAML 1.2's core
schema) and the line and column of each key, so that a problem names where it is.
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

import yaml

# --- YAML with positions ----------------------------------------------------------


class _Loader(yaml.CSafeLoader):
    """Safe YAML without implicit timestamps: spec values stay JSON values."""


# YAML 1.1 reads yes/no/on/off as booleans and dates as datetimes, which
# breaks options like [yes, no]; specs follow YAML 1.2's core schema instead:
# only true/false are booleans and there are no implicit timestamps.
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_Loader.yaml_implicit_resolvers = {}
for _ch, _resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items():
    for _tag, _rx in _resolvers:
        if _tag == "tag:yaml.org,2002:timestamp":
            continue
        if _tag == "tag:yaml.org,2002:bool":
            if _ch not in "tTfF":
                continue
            _rx = _BOOL_12
        _Loader.yaml_implicit_resolvers.setdefault(_ch, []).append((_tag, _rx))

Positions: TypeAlias = dict[tuple[Any, ...], tuple[int, int]]


def _positions(node: yaml.Node, path: tuple[Any, ...], out: Positions, dups: list[Any]) -> None:
    """Record where each key (and each list item) sits; note duplicate keys."""
    out.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            here = (*path, key)
            mark = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in seen:
                dups.append((here, f"duplicate key {key!r}", mark))
            seen.add(key)
            out.setdefault(here, mark)
            _positions(value_node, here, out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, (*path, i), out, dups)


def _locate(path: tuple[Any, ...], positions: Positions) -> tuple[int, int] | None:
    # A key's own position is the most precise place for "unknown key" and for
    # problems with its value; fall back to the nearest enclosing node.
    probe = path
    while True:
        if probe in positions:
            return positions[probe]
        if not probe:
            return None
        probe = probe[:-1]


def _format_path(path: tuple[Any, ...]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
