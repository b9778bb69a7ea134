"""``app/engine/alert_severity.py``: the severity words of the common vocabularies, numbers, and
the default for a missing or unknown word."""

from __future__ import annotations

import pytest

from app.engine.alert_severity import severity_of


@pytest.mark.parametrize("word, severity", [
    *((w, "critical") for w in ("critical", "CRITICAL", "crit", "fatal", "emergency", "emerg", "alert", "Disaster",
                                "page", "high", "major", "error", "err", "P1", "p2", "P0", "sev1", "SEV-1", "sev 2",
                                "sev_2", "severity-1", "1", "2", " High ")),
    *((w, "warning") for w in ("warning", "Warn", "medium", "minor", "P3", "average", "Average", "moderate", "sev3",
                               "3")),
    *((w, "info") for w in ("info", "informational", "Information", "low", "P4", "P5", "notice", "debug", "none",
                            "Not classified", "not_classified", "4", "5", "sev-5", "7")),
])
def test_severity_words(word, severity):
    assert severity_of(word) == severity
    assert severity_of(word, "info") == severity  # a known word never takes the default


@pytest.mark.parametrize("word", [None, "", "   ", "urgent", "P1!", "sev-one", "-1", "1.5"])
def test_an_unknown_or_missing_severity_is_the_default(word):
    assert severity_of(word) == "warning"
    assert severity_of(word, "critical") == "critical"
