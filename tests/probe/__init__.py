"""Tests of tier 0, the probe (issue #12), against real targets on 127.0.0.1 (``local_targets``)."""
