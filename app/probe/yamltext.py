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
"""

from __future__ import annotations

import logging
from typing import Any

import yaml
from yaml.composer import ComposerError

log = logging.getLogger(__name__)

__all__ = ["MAX_DEPTH", "Refused", "compose", "safe_load"]

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
