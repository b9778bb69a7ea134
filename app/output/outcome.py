"""What a run's outcome is, decided from its ``result`` line (reference §4.4, §6, §11).

* ``is_error`` is trusted over ``subtype``: API failures end ``subtype: "success"`` with
  ``is_error: true``; a 529 overload has ``api_error_status: null``.
* No ``result`` line at all means the process died, was killed or timed out; the last
  ``system/api_retry`` line (if any) explains why, so it is quoted in the reason.
* A clean ``success`` may carry no ``structured_output`` (§5.4); that is still ``completed`` here,
  and the caller marks the session degraded when its data did not come from valid output.
* The reason is stored text: values quoted from the stream are shown with ``as_text`` (any JSON
  value, capped, no lone surrogate), so a hostile ``api_retry`` line cannot break the final write.
* ``error_max_budget_usd``: a run the CLI stopped at ``--max-budget-usd`` is ``failed`` with
  "budget exceeded: $spent of $limit (SETTING)", not an API failure (how the pinned CLI stops:
  ARCHITECTURE.md, "Outcomes and routing"; fixture ``o_max_budget_usd``).
* Rejected credentials (:func:`credentials_rejected`): the pinned CLI retries an HTTP 401 like a
  5xx, for minutes (reference §6, fixture ``f_api_401``); the first such ``api_retry`` line (or a
  result with ``api_error_status`` 401/403) already says everything, so the supervisor stops the
  CLI there and fails the session with :meth:`CredentialsRejected.reason`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from app.stream.parser import ResultLine
from app.stream.values import as_text

log = logging.getLogger(__name__)

FAILURE_SUBTYPES = {
    "error_max_turns": "the CLI stopped at --max-turns",
    "error_max_structured_output_retries": "the model never produced schema-valid structured output",
    "error_max_budget_usd": "the CLI stopped at --max-budget-usd",
    "error_during_execution": "the CLI failed during execution",
}


_QUOTE_MAX = 500  # characters of one value quoted from an api_retry line
BUDGET_SUBTYPE = "error_max_budget_usd"
_STATED_BUDGET = re.compile(r"maximum budget \(\$([0-9][0-9.eE+-]*)\)")  # "Reached maximum budget ($0.2)"


@dataclass(frozen=True)
class Budget:
    """The ``--max-budget-usd`` a run was given and the setting it came from (named in the reason)."""

    usd: float
    setting: str


@dataclass(frozen=True)
class RunStatus:
    status: str  # completed | failed
    reason: str | None
    api_failure: bool = False  # the model could not be reached: never a reason to escalate


# HTTP statuses that mean "these credentials are refused" (not "try again"), and the category the
# CLI's api_retry line gives (reference §4.5; 403 is not captured: named after the API's error type).
REJECTED_STATUSES = {401: "authentication_failed", 403: "permission_error"}


@dataclass(frozen=True)
class CredentialsRejected:
    """The API refused the credentials the CLI was given: HTTP ``status``, the CLI's ``error`` word."""

    status: int
    error: str

    def reason(self) -> str:
        """The session's reason: what happened and what to do."""
        return (f"API key rejected (HTTP {self.status} {self.error}): the API refused the credentials the claude CLI "
                "was given (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN, at ANTHROPIC_BASE_URL "
                "when set); the CLI was stopped instead of retrying for minutes. Set valid credentials in TierOps' "
                "environment and restart it (`tierops doctor --online` checks them); the language-model tiers stay "
                "paused until the credentials change")


def credentials_rejected(retry: dict[str, Any] | None = None,
                         result: ResultLine | None = None) -> CredentialsRejected | None:
    """A :class:`CredentialsRejected` when an ``api_retry`` line's ``error_status`` or a result's
    ``api_error_status`` is 401 or 403; None otherwise (any other failure may pass)."""
    if retry is not None:
        status = retry.get("error_status")
        if isinstance(status, int) and not isinstance(status, bool) and status in REJECTED_STATUSES:
            error = retry.get("error")
            word = error if isinstance(error, str) and error.strip() else REJECTED_STATUSES[status]
            return CredentialsRejected(status, as_text(word, 60))
    if result is not None and result.is_error and (status := result.api_error_status) in REJECTED_STATUSES:
        return CredentialsRejected(status, REJECTED_STATUSES[status])
    return None


def decide_status(result: ResultLine | None, exit_code: int | None = None,
                  last_retry: dict[str, Any] | None = None, budget: Budget | None = None) -> RunStatus:
    """``budget``: the run's ``--max-budget-usd``, for the reason when the CLI stopped at it (None:
    the amount is read from the CLI's own error text, e.g. an ingested file)."""
    if result is None:
        reason = "stream ended without a result line (the process died, was killed or timed out)"
        if exit_code is not None:
            reason += f"; exit code {exit_code}"
        if last_retry:
            def quote(key: str) -> str:
                return as_text(last_retry.get(key), _QUOTE_MAX)

            reason += (f"; last API retry: attempt {quote('attempt')}/{quote('max_retries')}"
                       f" status={quote('error_status')} error={quote('error')}")
        return RunStatus("failed", reason, api_failure=bool(last_retry))
    subtype = result.subtype or "success"
    if subtype == BUDGET_SUBTYPE:
        return RunStatus("failed", budget_reason(result, budget))
    if subtype != "success":
        what = FAILURE_SUBTYPES.get(subtype, "the CLI reported an error")
        detail = "; ".join(result.errors) or result.result_text or ""
        return RunStatus("failed", f"{subtype}: {what}" + (f" ({detail})" if detail else ""))
    if result.is_error:
        status = result.api_error_status
        text = result.result_text or "no message"
        label = f"API failure (HTTP {status})" if status is not None else "API failure (no HTTP status; 529 overload reports none)"
        return RunStatus("failed", f"{label}: {text}", api_failure=True)
    return RunStatus("completed", None)


def budget_reason(result: ResultLine, budget: Budget | None = None) -> str:
    """"budget exceeded: $0.26 of $0.20 (TIEROPS_TIER2_MAX_BUDGET_USD)" for a run the CLI stopped
    at its ``--max-budget-usd``."""
    spent = result.total_cost_usd
    limit = budget.usd if budget is not None else _stated_budget(result.errors)
    text = f"budget exceeded: {usd(spent) if spent is not None else 'an unknown amount'}"
    if limit is not None:
        text += f" of {usd(limit)}"
    return f"{text} ({budget.setting if budget is not None else '--max-budget-usd'})"


def usd(amount: float) -> str:
    """Dollars as reasons show them: cents, or the digits that matter below a cent ($0.00005)."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:.2f}"
    return "$" + f"{amount:.8f}".rstrip("0")


def _stated_budget(errors: list[str]) -> float | None:
    for error in errors:
        if (m := _STATED_BUDGET.search(error)) is not None:
            try:
                return float(m.group(1))
            except ValueError:
                return None
    return None
