"""What a run's outcome is, decided from its ``result`` line (reference §4.4, §6, §11).

* ``is_error`` is trusted over ``subtype``: API failures end ``subtype: "success"`` with
  ``is_error: true``; a 529 overload has ``api_error_status: null``.
* No ``result`` line at all means the process died, was killed or timed out; the last
  ``system/api_retry`` line (if any) explains why, so it is quoted in the reason.
* A clean ``success`` may carry no ``structured_output`` (§5.4); that is still ``completed`` here,
  and the caller marks the session degraded when its data did not come from valid output.
* The reason is stored text: values quoted from the stream are shown with ``as_text`` (any JSON
  value, capped, no lone surrogate), so a hostile ``api_retry`` line cannot break the final write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.stream.parser import ResultLine, as_text

FAILURE_SUBTYPES = {
    "error_max_turns": "the CLI stopped at --max-turns",
    "error_max_structured_output_retries": "the model never produced schema-valid structured output",
    "error_max_budget_usd": "the CLI stopped at --max-budget-usd",
    "error_during_execution": "the CLI failed during execution",
}


_QUOTE_MAX = 500  # characters of one value quoted from an api_retry line


@dataclass(frozen=True)
class RunStatus:
    status: str  # completed | failed
    reason: str | None
    api_failure: bool = False  # the model could not be reached: never a reason to escalate


def decide_status(result: ResultLine | None, exit_code: int | None = None,
                  last_retry: dict[str, Any] | None = None) -> RunStatus:
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
