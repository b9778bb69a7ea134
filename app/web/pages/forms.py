"""What every page module shares: the one form reader, query strings, redirects and "not found".

Forms are plain HTML POSTs (CSRF is checked by the security middleware from the Origin /
Sec-Fetch-Site headers) and answer with a 303 redirect, or re-render the page with a message and a
4xx status when the input is wrong. A bad query parameter or an unknown id raises
:class:`~app.web.common.ApiError`, which the app's error handler renders as the error page; nothing
a visitor types can make a page fail with 500.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse

from app.web.common import ApiError, read_body
from app.web.limits import FILTER_TEXT_MAX, FORM_MAX_BYTES, FORM_MAX_FIELDS

log = logging.getLogger(__name__)

# Fixed texts after an acknowledgement (over the shared ?notice= texts of templating.py)
PAGE_NOTICES = {"attention_acked": "Acknowledged: the overview no longer lists it; this page keeps it, marked."}


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last value wins).

    Parsed here rather than with ``request.form()``: that needs python-multipart, and the
    dashboard's forms are all urlencoded."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "forms must be sent as application/x-www-form-urlencoded")
    body = await read_body(request, FORM_MAX_BYTES, "the form")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", "form is not valid UTF-8") from None
    try:
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=FORM_MAX_FIELDS))
    except ValueError:  # urllib's "Max number of fields exceeded": the sender's input, never a 500
        raise ApiError(400, "bad_request", f"the form has more than {FORM_MAX_FIELDS} fields; send only the "
                                           "fields of the dashboard's form") from None


def page_query(**params: Any) -> str:
    clean = {k: v for k, v in params.items() if v is not None and v != ""}
    return ("?" + urlencode(clean)) if clean else ""


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def filter_text(request: Request, name: str) -> str | None:
    return (request.query_params.get(name) or "").strip()[:FILTER_TEXT_MAX] or None


def not_found(what: str, pk: int) -> ApiError:
    return ApiError(404, "not_found", f"There is no {what} {pk}.")



def page_notice(request: Request, ctx: dict[str, Any]) -> dict[str, Any]:
    """``ctx`` with the page's own ``?notice=`` text, if it names one of :data:`PAGE_NOTICES`."""
    if (notice := PAGE_NOTICES.get(request.query_params.get("notice", ""))) is not None:
        ctx["notice"] = notice
    return ctx
