"""Read a Bash tool call's command text the way a shell would, for the PreToolUse guard.

Why: the guard decides whether a session may run a command, and the command text hides what runs:
``sudo``/``env``/``timeout`` in front, ``cd x && …``, pipes, ``$(…)``, subshells, loop bodies,
``bash -c '…'``, ``eval`` and ``ssh host '…'``. :func:`read_command` parses with the real parser
(bashlex), unwraps those and returns every simple command the text would run, in order, with the
wrappers it stripped, the remote host and the files its redirections write. Rule matching
(:func:`matches_rule`) judges one simple command against Claude Code ``Bash(…)`` rules.
``app/engine/command_effects.py`` says what each command does.

What it deliberately does: it fails closed. Text it cannot read — a parser error, a here-document,
``$'…'`` quoting, a command inside ``${…}``, the ``time``/``case``/``[[``/``((`` constructs bashlex
lacks, nesting past :data:`MAX_DEPTH`, input past :data:`MAX_BYTES`, a NUL byte — gives
``parsed=False`` with the reason, which the guard treats as mutating. It never raises. A word from
an expansion keeps its literal text (``$(echo x)``) and is flagged as known only at run time, as is
a brace expansion; a relative path (``./cat``) is not the system program. Globs are not expanded.
It also corrects bashlex where it misreads: substitutions spanning lines, ``\\`` in double quotes.
"""

from __future__ import annotations

import logging
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import bashlex  # type: ignore[import-untyped]
import bashlex.errors  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

MAX_BYTES = 16 * 1024  # longer text is not read (bashlex takes seconds on 40-60 KB of input)
MAX_DEPTH = 10  # nested lists: substitutions, subshells, groups, loop bodies, bash -c/eval/ssh text

SYSTEM_DIRS = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/", "/usr/local/sbin/")
NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_TOO_DEEP = f"the command nests more than {MAX_DEPTH} levels deep; write it flatter"
_HEREDOC = "here-documents (<<) cannot be read; put the text in a file or pipe it in with printf"


def program_name(word: str) -> str:
    """The program a command word names: the basename for a system directory (``/usr/bin/rm`` →
    ``rm``), else the word itself (``./rm`` is somebody's file, not the system program)."""
    path = posixpath.normpath(word) if word.startswith("/") else word
    for prefix in SYSTEM_DIRS:
        if path.startswith(prefix) and "/" not in path[len(prefix):]:
            return path[len(prefix):]
    return word


def join_words(words: Sequence[str]) -> str:
    """Words joined back for messages: quoted only where a word holds blanks or is empty."""
    return " ".join(shlex.quote(w) if not w or any(c.isspace() or c in "'\"" for c in w) else w for w in words)


@dataclass(frozen=True)
class SimpleCommand:
    """One program the text runs: its words with wrappers and leading ``VAR=x`` stripped. No words:
    a redirection alone (``> f``), or that of ``bash -c``/``ssh`` whose commands are listed apart."""

    argv: tuple[str, ...]
    wrappers: tuple[str, ...] = ()  # what was stripped to reach argv, outermost first: ("sudo", "timeout")
    remote_host: str | None = None  # run on this host through ssh (user@ and ssh:// stripped)
    writes_files: tuple[str, ...] = ()  # redirection targets written (not /dev/null, not 2>&1)
    expands: bool = False  # a word is known only at run time ($X, $(…), or appended by xargs)

    @property
    def program(self) -> str:
        return program_name(self.argv[0]) if self.argv else ""

    @property
    def text(self) -> str:
        return join_words(self.argv)


@dataclass(frozen=True)
class Reading:
    """What a command text runs. ``parsed=False``: it could not be read; ``problem`` says why."""

    commands: tuple[SimpleCommand, ...]
    parsed: bool = True
    problem: str | None = None


class _Unreadable(Exception):
    """Raised inside the reader; ``str()`` is the operator's reason."""


@dataclass(frozen=True)
class _Context:
    depth: int = 0
    host: str | None = None
    wrappers: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()  # an enclosing compound's redirections: every command inside writes them
    expands: bool = False  # run by xargs: words may be appended or replaced ({}) at run time
    where: str = ""  # "in the text run by bash -c: " for nested problems

    def nested(self, **changes: Any) -> _Context:
        ctx = replace(self, depth=self.depth + 1, **changes)
        if ctx.depth > MAX_DEPTH:
            raise _Unreadable(_TOO_DEEP)
        return ctx


@dataclass
class _Word:
    text: str
    dynamic: bool


def read_command(text: str) -> Reading:
    """Every simple command ``text`` would run, in order; never raises."""
    try:
        if (size := len(text.encode("utf-8", "replace"))) > MAX_BYTES:
            return Reading((), False, f"the command is {size} bytes; commands over {MAX_BYTES} bytes "
                           f"({MAX_BYTES // 1024} KiB) are not read")
        if "\x00" in text:
            return Reading((), False, "the command holds a NUL byte, which no shell passes on")
        if _paren_depth(text) > MAX_DEPTH:  # before bashlex, which takes long on deep nesting
            raise _Unreadable(_TOO_DEEP)
        found: list[SimpleCommand] = []
        _read_text(text, _Context(), found)
        return Reading(tuple(found))
    except _Unreadable as exc:
        return Reading((), False, str(exc))
    except RecursionError:
        return Reading((), False, "the command nests too deeply to read")
    except Exception as exc:  # a reader bug or bashlex on odd input: unreadable, never a crash
        log.debug("shell command not read", exc_info=True)
        return Reading((), False, f"the command could not be read ({type(exc).__name__})")


def _paren_depth(text: str) -> int:
    """How deep parentheses nest outside single quotes: roughly how deep the text nests."""
    depth = deepest = 0
    for c in re.sub(r"'[^']*'", "", text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        deepest = max(deepest, depth)
    return deepest


def _read_text(source: str, ctx: _Context, out: list[SimpleCommand]) -> None:
    if all(not line.strip() or line.lstrip().startswith("#") for line in source.splitlines()):
        return  # blank or only comments: bashlex fails on those, a shell runs nothing
    try:
        trees = bashlex.parse(source)
    except RecursionError:
        raise
    except Exception as exc:
        raise _Unreadable(ctx.where + _parse_problem(source, exc)) from None
    for tree in trees:
        _node(tree, source, ctx, out)


def _parse_problem(source: str, exc: Exception) -> str:
    message = " ".join(str(exc).split())
    if re.search(r"<<-?\s*['\"]?[\w-]", source.replace("<<<", "")):
        return _HEREDOC
    if re.search(r"(?:^|[\s;&|(])\[\[\s", source):
        return "[[ … ]] cannot be read; use [ … ] or test"
    for word, what in (("time command", "the time keyword"), ("{pattern}", "case … esac"),
                       ("arithmetic", "arithmetic $((…))"), ("coproc", "coproc"), ("select", "select loops")):
        if isinstance(exc, NotImplementedError) and word in message:
            return f"{what} cannot be read; write the command without it"
    if isinstance(exc, NotImplementedError):
        return f"it uses a shell construct the parser does not support ({message[:80]})"
    if not isinstance(exc, bashlex.errors.ParsingError):  # bashlex failing inside on odd input
        return f"the shell parser failed on it ({type(exc).__name__})"
    return f"the shell parser could not read it: {message[:157] + '…' if len(message) > 160 else message}"


def _node(node: Any, src: str, ctx: _Context, out: list[SimpleCommand]) -> None:
    kind = str(getattr(node, "kind", ""))
    if kind == "command":
        _command(node, src, ctx, out)
    elif kind in ("list", "pipeline"):
        for part in node.parts:
            _node(part, src, ctx, out)
    elif kind == "compound":
        writes = [w for r in getattr(node, "redirects", []) if (w := _redirect(r, src, ctx, out))]
        inner = ctx.nested(writes=ctx.writes + tuple(writes))
        for part in node.list:
            _node(part, src, inner, out)
    elif kind in ("if", "for", "while", "until", "function"):  # a function's body is read as if it ran
        for part in node.parts:
            _node(part, src, ctx, out)
    elif kind in ("word", "assignment"):
        _expansions(node, src, ctx, out)
    elif kind == "redirect":
        _redirect(node, src, ctx, out)
    elif kind not in ("reservedword", "operator", "pipe"):
        raise _Unreadable(f"{ctx.where}the shell construct {kind or type(node).__name__!r} cannot be read")


def _expansions(word: Any, src: str, ctx: _Context, out: list[SimpleCommand]) -> bool:
    """Read the commands inside a word's substitutions (run before the word's own command, by the
    same shell); True when the word is only known at run time."""
    dynamic = False
    for part in getattr(word, "parts", []):
        kind = str(getattr(part, "kind", ""))
        if kind in ("commandsubstitution", "processsubstitution"):
            dynamic = True
            if (inner := _substitution_text(part, src)) is None:
                _node(part.command, src, ctx.nested(writes=()), out)
            else:  # read again: bashlex keeps only the first line of a substitution
                _read_text(inner, ctx.nested(writes=()), out)
        elif kind == "parameter":  # no value: a literal $ ("a$"), or $'…' (refused by _word_text)
            value = str(getattr(part, "value", "") or "")
            if any(s in value for s in ("$(", "`", "<(", ">(")):
                raise _Unreadable(f"{ctx.where}a command inside ${{…}} cannot be read; run it on its own")
            dynamic = dynamic or bool(value)
        elif kind != "tilde":
            raise _Unreadable(f"{ctx.where}the word part {kind!r} cannot be read")
    return dynamic


def _substitution_text(part: Any, src: str) -> str | None:
    """The text inside the ``$(…)``, ``<(…)``, ``>(…)`` or backquotes starting at the part, found
    anew: bashlex's end position stops at the first newline. None when no end is found."""
    start = i = int(part.pos[0])
    if src[i:i + 1] == "`":
        end = re.match(r"`((?:[^`\\]|\\.)*)`", src[i:], re.DOTALL)
        return re.sub(r"\\([\\`$])", r"\1", end.group(1)) if end else None
    stack, i = [")"], i + 2  # what closes each open context: ")" code, '"' a double-quoted string
    while i < len(src) and stack:
        c, code = src[i], stack[-1] == ")"
        if c == "\\":
            i += 1
        elif code and c in "'`#":  # a quoted string, a nested backquote, a comment: skipped
            if c == "#" and not src[i - 1].isspace():
                pass
            elif (i := src.find("\n" if c == "#" else c, i + 1)) < 0:
                return None
        elif c == '"':
            stack.pop() if not code else stack.append('"')
        elif c == "(" and (code or src[i - 1] == "$"):
            stack.append(")")
        elif c == ")" and code:
            stack.pop()
        i += 1
    return None if stack else src[start + 2:i - 1]


def _word_text(word: Any, src: str) -> tuple[str, bool]:
    """A word's value, and whether bash's brace expansion (``{a,b}``, ``{1..3}``) makes it several
    words at run time. For a literal word, quote removal as bash does it: bashlex drops every
    backslash inside double quotes, where bash keeps those not before $ ` " \\ or a newline."""
    value, raw = str(word.word), src[int(word.pos[0]):int(word.pos[1])]
    out: list[str] = []
    quote, unquoted, i = "", [], 0
    while i < len(raw):
        c = raw[i]
        if quote == "'":
            quote = "" if c == "'" else quote
            out.append(c if quote else "")
        elif c == "\\" and i + 1 < len(raw):
            i += 1
            keep = quote == '"' and raw[i] not in '$`"\\\n'
            out.append(("\\" if keep else "") + (raw[i] if raw[i] != "\n" else ""))
            unquoted.append(" ")
        elif c == '"' or (c == "'" and not quote):
            quote = "" if quote == c else c
        elif c == "$" and not quote and raw[i + 1:i + 2] in ("'", '"'):  # bashlex misreads both
            raise _Unreadable("$'…' and $\"…\" quoting cannot be read; use plain quotes")
        else:
            out.append(c)
            unquoted.append(" " if quote else c)
        i += 1
    braces = re.search(r"\{[^{}]*(?:,|\.\.)[^{}]*\}", "".join(unquoted)) is not None
    mine = "".join(out)
    if getattr(word, "parts", None) or mine.replace("\\", "") != value.replace("\\", ""):
        return value, braces  # expansions keep their literal text; positions off: bashlex's value
    return mine, braces


def _redirect(node: Any, src: str, ctx: _Context, out: list[SimpleCommand]) -> str | None:
    """The file a redirection writes, or None; substitutions in its target are read."""
    rtype = str(getattr(node, "type", ""))
    if getattr(node, "heredoc", None) is not None or rtype in ("<<", "<<-"):
        raise _Unreadable(ctx.where + _HEREDOC)
    target: Any = getattr(node, "output", None)
    if str(getattr(target, "kind", "")) != "word":
        return None  # 2>&1, >&-: a descriptor, not a file
    _expansions(target, src, ctx, out)
    name = _word_text(target, src)[0]
    return name if rtype in _WRITE_REDIRECTS and name not in NOT_FILES else None


def _command(node: Any, src: str, ctx: _Context, out: list[SimpleCommand]) -> None:
    words: list[_Word] = []
    writes = list(ctx.writes)
    for part in node.parts:
        kind = str(getattr(part, "kind", ""))
        if kind == "redirect":
            if (written := _redirect(part, src, ctx, out)) is not None:
                writes.append(written)
        elif kind in ("word", "assignment"):
            dynamic = _expansions(part, src, ctx, out)
            if kind == "word" or words:  # leading VAR=x assignments only set the environment
                text, braces = _word_text(part, src)
                words.append(_Word(text, dynamic or braces))
        else:
            raise _Unreadable(f"{ctx.where}the command part {kind!r} cannot be read")
    _unwrap(words, tuple(writes), ctx, out, list(ctx.wrappers), False)


# -- wrappers: programs that run the command after their options -------------------------------------------

@dataclass(frozen=True)
class OptionSpec:
    """How a program reads its options, enough to find its operands."""

    takes: str = ""  # short options that take a value (the rest of the cluster, else the next word)
    long_takes: frozenset[str] = frozenset()  # long options that take the next word when not --opt=value
    optional: str = ""  # short options whose value is only the rest of their cluster (mysql -pSECRET)
    operands: int = 0  # wrappers: words between the options and the command (timeout's DURATION)
    assignments: bool = False  # wrappers: VAR=x words may follow the options (env, sudo)


def option_spec(takes: str = "", long_takes: str = "", optional: str = "", operands: int = 0,
                assignments: bool = False) -> OptionSpec:
    return OptionSpec(takes, frozenset(long_takes.split()), optional, operands, assignments)


@dataclass(frozen=True)
class Args:
    """Arguments read the getopt way: ``options`` as (name, value or None), the ``operands``, and
    ``end``: where reading stopped (the first operand when it stops there, else the length)."""

    options: tuple[tuple[str, str | None], ...]
    operands: tuple[str, ...]
    end: int

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.options if name in names and value is not None]


def parse_args(args: Sequence[str], spec: OptionSpec, stop: bool = False) -> Args:
    """Read ``args``: options may come anywhere unless ``stop`` (then options end at the first
    operand, as for a wrapper whose command follows); ``--`` ends them in any case."""
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return Args(tuple(opts), (*operands, *args[i:]), i if stop else len(args))
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and name in spec.long_takes and i < len(args):
                value, i = args[i], i + 1
            opts.append((name, value if eq or name in spec.long_takes else None))
        elif arg.startswith("-") and len(arg) > 1:
            for j, ch in enumerate(arg[1:], 2):
                if ch in spec.takes or ch in spec.optional:
                    value = arg[j:]
                    if not value and ch in spec.takes and i < len(args):
                        value, i = args[i], i + 1
                    opts.append(("-" + ch, value or None))
                    break
                opts.append(("-" + ch, None))
        elif stop:
            return Args(tuple(opts), (), i - 1)
        else:
            operands.append(arg)
    return Args(tuple(opts), tuple(operands), len(args))


WRAPPERS: dict[str, OptionSpec] = {
    "sudo": option_spec("ugpCrtUDRT", "--user --group --prompt --close-from --role --type --other-user "
                        "--chdir --chroot --command-timeout", assignments=True),
    "doas": option_spec("uC"),
    "env": option_spec("uC", "--unset --chdir", assignments=True),
    "nice": option_spec("n", "--adjustment"),
    "ionice": option_spec("cnpPu", "--class --classdata --pid --pgid --uid"),
    "timeout": option_spec("sk", "--signal --kill-after", operands=1),
    "nohup": option_spec(),
    "stdbuf": option_spec("ioe", "--input --output --error"),
    "chroot": option_spec("", "--userspec --groups", operands=1),
    "xargs": option_spec("adEILnPs", "--arg-file --delimiter --max-args --max-procs --max-chars "
                         "--process-slot-var", optional="eil"),
    "command": option_spec(),
    "exec": option_spec("a"),
    "time": option_spec("fo", "--format --output"),
    "busybox": option_spec(),
    "watch": option_spec("nq", "--interval --equexit", optional="d"),
}
_SSH = option_spec("BbcDEeFIiJLlmOopQRSWw")
_SHELL = option_spec("oO", "--rcfile --init-file")


def _unwrap(words: list[_Word], writes: tuple[str, ...], ctx: _Context, out: list[SimpleCommand],
            wrappers: list[str], expands: bool) -> None:
    """Strip wrappers and leading assignments; read the text a shell -c, eval, watch or ssh runs."""
    assignments = False  # VAR=x words may come next (after env and sudo)
    while words:
        name = "" if words[0].dynamic else program_name(words[0].text)
        args = [w.text for w in words[1:]]
        if assignments and _ASSIGNMENT.match(words[0].text):
            words = words[1:]
            continue
        if name in _SHELLS or name in ("eval", "watch", "ssh"):
            if (inner := _inner_text(name, args)) is None:
                break
            if writes:  # the files get the output of whatever runs inside: a command of no program
                out.append(SimpleCommand((), (*wrappers, name), ctx.host, writes))
            text, host = inner
            _read_text(text, ctx.nested(wrappers=(*wrappers, name), writes=(), host=host or ctx.host,
                                        expands=ctx.expands or expands,
                                        where=f"{ctx.where}in the text run by {name}: "), out)
            return
        spec = WRAPPERS.get(name)
        if spec is None:
            break
        assignments = spec.assignments
        parsed = parse_args(args, spec, stop=True)
        start = parsed.end + spec.operands
        if name == "command" and parsed.has("-v", "-V"):
            break  # command -v only says what a name is
        if name == "time":
            writes += tuple(v for v in parsed.values("-o", "--output") if v not in NOT_FILES)
        if start >= len(args):
            if name != "xargs":
                break  # nothing to run: the wrapper is the program (sudo -l, ionice -p 12, bare env)
            words, expands = [_Word("echo", False)], True  # xargs runs echo by default
        else:
            words, expands = words[start + 1:], expands or name == "xargs"
        wrappers.append(name)
    if not words and not writes:
        return  # only assignments
    out.append(SimpleCommand(tuple(w.text for w in words), tuple(wrappers), ctx.host, writes,
                             expands or ctx.expands or any(w.dynamic for w in words)))


def _inner_text(name: str, args: list[str]) -> tuple[str, str | None] | None:
    """The shell text ``bash -c TEXT``, ``eval WORDS``, ``watch WORDS`` (``sh -c`` text) or ``ssh HOST
    WORDS`` runs, with the host; None when there is none (a shell reading a script or its input, a
    login shell) or ssh options run local commands (ProxyCommand, LocalCommand, a config file)."""
    if name == "eval":
        return (" ".join(args), None) if args else None
    parsed = parse_args(args, _SHELL if name in _SHELLS else _SSH if name == "ssh" else WRAPPERS["watch"],
                        stop=True)
    rest = args[parsed.end:]
    if name in _SHELLS:
        return (rest[0], None) if rest and parsed.has("-c") else None
    if name == "watch":
        return ((join_words(rest) if parsed.has("-x", "--exec") else " ".join(rest)), None) if rest else None
    local = parsed.has("-F") or any(v.lower().replace(" ", "").startswith(
        ("proxycommand", "localcommand", "permitlocalcommand")) for v in parsed.values("-o"))
    if local or len(rest) < 2:
        return None
    return " ".join(rest[1:]), rest[0].split("://", 1)[-1].rsplit("@", 1)[-1]


# -- Claude Code permission rules ----------------------------------------------------------------------------

_RULE = re.compile(r"\s*Bash\s*(?:\((?P<pattern>.*)\))?\s*", re.DOTALL)


def matches_rule(rule: str, cmd: SimpleCommand) -> bool:
    """Whether a Claude Code rule (``Bash``, ``Bash(systemctl status *)``, ``Bash(npm run test:*)``) allows
    one simple command, matched after its wrappers are stripped and with a system directory's program by
    its basename (``sudo /usr/bin/systemctl status api`` matches ``Bash(systemctl status *)``): wrappers,
    remote host and redirections are the caller's to judge. ``*`` is any characters; a trailing `` *``
    also matches the bare command; a trailing ``:*`` is a prefix on a word boundary. Other tools' rules
    never match."""
    m = _RULE.fullmatch(rule)
    if m is None:
        return False
    pattern = (m.group("pattern") or "").strip()
    if pattern in ("", "*"):
        return True
    text = join_words((cmd.program, *cmd.argv[1:])) if cmd.argv else ""
    tail = ""
    if pattern.endswith((":*", " *")):
        pattern, tail = pattern[:-2].rstrip(), r"(?:\s.*)?"
    regex = ".*".join(re.escape(piece) for piece in pattern.split("*")) + tail
    return re.fullmatch(regex, text, re.DOTALL) is not None


def allowed_by_rules(rules: Sequence[str], cmd: SimpleCommand) -> bool:
    """Whether any of ``rules`` (a list, as ``--allowedTools`` splits them) allows ``cmd``."""
    if isinstance(rules, str):
        raise TypeError("allowed_by_rules takes a list of rules; split the comma-separated setting first")
    return any(matches_rule(rule, cmd) for rule in rules)
