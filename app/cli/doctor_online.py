"""``tierops doctor --online``: one request that proves the credentials the CLI would send.

Why apart from the other checks: it is the only one that leaves the machine. It asks the
Messages API's ``count_tokens`` (no model runs, nothing is billed) at ``ANTHROPIC_BASE_URL``
(default ``https://api.anthropic.com``), with the credentials from the environment sent as the
pinned CLI sends them. Its line says what was proven, or names a 401/403, a timeout or an
unreachable API; a credential's value is never printed, not even inside an error the API or the
network echoed back.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Mapping

from app.cli.doctor_checks import CREDENTIAL_VARS, Check
from app.config import Settings
from app.supervisor.upstream_models import api_error, scrub, shown_url

log = logging.getLogger(__name__)

# --online: the Messages API's token count proves the credentials without running (or billing) a model.
DEFAULT_BASE_URL = "https://api.anthropic.com"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
COUNT_TOKENS_MODEL = "claude-haiku-4-5"  # any model id: a 401/403 comes before the model is looked at
ANTHROPIC_VERSION = "2023-06-01"
ONLINE_TIMEOUT_S = 15.0

def check_online(settings: Settings, environ: Mapping[str, str] | None = None,
                 timeout: float = ONLINE_TIMEOUT_S) -> Check:
    """``--online``: one request that proves the credentials work — the Messages API's
    ``count_tokens`` (nothing billed, no model runs) with the credentials the CLI would send
    (``x-api-key`` for ANTHROPIC_API_KEY, ``Authorization: Bearer`` for ANTHROPIC_AUTH_TOKEN, or
    for CLAUDE_CODE_OAUTH_TOKEN when no API key is set, as the pinned CLI does), against
    ANTHROPIC_BASE_URL when set. The line says what was proven; no value is ever printed."""
    env = dict(os.environ if environ is None else environ)
    base = (env.get("ANTHROPIC_BASE_URL") or "").strip() or DEFAULT_BASE_URL
    headers = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json",
               "user-agent": "tierops-doctor"}
    used: list[str] = []
    secrets = [v for v in (env.get(n, "").strip() for n in CREDENTIAL_VARS) if v]
    if key := env.get("ANTHROPIC_API_KEY", "").strip():
        headers["x-api-key"] = key
        used.append("ANTHROPIC_API_KEY")
    if token := env.get("ANTHROPIC_AUTH_TOKEN", "").strip():
        headers["authorization"] = f"Bearer {token}"
        used.append("ANTHROPIC_AUTH_TOKEN")
    elif not key and (oauth := env.get("CLAUDE_CODE_OAUTH_TOKEN", "").strip()):
        headers["authorization"] = f"Bearer {oauth}"
        used.append("CLAUDE_CODE_OAUTH_TOKEN")
    if not used:
        return Check("online", "skip", "no credential in the environment to send (a `claude login` stored in the "
                                       "CLI's HOME is proven by the first tier-1 run: a rejection pauses the model "
                                       "tiers)")
    where = shown_url(base)
    names = " and ".join(used)
    if not where.startswith(("http://", "https://")):
        return Check("online", "fail", f"ANTHROPIC_BASE_URL is not an http:// or https:// URL ({where})")
    url = base.rstrip("/") + COUNT_TOKENS_PATH
    body = json.dumps({"model": COUNT_TOKENS_MODEL, "messages": [{"role": "user", "content": "ping"}]}).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 (checked above)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (http or https, checked above)
            status = resp.status
    except urllib.error.HTTPError as exc:
        status, detail = exc.code, scrub(api_error(exc), secrets)
        if status in (401, 403):
            return Check("online", "fail", f"{names} rejected by {where}: HTTP {status} {detail}; set valid credentials "
                                           "(TierOps passes them to the CLI) — with these, every language-model run "
                                           "fails and the model tiers pause")
        if status in (429, 500, 502, 503, 504, 529):
            return Check("online", "warn", f"{where} answered HTTP {status} {detail}: not proven (the API is busy or "
                                           f"failing; {names} was not refused); try again later")
        return Check("online", "warn", f"{where} answered HTTP {status} {detail} to POST {COUNT_TOKENS_PATH}: {names} "
                                       "was not refused but not proven either (a proxy without count_tokens?)")
    except TimeoutError:
        return Check("online", "fail", f"no answer from {where} within {timeout:g} s; check ANTHROPIC_BASE_URL, the "
                                       "network and any proxy (HTTPS_PROXY)")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return Check("online", "fail", f"no answer from {where} within {timeout:g} s; check ANTHROPIC_BASE_URL, "
                                           "the network and any proxy (HTTPS_PROXY)")
        why = getattr(reason, "strerror", None) or str(reason)
        return Check("online", "fail", f"cannot reach {where}: {scrub(str(why), secrets)}; check ANTHROPIC_BASE_URL, "
                                       "DNS, the network and any proxy (HTTPS_PROXY)")
    except (OSError, ValueError) as exc:
        return Check("online", "fail", f"cannot reach {where}: {scrub(str(exc), secrets)}; check ANTHROPIC_BASE_URL")
    return Check("online", "ok", f"{names} accepted by {where}: POST {COUNT_TOKENS_PATH} answered {status} (a token "
                                 "count: no model ran, nothing billed)")


__all__ = ["COUNT_TOKENS_PATH", "DEFAULT_BASE_URL", "check_online"]
