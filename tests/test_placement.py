"""``app/placement.py``: TIEROPS_RUNS_ON parsed strictly, and the labels a tier on services needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.placement import labels_of, parse_runs_on


def test_a_tier_needs_its_own_labels_and_those_of_every_service_it_works_on():
    p = parse_runs_on(" tier3=ssh-to-prod, service:billing-db=dc-2,service:billing-db=vpn ,tier3=audit")
    assert p.needs(3) == {"ssh-to-prod", "audit"}
    assert p.needs(2, ["billing-db", None, "web"]) == {"dc-2", "vpn"}
    assert p.needs(1, ["web"]) == frozenset() and parse_runs_on("").needs(3, ["x"]) == frozenset()
    assert labels_of(" dc-1, ,ssh-to-prod,dc-1") == {"dc-1", "ssh-to-prod"}


@pytest.mark.parametrize(("text", "says"), [
    ("tier0=x", "the target must be tier1..tier3 or service:NAME"),
    ("tier4=x", "the target must be tier1..tier3"),
    ("web=x", "'web=x': the target must be"),
    ("service:=x", "the target must be"),
    ("tier2", "'tier2': expected TARGET=LABEL"),
    ("tier2=a b", "expected TARGET=LABEL"),
    ("tier2=", "expected TARGET=LABEL"),
])
def test_a_bad_entry_is_named_in_the_settings_error(text, says):
    with pytest.raises(ValidationError, match=says):
        Settings(runs_on=text)
