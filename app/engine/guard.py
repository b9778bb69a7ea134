"""The PreToolUse guard's decisions: may this tool call of this session run, and by which rule.

Why a module of its own: every other guard acts around a session (a proposal refused before an
escalation, an action flagged after the fact); this one is asked by the CLI before each Bash,
editing or MCP call runs (the hook protocol: reference §11a, fixtures ``o_pretooluse_hook_*``).
The session's :class:`GuardPolicy` is fixed when it starts and stored with it; :func:`decide`
is pure, :func:`judge` loads, decides, counts cooldowns and records.

What it deliberately does: it never answers "allow" to the CLI (that would bypass the CLI's own
permission rules); it only denies or stays silent. A command is read as a shell would
(``shell_commands.py``); one it cannot read is denied. Mutating commands are denied in a dry
run, in tier 1 (it observes), in a manual-approval tier nobody approved, and over a cooldown;
a restart-like command is counted against its cooldown at the moment it is allowed. The rules,
in order, and their names: ARCHITECTURE.md, "The guard".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.clock import shift, utcnow
from app.engine import cooldowns as cooldown_engine
from app.engine.command_effects import Effect, reading_effects
from app.engine.mcp_policy import allowed_by, env_name, setting_for
from app.engine.shell_commands import SimpleCommand, allowed_by_rules, matches_rule, read_command
from app.store import guard as store
from app.store.db import Database

log = logging.getLogger(__name__)

EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
MATCHER = "Bash|Edit|Write|MultiEdit|NotebookEdit|mcp__.*"  # the tool calls the hook is asked about
OBSERVE_TIER = 1

# Rule names, as stored, shown and counted in /metrics.
UNREADABLE, TOOL_RULES, DRY_RUN, OBSERVE, APPROVAL, COOLDOWN, MCP, NO_POLICY, PASS = (
    "unreadable", "tool-rules", "dry-run", "observe-only", "approval", "cooldown", "mcp-tools", "no-policy", "pass")


@dataclass(frozen=True)
class GuardPolicy:
    """What a session may do, fixed at its start (``sessions.guard_policy``)."""

    tier: int
    dry_run: bool = False
    allowed_tools: tuple[str, ...] = ()  # the run's --allowedTools
    disallowed_tools: tuple[str, ...] = ()
    mcp_tools: tuple[str, ...] = ()  # patterns of the MCP tools this run may call
    cooldowns: str = ""  # TIEROPS_COOLDOWNS as the session started
    approval_required: bool = False  # the tier's approval is manual
    approved_by: str | None = None  # who let it run: "approval #N", "an operator (Run Now)"; None: nobody
    pending_approval: int | None = None  # the approval it waits for, when known

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GuardPolicy:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("allowed_tools", "disallowed_tools", "mcp_tools"):
            values[key] = tuple(str(x) for x in values.get(key) or ())
        return cls(**values)


@dataclass(frozen=True)
class Decision:
    allow: bool
    rule: str
    reason: str
    command: str | None = None
    mutating: bool = False
    counted: list[tuple[str, str | None]] = field(default_factory=list)  # (kind, service) to count if allowed

    @property
    def word(self) -> str:
        return "allow" if self.allow else "deny"


def _deny(rule: str, reason: str, command: str | None, mutating: bool = False) -> Decision:
    return Decision(False, rule, reason, command, mutating)


def decide(policy: GuardPolicy, tool_name: str, tool_input: Mapping[str, Any]) -> Decision:
    """The decision before cooldowns (which need the store: :func:`judge`)."""
    if tool_name == "Bash":
        return _bash(policy, tool_input.get("command"))
    if tool_name in EDIT_TOOLS:
        path = str(tool_input.get("file_path") or tool_input.get("notebook_path") or "")[:500] or None
        what = f"{tool_name} {path or ''}".strip()
        if policy.dry_run:
            return _deny(DRY_RUN, f"dry run: {tool_name} changes a file; report what you would change as an action "
                                  "with result dry-run instead", what, True)
        if policy.tier <= OBSERVE_TIER:
            return _deny(OBSERVE, f"tier {policy.tier} observes: it does not change files ({tool_name})", what, True)
        if (why := _unapproved(policy)) is not None:
            return _deny(APPROVAL, why, what, True)
        return Decision(True, PASS, f"{tool_name} is left to the tier's tool rules", what, True)
    if tool_name.startswith("mcp__"):
        setting = setting_for(policy.tier, policy.dry_run)
        run = f"tier {policy.tier}{' in a dry run' if policy.dry_run else ''}"
        allowed, why = allowed_by(tool_name, policy.mcp_tools, env_name(setting) if setting else "no setting", run)
        return Decision(True, PASS, why, tool_name) if allowed else _deny(MCP, why, tool_name)
    return Decision(True, PASS, f"{tool_name} is not guarded", None)


def _bash(policy: GuardPolicy, command: Any) -> Decision:
    if not isinstance(command, str):
        return _deny(UNREADABLE, "the Bash call carries no command text", None)
    reading = read_command(command)
    if not reading.parsed:
        return _deny(UNREADABLE, f"TierOps cannot read this command ({reading.problem}); run it as simple commands "
                                 "it can read", command)
    effects = reading_effects(reading)
    changing = [(cmd, eff) for cmd, eff in effects if eff.mutating]
    if changing and policy.dry_run:
        cmd, eff = changing[0]
        return _deny(DRY_RUN, f"dry run: `{_short(cmd)}` {eff.why}; do not change anything — report it as an action "
                              "with result dry-run", command, True)
    bash_rules = [r for r in policy.allowed_tools if r.strip().startswith("Bash")]
    denied_rules = [r for r in policy.disallowed_tools if r.strip().startswith("Bash")]
    for cmd, _ in effects:
        if not cmd.argv:
            continue
        if any(matches_rule(r, cmd) for r in denied_rules):
            return _deny(TOOL_RULES, f"`{_short(cmd)}` is refused for tier {policy.tier} by its disallowed rules", command)
        if bash_rules and not allowed_by_rules(bash_rules, cmd):
            return _deny(TOOL_RULES, f"`{_short(cmd)}` is not among tier {policy.tier}'s allowed commands "
                                     f"({_rules_text(bash_rules)})", command)
    if not changing:
        return Decision(True, PASS, "reads only", command)
    cmd, eff = changing[0]
    what = f"`{_short(cmd)}` {eff.why}"
    if policy.tier <= OBSERVE_TIER:
        return _deny(OBSERVE, f"tier {policy.tier} observes and changes nothing: {what}; escalate instead", command, True)
    if (why := _unapproved(policy)) is not None:
        return _deny(APPROVAL, f"{why}: {what}", command, True)
    counted = list(dict.fromkeys((e.kind, e.service) for _, e in changing if e.kind))
    return Decision(True, PASS, f"{what}; tier {policy.tier} may change state", command, True,
                    [(k, s) for k, s in counted if k is not None])


def _unapproved(policy: GuardPolicy) -> str | None:
    if not policy.approval_required or policy.approved_by:
        return None
    waiting = f" (waiting for approval #{policy.pending_approval})" if policy.pending_approval else ""
    return f"tier {policy.tier} changes nothing before an operator approves it{waiting}"


def _short(cmd: SimpleCommand) -> str:
    text = cmd.text
    host = f"ssh {cmd.remote_host}: " if cmd.remote_host else ""
    return host + (text if len(text) <= 200 else text[:197] + "...")


def _rules_text(rules: Sequence[str]) -> str:
    text = ", ".join(rules)
    return text if len(text) <= 300 else text[:297] + "..."


async def judge(db: Database, session_pk: int, hook: Mapping[str, Any], *, now: str | None = None) -> Decision:
    """The hook's question answered for ``session_pk``: the session's policy, :func:`decide`,
    then the cooldowns of what it would start; the decision is recorded either way."""
    tool_name = str(hook.get("tool_name") or "")
    raw_input = hook.get("tool_input")
    tool_input: Mapping[str, Any] = raw_input if isinstance(raw_input, Mapping) else {}
    tool_use_id = hook.get("tool_use_id") if isinstance(hook.get("tool_use_id"), str) else None
    row = await store.session_guard(db, session_pk)
    if row is None or not isinstance(row["guard_policy"], Mapping):
        decision = _deny(NO_POLICY, f"session {session_pk} has no guard policy in this database; TierOps did not "
                                    "start it, or it was pruned", _command(tool_input))
        if row is None:
            return decision  # nothing to record it on
    else:
        try:
            policy = GuardPolicy.from_json(row["guard_policy"])
        except (TypeError, ValueError) as exc:
            policy = None
            decision = _deny(NO_POLICY, f"session {session_pk}'s guard policy cannot be read ({exc})",
                             _command(tool_input))
        if policy is not None:
            decision = decide(policy, tool_name, tool_input)
            if decision.allow and decision.counted:
                decision = await _count(db, session_pk, policy, decision, now or utcnow())
    kind, service = decision.counted[0] if decision.counted else (None, None)
    await store.record_decision(db, session_pk, tool_use_id=tool_use_id, tool_name=tool_name or "?",
                                command=decision.command, decision=decision.word, rule=decision.rule,
                                reason=decision.reason, mutating=decision.mutating, kind=kind, service=service,
                                now=now)
    log.log(logging.WARNING if not decision.allow and decision.mutating else logging.INFO,
            "guard: session %d %s %s (%s): %s", session_pk, decision.word, tool_name, decision.rule, decision.reason,
            extra={"session": session_pk})
    return decision


async def _count(db: Database, session_pk: int, policy: GuardPolicy, decision: Decision, now: str) -> Decision:
    """Claim a cooldown slot for each limited (kind, service) the command would act on; the first
    one over its limit denies the call (slots already claimed by it stay: it was attempted)."""
    limits = cooldown_engine.parse_limits(policy.cooldowns) if policy.cooldowns.strip() else {}
    for kind, service in decision.counted:
        limit = limits.get(cooldown_engine.kind_of(kind))
        if limit is None:
            continue
        after = shift(now, -limit.window_s)
        added, stamps = await store.claim_action(
            db, session_pk, kind=limit.kind, service=service, after=after, now=now, limit=limit.count,
            counts=_same_kind(limit.kind),
            note=f"allowed by the guard: {decision.command or ''}"[:500])
        if not added:
            oldest = stamps[len(stamps) - limit.count] if limit.count > 0 and stamps else None
            nxt = f"; next allowed at {shift(oldest, limit.window_s)}" if oldest else ""
            return Decision(False, COOLDOWN,
                            f"{limit.kind} {cooldown_engine.service_name(service)}: {len(stamps)} of {limit.count} "
                            f"in {limit.window_text} used{nxt}; propose it instead (an action with result proposed)",
                            decision.command, True, decision.counted)
    return decision


def _same_kind(kind: str) -> Callable[[str], bool]:
    return lambda action: cooldown_engine.kind_of(action) == kind


def _command(tool_input: Mapping[str, Any]) -> str | None:
    value = tool_input.get("command")
    return value if isinstance(value, str) else None


def effect_lines(command: str) -> list[tuple[SimpleCommand, Effect]]:
    """What ``tierops guard check`` shows besides the decision: each command and what it does."""
    reading = read_command(command)
    return reading_effects(reading) if reading.parsed else []
