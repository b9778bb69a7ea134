"""Input limits, once: the dashboard's forms, the API's pydantic models and query parameters, the
templates' ``maxlength`` attributes and the OpenAPI document all read these, so they cannot disagree.

A form and the API that do the same thing accept the same input: a prompt the Run Now form
takes is a prompt ``POST /api/v1/runs`` takes.
"""

from __future__ import annotations

import logging

from app.vocab import IncidentStatus, values

log = logging.getLogger(__name__)

PROMPT_MAX_CHARS = 20_000  # the extra prompt of a manual run (form and POST /runs)

MEMORY_CATEGORY_MAX = 200
MEMORY_VALUE_MAX = 10_000
MEMORY_SERVICE_MAX = 200
MEMORY_DEFAULT_CONFIDENCE = 0.7

# The output schema registry: names are short identifiers (they go in URLs and flags).
SCHEMA_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SCHEMA_DESCRIPTION_MAX = 2_000
OUTPUT_MAX_RETRIES_MAX = 10  # the same bound as TIEROPS_OUTPUT_MAX_RETRIES

FILTER_TEXT_MAX = 200  # a free-text filter (service, category) of a page's query string

FORM_MAX_BYTES = 256 * 1024  # a urlencoded form body (the largest field above, percent-encoded, fits)
FORM_MAX_FIELDS = 100  # fields of one form body (the dashboard's largest form has a dozen); more is 400
API_BODY_MAX_BYTES = 1024 * 1024  # a JSON body of the REST API; larger is 413, refused while reading

# The API's query parameter ranges: (default, minimum, maximum) of ?limit=.
SESSIONS_LIMIT = (50, 1, 500)
ACTIVITY_LIMIT = (500, 1, 5000)
EVENTS_LIMIT = (100, 1, 1000)
MEMORIES_LIMIT = (200, 1, 2000)
SCHEMAS_LIMIT = (200, 1, 500)
INCIDENTS_LIMIT = (100, 1, 1000)
QUEUE_LIMIT = (100, 1, 1000)  # GET /queue
COOLDOWN_ACTIONS_LIMIT = (20, 1, 500)  # the recent actions GET /cooldowns lists
APPROVALS_LIMIT = (100, 1, 1000)
PROPOSALS_MAX = 500  # proposed actions listed with one session or one incident (API and pages)

# Incidents: the status filter ("unresolved": open and acknowledged), the operator's name (one
# line) and the shape of a silence's end, which app.store.incidents.parse_until then reads (a
# duration, or an ISO time with its zone).
INCIDENT_FILTERS = (*values(IncidentStatus), "unresolved")
OPERATOR_PATTERN = r"^[^\x00-\x1f\x7f]*$"
UNTIL_PATTERN = r"^([0-9]{1,9}[mhd]|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ].+)$"
UNTIL_MAX = 64
