"""Approvals of manual tiers, on the supervisor's side: which tiers wait for one, and the pending
ones that end without an operator.

Why a module of its own: an approval is asked for by the chain (``chain.request_approval``) and
continued as a cycle of its own (``Supervisor.start_approved``), but it also ends by itself — past
its time (its session then needs attention, and people are told, following the messages of its
incidents), or once all its incidents resolved (nothing left to run). :func:`expire_approvals` runs
at every cycle's start and in the server's watch; a chain that resolves an incident expires what
waited for it at once (``store.approvals.expire_due``).
"""

from __future__ import annotations

import logging

from app.config import Settings
from app.notify import messages as notices
from app.notify.messages import NoticeSink
from app.store import approvals as approval_store
from app.store import incidents as incident_store
from app.store.approvals import ApprovalRow
from app.store.db import Database

log = logging.getLogger(__name__)


def needs_approval(settings: Settings, tier: int) -> bool:
    """Whether an escalation to ``tier`` waits for an operator (``TIEROPS_TIERn_APPROVAL``)."""
    mode: str = getattr(settings, f"tier{tier}_approval", "auto")  # tier 0 is never escalated to
    return mode == "manual"


async def expire_approvals(db: Database, notifier: NoticeSink | None) -> list[ApprovalRow]:
    """Expire the pending approvals past their time (each one's session then needs attention,
    and people are told, following the messages of its incidents) and those whose incidents
    all resolved (nothing left to run; the resolution was the message)."""
    expired = await approval_store.expire_due(db)
    for a in expired:
        if (a["note"] or "").startswith(approval_store.RESOLVED_NOTE):
            log.info("approval #%d to run tier %d expired: %s", a["id"], a["tier"], a["note"],
                     extra={"session": a["session_pk"], "chain": a["chain_id"], "tier": a["tier"]})
            continue
        log.warning("approval #%d to run tier %d expired; session %s needs attention", a["id"], a["tier"],
                    a["session_pk"], extra={"session": a["session_pk"], "chain": a["chain_id"], "tier": a["tier"]})
        ids = await approval_store.incident_ids(db, a["id"], fresh=True)
        why = f"Approval #{a['id']} to run tier {a['tier']} expired: nobody approved or rejected it in time."
        incidents = await incident_store.get_incidents(db, ids, fresh=True)
        await notices.send(notifier, [notices.approval_expired_notice(a, incidents, why)])
    return expired
