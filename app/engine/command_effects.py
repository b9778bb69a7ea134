"""What a simple command does to a host: read-only, or mutating with an action kind and service.

Why: the PreToolUse guard lets observing tiers run only commands known to be read-only, and counts
the actions of remediating tiers against the cooldown limits (``TIEROPS_COOLDOWNS``: ``restart``,
``redeploy``), so it needs a command's kind and the service it acts on. ``shell_commands`` reads
the text; this module judges each simple command it found.

What it deliberately does: an allowlist. A program is read-only only when listed here and, where
flags matter, none of its flags writes, sends or runs anything (``sed -i``, ``curl -X POST``,
``find -delete``; psql/mysql only with select/show/explain statements). Every other program is
mutating with kind None ("not known to be read-only"). Such a read-only verdict is withdrawn when an
argument is known only at run time (``sed $FLAGS f``). A redirection to a file makes a command
mutating (kind ``write`` unless it has another). Kinds (:data:`KINDS`): restart, redeploy
(``compose up``, ``kubectl apply/set/replace``, ``docker service update``), stop, start, reload,
kill, reboot, scale, rollback, delete, write. The service is the first unit, container or
deployment named, ``.service`` stripped; None for host-wide actions and when named by an expansion.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.shell_commands import NOT_FILES, OptionSpec, Reading, SimpleCommand, option_spec, parse_args

log = logging.getLogger(__name__)

KINDS = frozenset({"restart", "redeploy", "stop", "start", "reload", "kill", "reboot", "scale", "rollback",
                   "delete", "write"})


@dataclass(frozen=True)
class Effect:
    mutating: bool
    kind: str | None = None  # one of KINDS, or None (read-only, or a change of no counted kind)
    service: str | None = None
    why: str = ""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _reads(why: str) -> Effect:
    return Effect(False, None, None, why)


def _changes(kind: str | None, why: str, service: str | None = None) -> Effect:
    return Effect(True, kind, service, why)


def effect(cmd: SimpleCommand) -> Effect:
    """What one simple command does (its wrappers and remote host are the caller's to judge)."""
    base = _program_effect(cmd)
    if cmd.writes_files and (not base.mutating or base.kind is None):
        files = ", ".join(cmd.writes_files)
        why = f"writes {files} through a redirection" if not base.mutating else f"{base.why}; writes {files}"
        return Effect(True, "write", base.service, why)
    return base


def reading_effects(reading: Reading) -> list[tuple[SimpleCommand, Effect]]:
    return [(cmd, effect(cmd)) for cmd in reading.commands]


def is_read_only(reading: Reading) -> bool:
    """The text was read and none of its commands is mutating."""
    return reading.parsed and not any(effect(cmd).mutating for cmd in reading.commands)


def _program_effect(cmd: SimpleCommand) -> Effect:
    if not cmd.argv:
        return _reads("runs no program")
    name, args = cmd.program, list(cmd.argv[1:])
    if "$" in name or "`" in name:
        return _changes(None, "the program is named by an expansion, known only at run time")
    if name in READERS:
        return _reads(f"{name} only reads")
    if name in PROGRAM_KINDS:
        kind = PROGRAM_KINDS[name]
        if name == "kill" and args[:1] in (["-l"], ["-L"], ["-0"]):
            return _reads("kill -l/-0 sends no signal")
        return _changes(kind, f"{name} {_KIND_WORDS[kind]}")
    check = CHECKS.get(name)
    if check is None:
        return _changes(None, UNJUDGED.get(name, f"{name} is not known to be read-only"))
    result = check(name, args)
    if not result.mutating and cmd.expands and name not in TOLERANT:
        return _changes(None, f"{name} has arguments known only at run time, which could change what it does")
    return result


def _service(word: str | None) -> str | None:
    if not word or "$" in word or "`" in word:
        return None
    return word.removesuffix(".service")


READERS = _words(
    "cat head tail less more tac nl wc cut tr column fold grep egrep fgrep zgrep zcat jq echo printf "
    "true false test [ : cd pwd sleep which type whereis command printenv env id whoami groups uname uptime w who "
    "last nproc free df du ps pgrep pidof pstree netstat lsof lsblk blkid findmnt vmstat iostat mpstat "
    "getent ping dig nslookup host traceroute tracepath mtr stat ls readlink realpath basename "
    "dirname md5sum sha1sum sha256sum sha512sum cmp diff strings od hexdump locale pg_isready set export "
    "unset exit return wait shift local read declare")
PROGRAM_KINDS = {
    **dict.fromkeys(("rm", "rmdir", "unlink", "shred"), "delete"),
    **dict.fromkeys(("cp", "mv", "install", "ln", "mkdir", "touch", "chmod", "chown", "chgrp", "truncate", "dd"),
                    "write"),
    **dict.fromkeys(("kill", "pkill", "killall", "skill"), "kill"),
    **dict.fromkeys(("reboot", "shutdown", "poweroff", "halt"), "reboot"),
}
_KIND_WORDS = {"delete": "deletes files", "write": "writes files", "kill": "signals processes",
               "reboot": "reboots or powers off the host", "": "may write, send or run something"}
UNJUDGED = {"ssh": "ssh without a remote command (or with options that run local commands) cannot be judged",
            **dict.fromkeys(("bash", "sh", "zsh", "dash"), "a shell reading a script or its input cannot be judged")}
# Checks whose read-only verdict an expanded argument cannot turn: the verb is a literal word.
TOLERANT = frozenset({"systemctl", "service", "supervisorctl", "docker", "docker-compose", "kubectl", "timedatectl",
                      "hostnamectl", "date"})

Check = Callable[[str, list[str]], Effect]


def _verb_effect(name: str, verb: str, reads: frozenset[str] | set[str], kinds: dict[str, str],
                 service: str | None) -> Effect:
    """Shared tail of the services' checks: a read verb, a verb of a counted kind, or another change."""
    if verb in reads:
        return _reads(f"{name} {verb} only reads")
    if verb in kinds:
        return _changes(kinds[verb], f"{name} {verb} changes a service's state", service)
    return _changes(None, f"{name} {verb} is not known to be read-only", service)


_SYSTEMCTL = option_spec("tpHMsnoP", "--type --property --host --machine --signal --lines --output --state "
                         "--root --kill-whom --kill-value --job-mode --what --timestamp --when --message")
SYSTEMCTL_READS = _words(
    "status is-active is-enabled is-failed is-system-running show list-units list-unit-files list-timers "
    "list-sockets list-dependencies list-jobs list-machines list-paths list-automounts cat help get-default "
    "show-environment")
SYSTEMCTL_KINDS = {
    **dict.fromkeys(("restart", "try-restart", "reload-or-restart", "try-reload-or-restart", "condrestart",
                     "force-reload"), "restart"),
    **dict.fromkeys(("reload", "daemon-reload", "daemon-reexec"), "reload"),
    "start": "start", "stop": "stop", "kill": "kill",
    **dict.fromkeys(("reboot", "poweroff", "halt", "kexec", "soft-reboot"), "reboot"),
}


def _systemctl(name: str, args: list[str]) -> Effect:
    ops = parse_args(args, _SYSTEMCTL).operands
    if not ops:
        return _reads("systemctl without a verb lists units")
    host_wide = SYSTEMCTL_KINDS.get(ops[0]) == "reboot" or ops[0].startswith("daemon-")
    return _verb_effect(name, ops[0], SYSTEMCTL_READS, SYSTEMCTL_KINDS,
                        None if host_wide else _service(ops[1] if len(ops) > 1 else None))


_SERVICE_KINDS = {"restart": "restart", "force-reload": "restart", "try-restart": "restart",
                  "condrestart": "restart", "reload": "reload", "start": "start", "stop": "stop"}


def _service_cmd(name: str, args: list[str]) -> Effect:
    if not args or args[0] == "--status-all":
        return _reads("service --status-all only reads")
    return _verb_effect(name, args[1] if len(args) > 1 else "(no action)", {"status"}, _SERVICE_KINDS,
                        _service(args[0]))


_SUPERVISORCTL = option_spec("csup", "--configuration --serverurl --username --password")
_SUPERVISOR_KINDS = {"restart": "restart", "start": "start", "stop": "stop", "reload": "reload",
                     "update": "reload", "signal": "kill"}


def _supervisorctl(name: str, args: list[str]) -> Effect:
    ops = parse_args(args, _SUPERVISORCTL).operands
    if not ops:
        return _changes(None, "supervisorctl without a command is interactive")
    target = ops[2] if ops[0] == "signal" and len(ops) > 2 else ops[1] if len(ops) > 1 else None
    return _verb_effect(name, ops[0], {"status", "avail", "pid", "tail", "version", "help", "maintail"},
                        _SUPERVISOR_KINDS, None if target == "all" else _service(target))


_DOCKER = option_spec("Hcl", "--host --context --config --log-level --tlscacert --tlscert --tlskey")
_DOCKER_VERB = option_spec("tsn", "--time --signal --detach-keys --name --timeout")
DOCKER_READS = _words("ps logs inspect stats top images version info events port diff history ls list "
                      "df show services")
DOCKER_GROUPS = _words("container image network volume system service stack node context plugin")
DOCKER_KINDS = {"restart": "restart", "start": "start", "run": "start", "unpause": "start", "stop": "stop",
                "pause": "stop", "kill": "kill", "rm": "delete", "rmi": "delete", "prune": "delete",
                "scale": "scale", "update": "redeploy", "rollback": "rollback"}


def _docker(name: str, args: list[str]) -> Effect:
    rest = args[parse_args(args, _DOCKER, stop=True).end:]
    if not rest:
        return _reads("docker without a command prints its help")
    if rest[0] == "compose":
        return _compose("docker compose", rest[1:])
    if rest[0] in DOCKER_GROUPS and len(rest) > 1:  # docker container restart x = docker restart x
        rest = rest[1:]
    verb = rest[0]
    ops = parse_args(rest[1:], _DOCKER_VERB).operands
    target = ops[0].split("=")[0] if ops and verb not in ("run", "prune") else None
    return _verb_effect("docker", verb, DOCKER_READS, DOCKER_KINDS, _service(target))


_COMPOSE = option_spec("fp", "--file --project-name --project-directory --env-file --profile --ansi --progress "
                       "--parallel")
_COMPOSE_VERB = option_spec("tn", "--timeout --scale --wait-timeout --pull --exit-code-from --attach "
                            "--no-attach --tail --since --until --index --signal")
COMPOSE_READS = _words("ps logs config top images ls version port events")
# `compose up` recreates what changed: counted as a redeploy.
COMPOSE_KINDS = {"up": "redeploy", "restart": "restart", "start": "start", "unpause": "start", "stop": "stop",
                 "down": "stop", "pause": "stop", "kill": "kill", "rm": "delete", "scale": "scale"}


def _compose(name: str, args: list[str]) -> Effect:
    rest = args[parse_args(args, _COMPOSE, stop=True).end:]
    if not rest:
        return _reads(f"{name} without a command prints its help")
    ops = parse_args(rest[1:], _COMPOSE_VERB).operands
    return _verb_effect(name, rest[0], COMPOSE_READS, COMPOSE_KINDS,
                        _service(ops[0].split("=")[0] if ops else None))


_KUBECTL = option_spec("nslcofL", "--namespace --context --kubeconfig --cluster --user --server --selector "
                       "--output --container --filename --replicas --field-selector --since --tail --as "
                       "--as-group --token --request-timeout --sort-by --template --type --to-revision "
                       "--timeout --label-columns --since-time --limit-bytes --image --cascade --grace-period")
KUBECTL_READS = _words("get describe logs top explain version api-resources api-versions cluster-info "
                       "events diff wait")
KUBECTL_SUBREADS = {"auth": {"can-i", "whoami"}, "rollout": {"status", "history"},
                    "config": {"view", "get-contexts", "current-context", "get-clusters", "get-users"}}
KUBECTL_KINDS = {"apply": "redeploy", "replace": "redeploy", "set": "redeploy", "delete": "delete",
                 "scale": "scale", "autoscale": "scale", "rollout restart": "restart",
                 "rollout undo": "rollback"}


def _kubectl(name: str, args: list[str]) -> Effect:
    ops = list(parse_args(args, _KUBECTL).operands)
    if not ops:
        return _reads("kubectl without a command prints its help")
    verb, objects = ops[0], ops[1:]
    if verb in KUBECTL_SUBREADS or verb == "set":
        if objects and objects[0] in KUBECTL_SUBREADS.get(verb, ()):
            return _reads(f"kubectl {verb} {objects[0]} only reads")
        if verb != "set" and objects:
            verb, objects = f"{verb} {objects[0]}", objects[1:]
        elif verb == "set":
            objects = objects[1:]
    target = None
    if objects and "/" in objects[0]:
        target = objects[0].rsplit("/", 1)[1]
    elif len(objects) > 1:
        target = objects[1]
    return _verb_effect(name, verb, KUBECTL_READS, KUBECTL_KINDS, _service(target))


_SED = option_spec("efl", "--expression --file --line-length")
# sed's w/W commands and the s///w flag write files, e and s///e run commands
_SED_RUNS = re.compile(r"(?:^|[;{}\s/!\d$])[wWe](?=[\s;}]|$)|/[gpiImM\d]*[we](?=[\s;}]|$)")


def _sed(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, _SED)
    if parsed.has("-i") or any(o.startswith("--i") for o, _ in parsed.options):
        return _changes("write", "sed -i edits files in place")
    if parsed.has("-f", "--file"):
        return _changes(None, "sed -f runs a script file, which cannot be judged")
    scripts = parsed.values("-e", "--expression") or list(parsed.operands[:1])
    if any(_SED_RUNS.search(s) for s in scripts):
        return _changes(None, "the sed script writes files or runs commands (w, e)")
    return _reads("sed without -i only prints")


_AWK = option_spec("FfveEil", "--field-separator --file --assign --source --exec --include --load")


def _awk(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, _AWK, stop=True)
    if parsed.has("-f", "--file", "-E", "--exec", "-i", "--include", "-l", "--load"):
        return _changes(None, f"{name} runs a program file or loads an extension, which cannot be judged")
    programs = [*parsed.values("-e", "--source"), *args[parsed.end:parsed.end + 1]]
    if any(s in p for p in programs for s in ("system(", ">", "|")):
        return _changes(None, f"the {name} program can run commands or write files (system, >, |)")
    return _reads(f"{name} only prints")


_CURL = option_spec("AbcCdDeEFHKmoPQrtTuUwxXyYz", "--request --output --cookie-jar --dump-header --trace "
                    "--trace-ascii --stderr --libcurl --config --header --user-agent --user --url --write-out")
_CURL_FILES = _words("-o --output -c --cookie-jar -D --dump-header --trace --trace-ascii --stderr --libcurl")


def _curl(name: str, args: list[str]) -> Effect:
    for opt, value in parse_args(args, _CURL).options:
        if opt in ("-X", "--request") and (value or "").upper() not in ("GET", "HEAD"):
            return _changes(None, f"curl -X {value} sends a request that may change state")
        if opt in ("-d", "-F", "-T", "--json", "--upload-file") or opt.startswith(("--data", "--form")):
            return _changes(None, f"curl {opt} sends data (a POST or an upload)")
        if opt in ("-K", "--config"):
            return _changes(None, "curl -K reads its options from a file")
        if opt in ("-O", "--remote-name", "--remote-name-all") or (
                opt in _CURL_FILES and value is not None and value != "-" and value not in NOT_FILES):
            return _changes("write", f"curl {opt} writes a file")
    return _reads("curl fetches without sending data or writing files")


_WGET = option_spec("OoaePiUtTwQBDIXARl", "--output-document --output-file --append-output --execute "
                    "--directory-prefix --input-file --header --user-agent --user --password")


def _wget(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, _WGET)
    if parsed.has("--post-data", "--post-file", "--method", "--body-data", "--body-file", "-e", "--execute",
                  "-r", "--recursive", "-i", "--input-file"):
        return _changes(None, "wget sends data, runs wgetrc commands or fetches many files")
    if [v for v in parsed.values("-o", "--output-file", "-a", "--append-output") if v not in NOT_FILES]:
        return _changes("write", "wget writes a log file")
    docs = parsed.values("-O", "--output-document")
    if parsed.has("--spider") or (docs and all(d == "-" or d in NOT_FILES for d in docs)):
        return _reads("wget -O - / --spider only fetches")
    return _changes("write", "wget saves the download to a file")


def _outputs(name: str, args: list[str]) -> Effect:
    ops = parse_args(args, option_spec("fsw", "--skip-fields --skip-chars --check-chars")).operands
    files = [f for f in ops[1 if name == "uniq" else 0:] if f not in NOT_FILES]
    return _changes("write", f"{name} writes {', '.join(files)}") if files else _reads(f"{name} only prints")


# Programs read-only unless given one of these options (the value: the kind of what the option does).
# find's options are whole words (no option spec).
FLAG_CHECKS: dict[str, tuple[OptionSpec | None, dict[str, str | None]]] = {
    "find": (None, {"-delete": "delete", **dict.fromkeys(("-exec", "-execdir", "-ok", "-okdir")),
                    **dict.fromkeys(("-fprint", "-fprint0", "-fprintf", "-fls"), "write")}),
    "sort": (option_spec("kotST", "--key --field-separator --output --buffer-size --temporary-directory "
                         "--parallel --files0-from --batch-size --compress-program"),
             {"-o": "write", "--output": "write", "--compress-program": None}),
    "yq": (option_spec("opIe", "--output-format --input-format --indent --expression"),
           {"-i": "write", "--inplace": "write"}),
    "journalctl": (option_spec("utpSUnoDMcFg"), {**dict.fromkeys(("--vacuum-size", "--vacuum-time", "--vacuum-files"),
                    "delete"), **dict.fromkeys(("--rotate", "--flush", "--sync", "--relinquish-var",
                                                "--smart-relinquish-var", "--setup-keys", "--update-catalog"))}),
    "rg": (option_spec(), {"--pre": None}),
    "openssl": (None, dict.fromkeys(("-out", "-keyout", "-sess_out", "-msgfile", "-keylogfile"), "write")),
    "sar": (option_spec(), {"-o": "write"}),
    "tree": (option_spec("LPIo", "--filelimit --charset"), {"-o": "write"}),
    "ss": (option_spec("fAFN", "--family --query --filter --net"), {"-K": "kill", "--kill": "kill"}),
    "file": (option_spec("emfFP", "--magic-file --files-from --separator"), {"-C": "write", "--compile": "write"}),
    "dmesg": (option_spec("fFlns", "--facility --level --console-level --buffer-size --file --since --until"),
              {"-c": "delete", "-C": "delete", "--clear": "delete", "--read-clear": "delete", "-D": None,
               "-E": None, "-n": None, "--console-off": None, "--console-on": None, "--console-level": None}),
}


def _flag_check(name: str, args: list[str]) -> Effect:
    spec, changing = FLAG_CHECKS[name]
    for opt in (args if spec is None else [o for o, _ in parse_args(args, spec).options]):
        if opt in changing:
            return _changes(changing[opt], f"{name} {opt} {_KIND_WORDS[changing[opt] or '']}")
    return _reads(f"{name} only reads")


# Programs read-only when bare (the flag) or when their first word or first operand is one of these.
SUBCOMMAND_READS = {
    "timedatectl": ("status show list-timezones timesync-status show-timesync", True),
    "hostnamectl": ("status", True),
    **dict.fromkeys(("pip", "pip3"), ("list show freeze check help inspect --version -V", True)),
    "openssl": ("s_client x509 version verify ciphers list crl asn1parse errstr help", False),
    "dpkg": ("-l --list -L --listfiles -s --status -S --search -p --print-avail --get-selections --version", False),
}


def _subcommand(name: str, args: list[str]) -> Effect:
    reads, bare = SUBCOMMAND_READS[name]
    verb = next((a for a in args if not a.startswith("-")), args[0] if args else None)
    if (verb is None and bare) or (args and args[0] in reads.split()) or (verb and verb in reads.split()):
        return _flag_check(name, args) if name in FLAG_CHECKS else _reads(f"{name} {verb or ''} only reads")
    return _changes(None, f"{name} {verb or ''} is not known to be read-only".replace("  ", " "))


def _shaped(name: str, args: list[str]) -> Effect:
    """date, hostname, mount and top: read-only in their listing shape only."""
    if name == "top":
        ok = parse_args(args, option_spec("dnpuUoOw")).has("-b")
        return _reads("top -b only prints") if ok else _changes(None, "top without -b is interactive")
    spec = {"date": option_spec("dfrs", "--date --file --reference --set", optional="I"),
            "hostname": option_spec("F", "--file"), "mount": option_spec("tOo", "--types --options")}[name]
    parsed = parse_args(args, spec)
    if name == "date":
        ok = not parsed.has("-s", "--set") and all(o.startswith("+") for o in parsed.operands)
    elif name == "hostname":
        ok = not parsed.operands and not parsed.has("-F", "--file", "-b", "--boot")
    else:
        ok = not parsed.operands and all(o in ("-l", "-t", "-v", "--types", "--show-labels") for o, _ in parsed.options)
    return _reads(f"{name} only prints") if ok else _changes(None, f"{name} with these arguments changes the system")


def _nginx(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, option_spec("scgpe"))
    if signal := parsed.values("-s"):
        kind = {"reload": "reload", "reopen": "reload", "stop": "stop", "quit": "stop"}.get(signal[0])
        return _changes(kind, f"nginx -s {signal[0]} signals the running nginx", "nginx")
    if parsed.has("-t", "-T", "-v", "-V", "-h", "-?"):
        return _reads("nginx -t/-v only tests or prints")
    return _changes("start", "nginx without -t starts a server", "nginx")


APACHE_KINDS = {"graceful": "reload", "restart": "restart", "stop": "stop", "graceful-stop": "stop", "start": "start"}
APACHE_READS = _words("configtest -t -S -v -V -M -l -L -D status fullstatus")


def _apachectl(name: str, args: list[str]) -> Effect:
    kinds = [APACHE_KINDS[a] for a in args if a in APACHE_KINDS]
    if kinds or not args or not all(a in APACHE_READS or a.startswith("DUMP_") for a in args):
        return _changes(kinds[0] if kinds else None, f"{name} {' '.join(args[:2])} changes the web server's state")
    return _reads(f"{name} {args[0]} only tests or prints")


_REDIS = option_spec("hpsaunridD", "--user --pass --cacert --cert --key --sni --pattern --count --rdb "
                     "--functions-rdb --cluster --eval")
REDIS_READS = _words(
    "ping info get mget keys scan exists ttl pttl type strlen hget hgetall hkeys hvals hlen hmget hexists hscan "
    "lrange llen lindex smembers scard sismember sscan zrange zrangebyscore zrevrange zcard zscore zrank zcount "
    "zscan dbsize time echo role lastsave xlen xrange xinfo getrange bitcount pfcount randomkey") | {
    "config get", "client list", "client info", "slowlog get", "slowlog len", "memory usage", "memory stats",
    "latency latest", "latency doctor", "cluster info", "cluster nodes", "object encoding", "acl whoami"}
_REDIS_MODES = ("--scan", "--bigkeys", "--memkeys", "--hotkeys", "--stat", "--latency", "--latency-history",
                "--latency-dist", "--intrinsic-latency")


def _redis(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, _REDIS)
    if parsed.has("--rdb", "--functions-rdb", "--pipe", "--eval", "--cluster"):
        return _changes(None, "redis-cli --rdb/--pipe/--eval/--cluster writes or changes data")
    ops = [o.lower() for o in parsed.operands]
    if not ops:
        if parsed.has(*_REDIS_MODES):
            return _reads("redis-cli's scan and statistics modes only read")
        return _changes(None, "redis-cli without a command is interactive")
    if ops[0] in REDIS_READS or " ".join(ops[:2]) in REDIS_READS:
        return _reads(f"redis-cli {ops[0]} only reads")
    kind = "delete" if ops[0] in ("del", "unlink", "flushall", "flushdb") else "stop" if ops[0] == "shutdown" else None
    return _changes(kind, f"redis-cli {ops[0]} changes data")


_PSQL = option_spec("cdfhpUvoPFRTL", "--command --dbname --file --host --port --username --variable --set "
                    "--output --pset --field-separator --record-separator --table-attr --log-file")
_MYSQL = option_spec("euhPDS", "--execute --user --host --port --database --socket --tee", optional="p")
# Statements that read: the first word is one of these and nothing in them is known to write or run.
SQL_READS = {"psql": frozenset({"select", "show", "explain"}),
             "mysql": frozenset({"select", "show", "explain", "describe", "desc"})}
_SQL_CHANGES = re.compile(r"\b(?:into|analyze|pg_terminate_backend|pg_cancel_backend|pg_reload_conf|set_config|"
                          r"nextval|setval|lo_import|lo_export)\b", re.IGNORECASE)
_PSQL_META = re.compile(r"\\(?:d[a-zA-Z]*\+?|l\+?|conninfo)(?:\s+[\w.*\"]+)?")


def _sql_reads(name: str, text: str) -> bool:
    for statement in (s.strip() for s in text.split(";")):
        if not statement:
            continue
        if statement.startswith("\\"):
            if name == "psql" and _PSQL_META.fullmatch(statement):
                continue
            return False
        if statement.split(None, 1)[0].lower() not in SQL_READS[name] or _SQL_CHANGES.search(statement):
            return False
    return True


def _sql_client(name: str, args: list[str]) -> Effect:
    pg = name == "psql"
    parsed = parse_args(args, _PSQL if pg else _MYSQL)
    if pg and parsed.has("-f", "--file"):
        return _changes(None, "psql -f runs a script file, which cannot be judged")
    if [v for v in parsed.values("-o", "--output", "-L", "--log-file", "--tee") if v not in NOT_FILES]:
        return _changes("write", f"{name} writes its output or log to a file")
    texts = parsed.values("-c", "--command") if pg else parsed.values("-e", "--execute")
    if not texts:
        if pg and parsed.has("-l", "--list", "-V", "--version"):
            return _reads("psql -l lists databases")
        return _changes(None, f"{name} without {'-c' if pg else '-e'} runs whatever statements it reads")
    if all(_sql_reads(name, t) for t in texts):
        return _reads(f"{name} runs only {'/'.join(sorted(SQL_READS[name]))} statements")
    return _changes(None, f"{name} runs statements that may change data")


_GIT = option_spec("Cc", "--git-dir --work-tree --namespace --config-env")
GIT_READS = _words("status log diff show blame rev-parse describe ls-files ls-tree ls-remote shortlog grep "
                   "cat-file version help whatchanged for-each-ref show-ref name-rev count-objects rev-list "
                   "show-branch merge-base check-ignore")
# verb: (first operands that only read, whether the bare verb only reads)
GIT_LISTINGS = {"remote": ({"show", "get-url"}, True), "reflog": ({"show"}, True), "stash": ({"list", "show"}, False),
                "worktree": ({"list"}, False), "submodule": ({"status"}, True), "config": ({"get", "list"}, False)}
_GIT_BRANCH_CHANGES = _words("-d -D -m -M -c -C -f -u --delete --move --copy --force --set-upstream-to "
                             "--unset-upstream --edit-description")


def _git(name: str, args: list[str]) -> Effect:
    parsed = parse_args(args, _GIT, stop=True)
    if parsed.has("-c", "--config-env"):
        return _changes(None, "git -c can make git run other programs")
    verb, rest = (args[parsed.end], args[parsed.end + 1:]) if parsed.end < len(args) else ("help", [])
    opts, ops = [a for a in rest if a.startswith("-")], [a for a in rest if not a.startswith("-")]
    if any(o.startswith(("--output", "-O", "--open-files-in-pager")) for o in opts):
        return _changes("write", f"git {verb} writes a file or runs a pager program")
    if verb in ("branch", "tag"):
        ok = (not ops or bool({"-l", "--list"} & set(opts))) and not _GIT_BRANCH_CHANGES & set(opts)
    elif verb in GIT_LISTINGS:
        reads, bare = GIT_LISTINGS[verb]
        ok = (bare and not ops) or bool(ops and ops[0] in reads) or (
            verb == "config" and any(o in ("-l", "--list") or o.startswith("--get") for o in opts))
    else:
        ok = verb in GIT_READS
    return _reads(f"git {verb} only reads") if ok else _changes(None, f"git {verb} changes the repository")


IP_READS = _words("show list lst ls sh get help")


def _ip(name: str, args: list[str]) -> Effect:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-b", "-batch", "-force"):
            return _changes(None, "ip -batch runs commands from a file")
        i += 2 if args[i] in ("-n", "-netns", "-f", "-family", "-l", "-loops", "-rc", "-rcvbuf") else 1
    rest = args[i:]
    if len(rest) < 2 or rest[1] in IP_READS:
        return _reads(f"ip {' '.join(rest[:2])} only shows".replace("  ", " "))
    return _changes(None, f"ip {rest[0]} {rest[1]} changes the network configuration")


CHECKS: dict[str, Check] = {
    "systemctl": _systemctl, "service": _service_cmd, "supervisorctl": _supervisorctl, "docker": _docker,
    "docker-compose": _compose, "kubectl": _kubectl, "sed": _sed, "curl": _curl, "wget": _wget,
    "tee": _outputs, "uniq": _outputs, "nginx": _nginx, "apachectl": _apachectl,
    "apache2ctl": _apachectl, "redis-cli": _redis, "psql": _sql_client, "mysql": _sql_client, "git": _git,
    "ip": _ip, **dict.fromkeys(("awk", "gawk", "mawk", "nawk"), _awk), **dict.fromkeys(FLAG_CHECKS, _flag_check),
    **dict.fromkeys(SUBCOMMAND_READS, _subcommand), **dict.fromkeys(("date", "hostname", "mount", "top"), _shaped),
}
