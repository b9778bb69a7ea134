"""The YAML operators write, read without aliases or unbounded nesting: a few hundred bytes of
nested aliases (the "billion laughs") are refused where they start, with their line, before
anything expands them; ordinary YAML loads as ``yaml.safe_load`` loads it."""

from __future__ import annotations

import pytest
import yaml

from app.probe import yamltext


def laughs(levels: int = 8, indent: str = "") -> str:
    """A list of ``levels`` anchored lists, each of ten aliases of the one before: the last one
    stands for 10^levels strings (10^8 in under 400 bytes)."""
    out = [f"{indent}- &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    out += [f"{indent}- &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(out) + "\n"


BILLION_LAUGHS = laughs()


def test_an_alias_is_refused_at_its_line_before_it_is_expanded():
    for read in (yamltext.safe_load, yamltext.compose):
        with pytest.raises(yamltext.Refused) as caught:
            read(BILLION_LAUGHS)
        mark = caught.value.problem_mark
        assert mark is not None and (mark.line + 1, mark.column + 1) == (2, 8)
        assert str(caught.value.problem).startswith("found the alias *l0: YAML anchors and aliases are not accepted")
        assert isinstance(caught.value, yaml.MarkedYAMLError)  # every caller's handler reports it


def test_nesting_is_bounded_instead_of_a_recursion_error():
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(yamltext.Refused) as caught:
        yamltext.compose(deep)
    assert caught.value.problem == f"nested more than {yamltext.MAX_DEPTH} levels deep"
    with pytest.raises(yamltext.Refused):
        yamltext.safe_load(deep)
    ok = "[" * yamltext.MAX_DEPTH + "]" * yamltext.MAX_DEPTH
    assert yamltext.safe_load(ok) == yaml.safe_load(ok)


def test_ordinary_yaml_loads_as_the_safe_loader_loads_it():
    text = "a: [1, {b: two}]\nc: 2:30\nd: null\ne: 'x'\n"
    assert yamltext.safe_load(text) == yaml.safe_load(text)
    node = yamltext.compose(text)
    assert isinstance(node, yaml.MappingNode) and node.value[0][0].value == "a"
    assert yamltext.safe_load("") is None and yamltext.compose("  \n") is None
    with pytest.raises(yaml.YAMLError):
        yamltext.safe_load("!!python/object:os.system x")  # still the safe loader
    with pytest.raises(yaml.MarkedYAMLError):
        yamltext.safe_load("a: [1")
