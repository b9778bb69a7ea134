"""Decoded values made storable: lone surrogates, non-finite numbers, 64-bit integers, depth."""

from __future__ import annotations

import json

from app.stream.values import MAX_DEPTH, TOO_DEEP, as_text, clean_text, finite, json_safe


def test_json_safe_and_clean_text():
    assert clean_text("ok") == "ok" and clean_text("é\ud83d") == "é\ufffd"
    assert json_safe({"\ud83d": [float("nan"), float("inf"), 2**64, -(2**63), 1.5, True, None, "x"]}) == {
        "\ufffd": [None, None, None, -(2**63), 1.5, True, None, "x"]}
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    json.dumps(json_safe(deep), allow_nan=False)
    assert TOO_DEEP in json.dumps(json_safe(deep))
    assert (finite(True), finite("1"), finite(2**63), finite(float("-inf")), finite(3)) == (None, None, None, None, 3)
    nested: list = []
    for _ in range(5_000):
        nested = [nested]
    assert as_text(nested) == TOO_DEEP and as_text(None) == "null" and as_text("\udfff", 5) == "\ufffd"
