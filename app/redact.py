"""Redaction of secrets before anything is stored: agent and tool output is untrusted and may echo
credentials it found on a host. Stream lines, prompts, alerts and log records all pass here.

* exact values: the dashboard token, and the values (8+ characters) of environment variables whose
  names look secret (:func:`secret_name`: ``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, …,
  and the names tools give credentials: ``PGPASSWORD``, ``MYSQL_PWD``, ``REDISCLI_AUTH``, ``*_DSN``);
* common credential shapes: ``sk-…`` keys, GitHub, AWS and Slack tokens, JWTs, PEM private keys,
  ``Authorization: Bearer …``, ``password=…``/``"api_key": "…"`` assignments in any case style
  (``"SessionToken"``, ``privateKey``, ``PGPASSWORD=…``), and docker's ``"auth"``.

Text cut to a length is redacted first and cut after (:func:`redact_then_cut`): a secret cut in two
no longer has its shape. Each match becomes ``[REDACTED]``; JSON stays valid because the patterns
stop at quotes and backslashes. Speed: every line is first searched with one RE2 pattern (all rules
in one linear pass, ~0.6 s per 168 MiB in bench/ingest.py, where a Python ``re`` alternation took
8-26 s); only lines that hit are rewritten with the Python rules. Defence in depth, not a
guarantee: a secret in an unknown shape passes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import re2

from app.errors import ConfigError

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

MASK = "[REDACTED]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|COOKIE"
                          r"|(?:^|_)(?:PWD|PASS|PW|AUTH|DSN)(?:$|_)", re.I)
# Names that match but hold no secret: PWD is the working directory, SSH_AUTH_SOCK a socket path
# (masking them would blank every path in a transcript); TIEROPS_TOKEN_FILE is a path too.
_NOT_SECRET_NAMES = {"TIEROPS_TOKEN_FILE", "PWD", "SSH_AUTH_SOCK"}
# A value that is only a ${VAR} reference (an MCP config's, a shell's) names a secret, it holds none:
# TierOps' own command lines carry such references (engine/mcp_launch) and are stored as they ran.
# RE2 has no lookahead: the prefilter drops it (a superset still).
_NOT_A_REFERENCE = r"(?!\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}\s\"'\\]*)?\}(?:[\s\"'\\&;,]|$))"
# (literal hints, pattern): a pattern runs only on a line containing one of its hints, so the
# common line costs a few substring searches (the regexes are slow over 100k lines; bench/ingest.py).
_RULES: list[tuple[tuple[str, ...], str]] = [
    # An AWS secret access key beside its access key id ("AKIA…,secret" in a credentials CSV, or
    # both on one line): by shape, before the id itself is masked.
    (("AKIA", "ASIA"), r"(?P<keep>\b(?:AKIA|ASIA)[0-9A-Z]{16}\b[^A-Za-z0-9/+\n]{1,40}?)[A-Za-z0-9/+]{40}"
                       r"(?P<tail>[^A-Za-z0-9/+]|$)"),
    (("sk-",), r"sk-ant-[A-Za-z0-9_\-]{8,}|\bsk-[A-Za-z0-9_\-]{20,}"),
    (("k_live_", "k_test_"), r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    (("npm_",), r"\bnpm_[A-Za-z0-9]{36}"),
    (("AIza",), r"\bAIza[0-9A-Za-z_\-]{35}"),
    (("AKIA", "ASIA"), r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (("xox", "xapp-"), r"\bxox[abposrce]-[A-Za-z0-9\-]{10,}|\bxapp-[A-Za-z0-9\-]{10,}"),
    (("hooks.slack.com",), r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]+"),
    (("eyJ",), r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    # PEM private keys of every kind (RSA, EC, DSA, OPENSSH, ENCRYPTED, PKCS#8, PGP blocks); a key
    # cut off before its END line (`head key.pem`) is masked up to where the base64 stops. The
    # body never crosses an unescaped quote: a key cut short must not run on to another string's
    # END line and swallow the JSON between them.
    (("PRIVATE KEY",), r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:(?:[^\"\\]|\\.)*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
                      r"|(?:\\[nr]|[\sA-Za-z0-9+/=:,-])*)"),
    # Passwords in URLs: scheme://user:PASSWORD@host keeps the user and host.
    (("://",), r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.\-]*:(?:\\?/){2}[^\s:/@\"'\\]*:)[^\s@/\"'\\]+(?P<tail>@)"),
    # kept prefix (group "keep"), secret after it: "Bearer X", "Authorization: Basic X",
    # password=X, "api_key": "X", DB_PASSWORD=X, stripe_secret_key: X — env, YAML, JSON and INI
    # shapes, also JSON-escaped inside a stream line (\"api_key\": \"X\").
    (("earer", "EARER"), r"(?P<keep>(?i:bearer)\s+)[A-Za-z0-9._~+/=\-]{12,}"),
    (("asic", "ASIC"), r"(?P<keep>(?i:authorization)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?(?i:basic)\s+)[A-Za-z0-9+/=]{6,}"),
    # Secret-named keys; the suffixes include the names tools give their credentials (MYSQL_PWD,
    # REDISCLI_AUTH, DOCKER_AUTH_CONFIG, RABBITMQ_DEFAULT_PASS, BORG_PASSPHRASE, SENTRY_DSN,
    # LDAP_BIND_PW, RABBITMQ_ERLANG_COOKIE) and key ids not of the AKIA shape (MinIO, R2).
    (("assw", "ASSW", "ecret", "ECRET", "oken", "OKEN", "_key", "_KEY", "-key", "-KEY", ".key", "pikey", "PIKEY",
      "redential", "REDENTIAL", "_pwd", "_PWD", "_pw", "_PW", "uth", "UTH", "_pass", "_PASS", "-pass", "dsn", "DSN",
      "ookie", "OOKIE"),
     r"(?P<keep>(?i:\b[a-z0-9_.\-]*(?:[_.\-](?:token|password|passwd|passphrase|pwd|pw|pass|key(?:[_-]?id)?"
     r"|credentials?|auth(?:[_-]?config)?|dsn|cookie)|secret[a-z0-9_.\-]*"
     r"|auth[_-]?token|api[_-]?key|access[_-]?token)"
     r"|\b(?:password|passwd|secret|apikey|authtoken|token|credentials?))"
     r"(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)" + _NOT_A_REFERENCE + r"[^\s\"'\\&;,]{4,}"),
    # Names with no separator before the secret word: run together as environment names
    # (PGPASSWORD, GITHUBTOKEN), or camelCase/PascalCase as SDK configs and the AWS CLI print them
    # ("SessionToken", refreshToken, privateKey, apiKey, accessKeyId). A bare "Key" suffix is not
    # enough (Alertmanager's "groupKey" is no secret): only the key names detect-secrets and the
    # SDKs use. The camelCase suffixes are case-sensitive after a lower-case letter or digit, and
    # every name must end there: "inputTokens" and "apiKeySource" (the CLI's own fields) do not match.
    (("oken", "OKEN", "assw", "ASSW", "assphrase", "ASSPHRASE", "key", "Key", "KEY", "Pwd", "Pass", "Dsn", "Cookie"),
     r"(?P<keep>(?:(?i:\b[a-z0-9]*(?:token|password|passwd|passphrase|(?:api|auth|service|account|db|database"
     r"|priv|private|client|secret|access|signing|encryption|master|license|integration|shared|hmac|storage)key"
     r"|accesskeyid))"
     r"|\b[A-Za-z0-9]*[a-z0-9](?:Pwd|Pass|Dsn|Cookie))"
     r"(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)" + _NOT_A_REFERENCE + r"[^\s\"'\\&;,]{4,}"),
    # docker's config.json and DOCKER_AUTH_CONFIG: {"auths": {"registry": {"auth": "<base64 user:password>"}}}
    (("auth",), r"(?P<keep>\\?[\"']auth\\?[\"']\s*:\s*\\?[\"'])[^\s\"'\\]{4,}"),
]
# A word boundary that also holds right after a JSON escape: in a raw stream line a token at the
# start of a line of tool output follows the two characters "\n", and \b between "n" and "g" of
# "\nghp_…" does not match (both are word characters).
_BOUNDARY = r"(?:(?<=\\[nrt])|\b)"

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# JSON escapes of printable ASCII (\u002d for "-", \/ for "/"): a secret written that way (a JS
# client, a JSON-encoded config) is matched on the decoded text. " and \ stay escaped.
_ASCII_ESCAPE = re.compile(r"\\u00([2-7][0-9a-fA-F])|\\/")


def _decode_ascii_escapes(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "\\/":
            return "/"
        char = chr(int(match.group(1), 16))
        return match.group(0) if char in "\"\\" or char == "\x7f" else char

    return _ASCII_ESCAPE.sub(one, text)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._values = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)
        self._rules = [(hints, re.compile(pattern.replace(r"\b", _BOUNDARY), re.S)) for hints, pattern in _RULES]
        if self._values:
            self._rules.append((tuple(self._values), re.compile("|".join(re.escape(v) for v in self._values))))
        # The same rules as one RE2 pattern: a line that does not match it needs no rewriting.
        self._prefilter = re2.compile("(?s)" + "|".join(f"(?:{_re2_safe(p)})" for _, p in _RULES) +
                                      "".join(f"|{re.escape(v)}" for v in self._values))
        # The screen: the prefilter plus the two escapes __call__ decodes. A text without a match of
        # this pattern comes back from __call__ unchanged (lone surrogates aside, which UTF-8 text
        # cannot hold), so a caller may search many lines joined into one buffer with it, one RE2
        # call per batch instead of per line (bench/ingest.py's 168 MiB: 0.31 s searched line by
        # line, 0.21 s per 1 MiB read), and redact only the lines where a match starts. Every
        # match within a line is a match within the joined text: the patterns' only anchor, ``$``
        # in the AWS rule, is an alternative to a class that matches the joining newline.
        self.screen_pattern: str = self._prefilter.pattern + r"|\\u00|\\/"

    @classmethod
    def from_environment(cls, extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environ is None else environ
        found = [v for k, v in env.items() if secret_name(k)]
        return cls([*found, *extra])

    def __call__(self, text: str) -> str:
        out = self._redact(text)
        if "\\u00" in text or "\\/" in text:
            decoded = _decode_ascii_escapes(out)
            if decoded != out:
                masked = self._redact(decoded)
                if masked != decoded:  # a secret hid behind escapes: keep the decoded, masked text
                    return masked
        return out

    def _redact(self, text: str) -> str:
        if not text.isascii():
            text = _LONE_SURROGATE.sub("\ufffd", text)  # RE2 (UTF-8) refuses it; a bad line costs only itself
        if not self._prefilter.search(text):
            return text
        for hints, regex in self._rules:
            for hint in hints:
                if hint in text:
                    text = regex.sub(_mask, text)
                    break
        return text

    def deep(self, value: Any) -> Any:
        """``value`` with every string in it (dict values and keys, list items) redacted."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.deep(v) for v in value]
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: self.deep(v) for k, v in value.items()}
        return value


def secret_name(name: str) -> bool:
    """True when a variable, key or header named ``name`` is expected to hold a secret (the names
    whose environment values are masked exactly; also what a problem report must not quote)."""
    return bool(_SECRET_NAME.search(name)) and name.upper() not in _NOT_SECRET_NAMES


def redact_then_cut(text: str, limit: int, redact: Callable[[str], str], *,
                    keep: Literal["head", "tail"] = "head", mark: str = "") -> str:
    """``text`` redacted, then cut to at most ``limit`` characters (its start, or with ``keep="tail"``
    its end), ``mark`` (e.g. "…") standing for what was cut off. Never the other way round: a
    token cut first loses the shape that identifies it (``ghp_`` + 36 characters, a ``Bearer``
    before it) and its remaining characters would pass unmasked."""
    text = redact(text)
    if len(text) <= limit:
        return text
    room = max(limit - len(mark), 0)
    return text[:room] + mark if keep == "head" else mark + text[len(text) - room:]


def _re2_safe(pattern: str) -> str:
    """The RE2 copy of a rule: RE2 rejects duplicate group names (the prefilter needs none) and has
    no lookbehind, so the word boundaries are dropped: the prefilter only has to be a superset."""
    return (pattern.replace(_NOT_A_REFERENCE, "").replace("(?P<keep>", "(").replace("(?P<tail>", "(")
            .replace(r"\b", ""))


def _mask(match: re.Match[str]) -> str:
    groups = match.groupdict()
    return (groups.get("keep") or "") + MASK + (groups.get("tail") or "")


def redactor_for(settings: Settings, extra: Iterable[str] = ()) -> Redactor:
    """The redactor every recorder uses: environment secrets plus the dashboard token, plus ``extra``
    (the secrets a session's MCP servers were given from files)."""
    try:
        token = settings.resolved_token()
    except ConfigError:  # a broken token file is reported where the token is needed (serve)
        token = None
    return Redactor.from_environment(extra=[*([token] if token else []), *extra])


def install_log_redaction(redact: Callable[[str], str]) -> None:
    """Redact every log record of this process, whichever logger or handler it goes to (nothing
    secret in any log line). Done in the record factory, the one place every record
    passes through: the template and string arguments are masked (a secret inside a non-string
    argument's repr passes), a traceback is formatted and masked."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_tierops_redacting", False):
        previous = previous._tierops_previous  # type: ignore[attr-defined]  # re-install: replace, don't stack

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            # The template and every string argument, keeping the args' shape: some formatters
            # read record.args themselves (uvicorn's access log unpacks its tuple).
            if isinstance(record.msg, str):
                record.msg = redact(record.msg)
            if isinstance(record.args, tuple):
                record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
            elif isinstance(record.args, dict):
                record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
            if record.exc_info and not record.exc_text:
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        except Exception:  # a log line must never raise; better the unformatted message than none
            record.msg, record.args = redact(str(record.msg)), None
        return record

    factory._tierops_redacting = True  # type: ignore[attr-defined]
    factory._tierops_previous = previous  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
