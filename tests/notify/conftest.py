"""The notification tests run real supervisor cycles too: the supervisor tests' fixtures (a clean
TIEROPS_* environment, settings pointed at the fake CLI) apply here as well."""

from tests.supervisor.conftest import _clean_tierops_env, make_settings

__all__ = ["_clean_tierops_env", "make_settings"]
