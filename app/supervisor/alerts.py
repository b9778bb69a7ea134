"""Alerts in: from parsed alerts to incidents, and to a tier-1 look when one opens.

Why here: alerts are applied to the incidents like a probe result (``store.alert_incidents``), but
what follows is the supervisor's business — start a cycle, or queue it while one runs, and start
queued runs when the cycle is free again. :func:`receive_alerts` is the one function every alert
goes through: a delivery is cut into batches (an alert group shares one incident with
``TIEROPS_ALERT_GROUPING=group``), each written in one transaction, escalated by the rules of
``engine/incidents.decide`` and told once; every alert still gets its own :class:`AlertOutcome`.
An alert storm loses nothing: every alert is recorded and told whatever the queue holds, queued
investigations are coalesced per service (``store.run_queue.enqueue_investigation``), and one
that can be neither started nor queued flags its incident for a human. :func:`work_queue` is the
server's queue worker. The supervisor is seen as a :class:`~app.supervisor.cycle_start.CycleStarter`
(no import of the scheduler, which imports this module); the story: ARCHITECTURE.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from app.clock import utcnow
from app.engine.alert_batches import AlertBatch, batches
from app.engine.alert_texts import alert_section, joined_line, joined_section
from app.engine.alerts import Alert, kept_labels
from app.engine.incidents import Verdict, apply_maintenance, decide
from app.errors import CycleBusy
from app.logs import oneline
from app.notify import messages as notices
from app.notify.messages import IncidentNews
from app.placement import labels_of, parse_runs_on
from app.store import alert_incidents, run_queue
from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.alert_incidents import AlertDelivery, AlertEntry
from app.store.incidents import Change
from app.supervisor import news
from app.supervisor.credentials import model_tiers_paused
from app.supervisor.cycle_start import CycleStart, CycleStarter
from app.supervisor.launch import CLINotFound, resolve_binary
from app.supervisor.node import current as current_node
from app.vocab import FIRST_MODEL_TIER, IncidentStatus, Trigger

log = logging.getLogger(__name__)

ALERT_TIER = FIRST_MODEL_TIER
QUEUE_POLL_S = 2.0  # seconds between the queue worker's looks when nothing wakes it (another node's runs)
LEFT_BY_A_KILLED_SERVER = "the server stopped after claiming this run and before its cycle started"


@dataclass(frozen=True)
class RunOutcome:
    """What happened about an investigation: a session started, a run queued (or joined), or why not."""

    session_pk: int | None = None
    queued_id: int | None = None
    why_not: str | None = None
    needs_human: bool = False  # the investigation should have run and could not: the incident needs attention
    coalesced: bool = False  # the incident joined a run already queued for its service

    def action_line(self) -> str:
        """What the incident's message says TierOps did."""
        if self.session_pk is not None:
            return (f"Investigating: tier {ALERT_TIER} started (session #{self.session_pk}); the outcome "
                    "follows.")
        if self.queued_id is not None and self.coalesced:
            return (f"Investigating: joined run #{self.queued_id}, queued for another incident of the same "
                    f"service (tier {ALERT_TIER}); the outcome follows.")
        if self.queued_id is not None:
            return (f"Investigating: tier {ALERT_TIER} queued as run #{self.queued_id} behind a running cycle; "
                    "the outcome follows.")
        tail = " A human must look." if self.needs_human else ""
        return f"Not investigated: {self.why_not or 'not escalated'}.{tail}"


@dataclass(frozen=True)
class AlertOutcome:
    alert: Alert
    change: Change | None  # None: a resolved alert with no open incident
    run: RunOutcome

    @property
    def change_word(self) -> str:
        """opened | updated | resolved | ignored (the API's ``change``): what the alert did to its
        incident (a resolved alert listed on an incident its group opens only updates it)."""
        if self.change is None:
            return "ignored"
        if self.change.kind == "opened":
            return "opened" if self.alert.firing else "updated"
        return "resolved" if self.change.kind == "resolved" else "updated"


def incident_changes(outcomes: Sequence[AlertOutcome]) -> list[Change]:
    """Each incident change of ``outcomes`` once (the alerts of a group share theirs), in order."""
    seen: set[int] = set()
    out: list[Change] = []
    for o in outcomes:
        if o.change is not None and id(o.change) not in seen:
            seen.add(id(o.change))
            out.append(o.change)
    return out


def delivery(batch: AlertBatch) -> AlertDelivery:
    """What the store writes for one batch: its alerts as listed, the incident's name, texts and links."""
    entries = [AlertEntry(fingerprint=a.fingerprint, firing=a.firing, severity=a.severity, title=a.title,
                          labels=kept_labels(a.labels), annotations=a.annotations, links=a.links,
                          starts_at=a.starts_at) for a in batch.alerts]
    return AlertDelivery(key=batch.key, source=batch.source, name=batch.name, title=batch.title,
                         service=batch.service, evidence=batch.evidence, detail=batch.detail, alerts=entries,
                         annotations=batch.annotations, group_resolved=batch.resolves_group, left_out=batch.left_out)


async def receive_alerts(supervisor: CycleStarter, alerts: Sequence[Alert]) -> list[AlertOutcome]:
    """Apply ``alerts`` to the incidents, one batch (a group, or an alert) at a time in the order
    they came, and start, queue or coalesce tier 1 once for each incident a batch opened that
    escalates. Returns one outcome per alert, in order; every alert is recorded, whatever the
    queue holds."""
    db, settings = supervisor.db, supervisor.settings
    cut = batches(alerts, settings.alert_grouping)
    done: dict[int, AlertOutcome] = {}
    told: list[IncidentNews] = []
    for batch in cut:
        now = utcnow()
        change = await alert_incidents.observe_alerts(db, delivery(batch), flap_count=settings.flap_count,
                                                      flap_window_s=settings.flap_window, now=now)
        _log_change(batch, change)
        held, ended = await apply_maintenance(db, settings, [change] if change is not None else [], now)
        verdict = decide([change] if change is not None else [], settings.escalate_after, now, maintenance=held,
                         after_maintenance=ended)
        run = await _investigate(supervisor, batch, change, verdict)
        done.update({id(a): AlertOutcome(a, change, run) for a in batch.alerts})
        # People hear of an alert's incident like of any other: one message per state change,
        # saying what TierOps did about it.
        for item in news.incident_news(verdict):
            item.action = None if item.change.kind == "resolved" else run.action_line()
            told.append(item)
    await notices.send(supervisor.notifier, news.notices(told))
    return [done[id(a)] for a in alerts]


def _log_change(batch: AlertBatch, change: Change | None) -> None:
    if change is None:
        log.info("alert %s resolved (%s): no open incident", batch.key, batch.source)
        return
    inc = change.incident
    level = logging.WARNING if change.kind in ("opened", "worsened") else logging.INFO
    if change.kind == "seen":
        level = logging.DEBUG
    log.log(level, "incident %d %s by %d alert(s): %s (%s, %s, %s)", inc["id"], change.kind, len(batch.alerts),
            inc["key"], inc["service"] or "-", inc["severity"], batch.source, extra={"incident": inc["id"]})


async def _investigate(supervisor: CycleStarter, batch: AlertBatch, change: Change | None,
                       verdict: Verdict) -> RunOutcome:
    """Start or queue tier 1 for an incident the alert opened (or whose maintenance window ended)."""
    settings = supervisor.settings
    if change is None:
        return RunOutcome(why_not="resolved alert without an open incident: nothing to do")
    if change.kind == "resolved":
        return RunOutcome(why_not="the alert resolved its incident")
    if change.kind != "opened" and change.incident["id"] not in verdict.after_maintenance:
        return RunOutcome(why_not="the incident was already open: an investigation starts only when an alert "
                                  "opens one")
    if not verdict.escalate:
        return RunOutcome(why_not=verdict.held[0][1] if verdict.held else "not escalated")
    if settings.max_tier < ALERT_TIER:
        return RunOutcome(why_not=f"TIEROPS_MAX_TIER={settings.max_tier}: no language model runs")
    incident = change.incident
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return await _needs_human(supervisor, incident["id"], str(exc))
    if (paused := await model_tiers_paused(supervisor.db, settings)) is not None:
        return await _needs_human(supervisor, incident["id"], paused)
    prompt = alert_section(batch.alerts, incident["id"], key=incident["key"])
    needs = parse_runs_on(settings.runs_on).needs(ALERT_TIER, [incident["service"]])
    labels = labels_of(settings.node_labels)
    here = needs <= labels  # else it waits for a node with the labels
    # Runs waiting that this node may run go first.
    if here and supervisor.has_capacity and await run_queue.queued_count(supervisor.db, labels) == 0:
        try:
            started = await supervisor.start_cycle(tier=ALERT_TIER, prompt=prompt, trigger=Trigger.ALERT,
                                                   incidents=[incident["id"]])
        except CycleBusy:
            pass  # queued below
        except Exception as exc:  # the cycle failed before its first session (logged by the supervisor)
            return RunOutcome(why_not=f"the cycle could not start: {oneline(exc)}")
        else:
            if started.session_pk is None:
                return RunOutcome(why_not="the cycle did not create its session in time; see /api/v1/sessions")
            await incident_store.mark_escalated(supervisor.db, [incident["id"]], started.session_pk,
                                                f"alert: investigated by tier {ALERT_TIER}")
            return RunOutcome(session_pk=started.session_pk)
    full = (f"the run queue is full (TIEROPS_ALERT_QUEUE_MAX={settings.alert_queue_max} runs wait for a free "
            "cycle, none of them for this service)")
    why_queued = "a cycle is running" if here else f"it needs a node labelled {', '.join(sorted(needs))}"
    key, service = incident["key"], incident["service"]
    queued = await run_queue.enqueue_investigation(
        supervisor.db, source=Trigger.ALERT, tier=ALERT_TIER, incident_id=incident["id"], service=service,
        prompt=prompt, addition=joined_section(batch.alerts, incident["id"], key=key, service=service),
        short=joined_line(batch.alerts, incident["id"], key=key, service=service), limit=settings.alert_queue_max,
        full_reason=attention_text(full), needs=",".join(sorted(needs)))
    if queued.row is None:
        log.warning("incident %d not investigated: %s", incident["id"], full, extra={"incident": incident["id"]})
        return RunOutcome(why_not=full, needs_human=True)
    row = queued.row
    if queued.kind == "coalesced":
        log.info("incident %d joined queued run #%d (same service %s)", incident["id"], row["id"],
                 incident["service"], extra={"incident": incident["id"]})
    else:
        log.info("incident %d: tier %d queued as run #%d (%s)", incident["id"], ALERT_TIER, row["id"], why_queued,
                 extra={"incident": incident["id"]})
    supervisor.queue_wake.set()
    return RunOutcome(queued_id=row["id"], coalesced=queued.kind == "coalesced")


async def _needs_human(supervisor: CycleStarter, incident_id: int, why: str) -> RunOutcome:
    """The investigation should start and cannot: the incident says why and needs attention."""
    await alert_incidents.needs_attention(supervisor.db, incident_id, attention_text(why))
    return RunOutcome(why_not=why, needs_human=True)


def attention_text(why: str) -> str:
    """What an incident whose investigation could not start or be queued says (its ``attention``)."""
    return f"not investigated: {why}; a human must look"


async def run_next_queued(supervisor: CycleStarter) -> int:
    """Start the oldest queued run this node may run (``TIEROPS_RUNS_ON``) while it has a free cycle
    slot (``TIEROPS_MAX_CONCURRENT``): how many started. A run that cannot start (tier above
    TIEROPS_MAX_TIER, the cycle failing before its session) or is no longer needed (its incident
    resolved meanwhile) is marked failed and the next one is tried."""
    db = supervisor.db
    node = current_node(db)
    labels = labels_of(supervisor.settings.node_labels)
    started_count = 0
    while supervisor.has_capacity:
        if await run_queue.queued_count(db, labels) == 0:  # a read: the poll of an empty queue writes nothing
            break
        row = await run_queue.claim_next(db, node_id=node.id if node is not None else None, labels=labels)
        if row is None:
            break
        if (started := await _start_queued(supervisor, row)) is None:
            break
        started_count += int(started)
    return started_count


async def _start_queued(supervisor: CycleStarter, row: run_queue.QueuedRunRow) -> bool | None:
    """Start the claimed run ``row``: True; False when it was failed (the next one may start); None
    when no cycle slot was free after all (it is back in the queue)."""
    db, settings = supervisor.db, supervisor.settings
    if row["tier"] > settings.max_tier:
        await run_queue.mark_failed(db, row["id"], f"tier {row['tier']} is above TIEROPS_MAX_TIER="
                                                   f"{settings.max_tier}")
        return False
    listed = row["incident_ids"] or ([row["incident_id"]] if row["incident_id"] is not None else [])
    found = await incident_store.get_incidents(db, listed, fresh=True)
    open_ids = [i["id"] for i in found if i["status"] != IncidentStatus.RESOLVED]
    if found and not open_ids:  # (incidents removed by a prune: the run still runs)
        names = ", ".join(f"#{i}" for i in listed)
        await run_queue.mark_failed(db, row["id"], f"skipped: incident {names} resolved before a cycle was free"
                                    if len(listed) == 1 else f"skipped: incidents {names} all resolved before a "
                                                             "cycle was free")
        return False
    try:
        started = await _start(supervisor, row, open_ids)
    except CycleBusy:  # another trigger took the cycle first: wait for the next turn
        await run_queue.requeue(db, row["id"])
        return None
    except Exception as exc:
        why = f"the cycle could not start: {type(exc).__name__}: {oneline(exc)}"
        await run_queue.mark_failed(db, row["id"], why)
        log.warning("queued run #%d failed: %s", row["id"], why)
        return False
    pk = started.session_pk
    await run_queue.mark_started(db, row["id"], pk, None if pk is not None else
                                 "the cycle did not create its session in time; see /api/v1/sessions")
    if pk is not None and open_ids and row["parent_session_pk"] is None:
        await incident_store.mark_escalated(db, open_ids, pk,
                                            f"alert: investigated by tier {row['tier']} (queued run #{row['id']})")
    log.info("queued run #%d started: session %s, tier %d", row["id"], pk, row["tier"],
             extra={"session": pk, "tier": row["tier"]})
    return True


async def _start(supervisor: CycleStarter, row: run_queue.QueuedRunRow, open_ids: list[int]) -> CycleStart:
    """The cycle of a claimed run: an investigation from its tier, or the rest of a chain another
    node could not run (its parent session and handoff)."""
    if row["parent_session_pk"] is None:
        trigger = Trigger.ALERT if row["source"] == Trigger.ALERT else Trigger.MANUAL
        return await supervisor.start_cycle(tier=row["tier"], prompt=row["prompt"], trigger=trigger,
                                            incidents=open_ids)
    parent = await session_store.get_session(supervisor.db, row["parent_session_pk"], fresh=True)
    if parent is None:
        raise LookupError(f"session {row['parent_session_pk']}, whose chain this run continues, no longer exists")
    approved = row["source"] == "approval"
    return await supervisor.start_cycle(tier=row["tier"], trigger=Trigger.ESCALATION, incidents=open_ids,
                                        parent=parent, handoff=row["handoff"] if approved else None,
                                        handoff_incidents="" if approved else row["handoff"] or "")


async def work_queue(supervisor: CycleStarter, poll: float = QUEUE_POLL_S) -> None:
    """The server's queue worker, until cancelled: first fail the claims a killed server left,
    then start queued runs whenever the cycle is free (woken by a cycle's end or a new run, and
    every ``poll`` s)."""
    failed = await run_queue.fail_unfinished_claims(supervisor.db, LEFT_BY_A_KILLED_SERVER,
                                                    node.id if (node := current_node(supervisor.db)) is not None else None)
    if failed:
        log.warning("%d queued run(s) left started by a stopped server marked failed", failed)
    while True:
        supervisor.queue_wake.clear()
        try:
            await run_next_queued(supervisor)
        except Exception:  # storage trouble now must not end the worker
            log.exception("the run queue worker failed; trying again in %.0f s", poll)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(supervisor.queue_wake.wait(), poll)
