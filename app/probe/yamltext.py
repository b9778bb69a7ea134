"""YAML an operator writes (the checks file, ``TIEROPS_MAINTENANCE``, ``TIEROPS_NOTIFY_ROUTES``),
read without aliases and without unbounded nesting.

Why a module of its own: PyYAML's safe loader still expands aliases. Nine anchors of ten aliases
each fit in about 500 bytes and stand for 10^9 nodes; composing shares them, but everything that
walks the result afterwards (the line map of the checks file, JSON Schema, the variable
substitution, the route parser) visits every one of them, and memory and time run out in
``checks validate``, ``serve``, every probe cycle and the ``/config`` page. A checks file needs no
anchors or aliases, so here an alias is refused as soon as the parser meets it — before anything
could expand it — with its line and column, and so is nesting deeper than :data:`MAX_DEPTH`
(PyYAML composes recursively: a file of ``[[[[…`` would end in a ``RecursionError`` traceback).

Both refusals are :class:`yaml.MarkedYAMLError` subclasses, so every caller's existing handler
reports them with their position; :class:`Refused` lets a caller say it in its own words.
:class:`Lines` maps a JSON path of the loaded data back to its YAML line, for problems found later.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import yaml
from yaml.composer import ComposerError

log = logging.getLogger(__name__)

__all__ = ["MAX_DEPTH", "Lines", "Refused", "compose", "safe_load", "stringify_keys"]

# A checks file is about five levels deep (checks → a check → headers → a value); a route or a
# window fewer. Far below Python's recursion limit, which PyYAML's composer would otherwise reach.
MAX_DEPTH = 64


class Refused(ComposerError):
    """An alias or too deep a nesting: YAML these loaders do not accept (``problem`` says which and
    what to do instead, ``problem_mark`` where)."""


class _Loader(yaml.SafeLoader):
    """The safe loader, composing no alias and no node deeper than :data:`MAX_DEPTH`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise Refused(None, None, f"found the alias *{event.anchor}: YAML anchors and aliases are not "
                                      "accepted here (each would be expanded everywhere it is used); write the "
                                      "value out", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def compose(text: str) -> yaml.Node | None:
    """The node tree of ``text`` (None for an empty document); :class:`Refused` for an alias or too
    deep a nesting, :class:`yaml.YAMLError` for a syntax error."""
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing what :func:`compose` refuses."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def stringify_keys(value: Any) -> Any:
    """YAML allows ``1:`` or ``on:`` as keys; JSON Schema sees text keys (reported as unknown)."""
    if isinstance(value, dict):
        return {str(k): stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stringify_keys(v) for v in value]
    return value


class Lines:
    """The YAML line of each node of a composed document, by its JSON path (mapping keys, list
    indexes): a problem found in the loaded data is reported at the line it is about."""

    def __init__(self, root: yaml.Node) -> None:
        self.root = root

    def node(self, path: Iterable[str | int], *, key: bool = False) -> yaml.Node:
        node = self.root
        steps = list(path)
        for i, step in enumerate(steps):
            if isinstance(node, yaml.MappingNode):
                found = [(k, v) for k, v in node.value if str(k.value) == str(step)]
                if not found:
                    return node
                k, v = found[-1]
                node = k if key and i == len(steps) - 1 else v
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
            else:
                return node
        return node

    def line(self, path: Iterable[str | int], *, key: bool = False) -> int:
        return self.node(path, key=key).start_mark.line + 1

    def mappings(self) -> Iterator[tuple[list[str | int], yaml.MappingNode]]:
        """Every mapping node with its path, its keys as written (a key written twice included)."""
        return _mappings(self.root, [])


def _mappings(node: yaml.Node, path: list[str | int]) -> Iterator[tuple[list[str | int], yaml.MappingNode]]:
    if isinstance(node, yaml.MappingNode):
        yield path, node
        for k, v in node.value:
            yield from _mappings(v, [*path, str(k.value)])
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield from _mappings(v, [*path, i])
