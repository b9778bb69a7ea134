"""Tests of tier 0, the probe, against real targets on 127.0.0.1 (``local_targets``)."""
