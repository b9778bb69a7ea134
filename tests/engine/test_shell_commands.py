"""The PreToolUse guard's command reader and judge: what a Bash command text runs, and what each
command does (app/engine/shell_commands.py, app/engine/command_effects.py).

The table below is the contract: for each text, the simple commands found (their words joined
back, wrappers stripped), whether the text as a whole is read-only, and the kind and service of
its first mutating command.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import READ_ONLY_TOOLS
from app.engine.command_effects import (
    CHECKS,
    KINDS,
    PROGRAM_KINDS,
    READERS,
    effect,
    is_read_only,
    reading_effects,
)
from app.engine.shell_commands import (
    MAX_BYTES,
    MAX_DEPTH,
    Reading,
    SimpleCommand,
    allowed_by_rules,
    matches_rule,
    program_name,
    read_command,
)

RESTART_API = ["systemctl restart api"]


def case(case_id: str, text: str, commands: list[str], mutating: bool, kind: str | None = None,
         service: str | None = None) -> object:
    return pytest.param(text, commands, mutating, kind, service, id=case_id)


READ_ONLY = [
    case("systemctl-status", "systemctl status api", ["systemctl status api"], False),
    case("systemctl-bare", "systemctl", ["systemctl"], False),
    case("systemctl-failed", "systemctl --failed", ["systemctl --failed"], False),
    case("systemctl-is-active", "systemctl is-active api", ["systemctl is-active api"], False),
    case("systemctl-list-units", "systemctl list-units --type=service --state=failed",
         ["systemctl list-units --type=service --state=failed"], False),
    case("systemctl-cat", "systemctl cat api.service", ["systemctl cat api.service"], False),
    case("systemctl-status-pipe-grep", "systemctl status api | grep x", ["systemctl status api", "grep x"], False),
    case("journalctl-pipe-tail", 'journalctl -u api --since "1 hour ago" 2>&1 | tail -50',
         ["journalctl -u api --since '1 hour ago'", "tail -50"], False),
    case("docker-ps", "docker ps -a", ["docker ps -a"], False),
    case("docker-logs", "docker logs --tail 100 api", ["docker logs --tail 100 api"], False),
    case("docker-inspect", "docker inspect api", ["docker inspect api"], False),
    case("docker-container-ls", "docker container ls", ["docker container ls"], False),
    case("compose-logs", "docker compose -f x.yml logs --tail 100 web",
         ["docker compose -f x.yml logs --tail 100 web"], False),
    case("compose-ps", "docker compose ps", ["docker compose ps"], False),
    case("kubectl-get", "kubectl get pods -A", ["kubectl get pods -A"], False),
    case("kubectl-describe", "kubectl -n prod describe deploy api", ["kubectl -n prod describe deploy api"], False),
    case("kubectl-rollout-status", "kubectl rollout status deploy/api", ["kubectl rollout status deploy/api"],
         False),
    case("kubectl-auth-can-i", "kubectl auth can-i delete pods", ["kubectl auth can-i delete pods"], False),
    case("kubectl-logs-follow", "kubectl logs -f api-123", ["kubectl logs -f api-123"], False),
    case("curl-get", "curl -s http://localhost/health", ["curl -s http://localhost/health"], False),
    case("curl-devnull", "curl -sS -o /dev/null -w '%{http_code}' http://x",
         ["curl -sS -o /dev/null -w %{http_code} http://x"], False),
    case("curl-head", "curl -I http://x", ["curl -I http://x"], False),
    case("wget-stdout", "wget -qO- http://x", ["wget -qO- http://x"], False),
    case("wget-spider", "wget --spider http://x", ["wget --spider http://x"], False),
    case("openssl-s-client", "openssl s_client -connect x:443", ["openssl s_client -connect x:443"], False),
    case("openssl-x509", "openssl x509 -in c.pem -noout -text", ["openssl x509 -in c.pem -noout -text"], False),
    case("redirect-devnull", "cat /etc/hosts > /dev/null", ["cat /etc/hosts"], False),
    case("grep-head", "grep -r error /var/log | head", ["grep -r error /var/log", "head"], False),
    case("sed-print", "sed -n 1,5p f", ["sed -n 1,5p f"], False),
    case("sed-dollar-in-quotes", 'sed -n "/x$/p" f', ["sed -n /x$/p f"], False),
    case("awk-print", "awk '{print $1}' f", ["awk '{print $1}' f"], False),
    case("find-name", "find /var/log -name '*.gz' -mtime +7", ["find /var/log -name *.gz -mtime +7"], False),
    case("and-chain", "ls -la /srv && df -h && free -m", ["ls -la /srv", "df -h", "free -m"], False),
    case("ps-grep", "ps aux | grep nginx", ["ps aux", "grep nginx"], False),
    case("ss", "ss -tlnp", ["ss -tlnp"], False),
    case("ip-addr-show", "ip addr show", ["ip addr show"], False),
    case("ip-brief", "ip -br a", ["ip -br a"], False),
    case("ip-route-get", "ip route get 1.1.1.1", ["ip route get 1.1.1.1"], False),
    case("top-batch", "top -b -n 1", ["top -b -n 1"], False),
    case("dmesg-tail", "dmesg -T | tail", ["dmesg -T", "tail"], False),
    case("git-status", "git status", ["git status"], False),
    case("git-log", "git log --oneline -5", ["git log --oneline -5"], False),
    case("git-diff", "git diff HEAD~1", ["git diff HEAD~1"], False),
    case("git-branch-all", "git branch -a", ["git branch -a"], False),
    case("git-stash-list", "git stash list", ["git stash list"], False),
    case("psql-select", 'psql -c "SELECT 1"', ["psql -c 'SELECT 1'"], False),
    case("psql-cluster-select", 'psql -tAc "select count(*) from jobs"',
         ["psql -tAc 'select count(*) from jobs'"], False),
    case("psql-describe", r'psql -c "\dt"', [r"psql -c \dt"], False),
    case("psql-describe-single-quotes", r"psql -c '\d+ jobs'", [r"psql -c '\d+ jobs'"], False),
    case("mysql-show", 'mysql -e "SHOW PROCESSLIST"', ["mysql -e 'SHOW PROCESSLIST'"], False),
    case("redis-ping", "redis-cli ping", ["redis-cli ping"], False),
    case("redis-info", "redis-cli -h cache info memory", ["redis-cli -h cache info memory"], False),
    case("redis-config-get", "redis-cli config get maxmemory", ["redis-cli config get maxmemory"], False),
    case("nginx-test", "nginx -t", ["nginx -t"], False),
    case("apachectl-configtest", "apachectl configtest", ["apachectl configtest"], False),
    case("pg-isready", "pg_isready -h db", ["pg_isready -h db"], False),
    case("cd-pwd", "cd /srv && pwd", ["cd /srv", "pwd"], False),
    case("sleep-uptime", "sleep 5; uptime", ["sleep 5", "uptime"], False),
    case("date-format", "date +%s", ["date +%s"], False),
    case("hostname-f", "hostname -f", ["hostname -f"], False),
    case("mount-bare", "mount", ["mount"], False),
    case("timedatectl", "timedatectl status", ["timedatectl status"], False),
    case("hostnamectl", "hostnamectl", ["hostnamectl"], False),
    case("env-bare", "env", ["env"], False),
    case("command-v", "command -v systemctl", ["command -v systemctl"], False),
    case("test-and-echo", "test -f /etc/x && echo yes", ["test -f /etc/x", "echo yes"], False),
    case("bracket-or-echo", "[ -f /etc/x ] || echo no", ["[ -f /etc/x ]", "echo no"], False),
    case("empty", "", [], False),
    case("whitespace", "  \n\t ", [], False),
    case("comment-only", "# just looking", [], False),
    case("du-sort", "du -sh /var/* | sort -h", ["du -sh /var/*", "sort -h"], False),
    case("jq", "jq .status f.json", ["jq .status f.json"], False),
    case("uniq-count", "uniq -c f", ["uniq -c f"], False),
    case("tee-devnull", "echo y | tee /dev/null", ["echo y", "tee /dev/null"], False),
    case("process-substitution", "diff <(ls a) <(ls b)", ["ls a", "ls b", "diff '<(ls a)' '<(ls b)'"], False),
    case("dpkg-list", "dpkg -l | grep nginx", ["dpkg -l", "grep nginx"], False),
    case("pip-list", "pip list", ["pip list"], False),
    case("kill-list", "kill -l", ["kill -l"], False),
    case("service-status", "service nginx status", ["service nginx status"], False),
    case("supervisorctl-status", "supervisorctl status", ["supervisorctl status"], False),
    case("function-body", "f() { ls; }", ["ls"], False),
    case("stdbuf-journalctl", "stdbuf -oL journalctl -f", ["journalctl -f"], False),
    case("unicode", "echo 'héllo ✓' | grep ✓", ["echo 'héllo ✓'", "grep ✓"], False),
    case("ssh-status", "ssh web-1 systemctl status api", ["systemctl status api"], False),
    case("quoted-braces", "echo '{a,b}' \"{1..3}\"", ["echo {a,b} {1..3}"], False),
    case("backslash-in-double-quotes", 'grep "a\\.b" f', ["grep a\\.b f"], False),  # bashlex drops the \\
    case("for-status-tolerant", "for s in a b; do systemctl status $s; done", ["systemctl status $s"], False),
]

MUTATING = [
    case("sudo-restart", "sudo systemctl restart api", RESTART_API, True, "restart", "api"),
    case("sudo-user-env-restart", "sudo -u root -E systemctl restart api.service",
         ["systemctl restart api.service"], True, "restart", "api"),
    case("ssh-docker-restart", "ssh web-1 'docker restart api'", ["docker restart api"], True, "restart", "api"),
    case("ssh-options-sudo", 'ssh -p 2222 -i key ops@web-1 "sudo systemctl restart nginx"',
         ["systemctl restart nginx"], True, "restart", "nginx"),
    case("bash-c-compose-up", 'bash -c "cd /srv && docker compose up -d"', ["cd /srv", "docker compose up -d"],
         True, "redeploy", None),
    case("sh-c-restart", "sh -c 'systemctl restart api'", RESTART_API, True, "restart", "api"),
    case("cd-and-restart", "cd /srv && systemctl restart api", ["cd /srv", *RESTART_API], True, "restart", "api"),
    case("semicolon", "true; systemctl restart api", ["true", *RESTART_API], True, "restart", "api"),
    case("command-substitution", "echo $(systemctl restart api)",
         [*RESTART_API, "echo '$(systemctl restart api)'"], True, "restart", "api"),
    case("backticks", "echo `systemctl restart api`", [*RESTART_API, "echo '`systemctl restart api`'"], True,
         "restart", "api"),
    case("subshell", "( systemctl restart api )", RESTART_API, True, "restart", "api"),
    case("group", "{ systemctl restart api; }", RESTART_API, True, "restart", "api"),
    case("if-body", "if true; then systemctl restart api; fi", ["true", *RESTART_API], True, "restart", "api"),
    case("while-body", "while false; do systemctl restart api; done", ["false", *RESTART_API], True, "restart",
         "api"),
    # the unit is named by an expansion: its service is not known before the command runs
    case("for-expansion", "for s in a b; do systemctl restart $s; done", ["systemctl restart $s"], True,
         "restart", None),
    case("env-assignment", "env FOO=1 systemctl restart api", RESTART_API, True, "restart", "api"),
    case("leading-assignment", "FOO=1 systemctl restart api", RESTART_API, True, "restart", "api"),
    case("nice-timeout", "nice -n 10 timeout 30 systemctl restart api", RESTART_API, True, "restart", "api"),
    case("timeout-signal", "timeout -s KILL 30s docker restart api", ["docker restart api"], True, "restart",
         "api"),
    case("nohup-background", "nohup systemctl restart api &", RESTART_API, True, "restart", "api"),
    case("xargs", "xargs -r systemctl restart < list", ["systemctl restart"], True, "restart", None),
    case("redirect-write", "echo x > /etc/motd", ["echo x"], True, "write", None),
    case("redirect-append", "echo x >> /var/log/x.log", ["echo x"], True, "write", None),
    case("redirect-both", "ls &> /tmp/out", ["ls"], True, "write", None),
    case("redirect-only", "> /etc/motd", [""], True, "write", None),
    case("group-redirect", "{ echo a; } > /tmp/f", ["echo a"], True, "write", None),
    case("restart-redirect-keeps-kind", "systemctl restart api > /tmp/log", RESTART_API, True, "restart", "api"),
    case("kubectl-rollout-restart", "kubectl rollout restart deployment/api -n prod",
         ["kubectl rollout restart deployment/api -n prod"], True, "restart", "api"),
    case("kubectl-rollout-undo", "kubectl rollout undo deployment api", ["kubectl rollout undo deployment api"],
         True, "rollback", "api"),
    case("kubectl-scale", "kubectl scale deploy/api --replicas=3", ["kubectl scale deploy/api --replicas=3"], True,
         "scale", "api"),
    case("kubectl-apply", "kubectl apply -f x.yml", ["kubectl apply -f x.yml"], True, "redeploy", None),
    case("kubectl-delete-pod", "kubectl delete pod api-123", ["kubectl delete pod api-123"], True, "delete",
         "api-123"),
    case("kubectl-set-image", "kubectl set image deploy/api api=img:2", ["kubectl set image deploy/api api=img:2"],
         True, "redeploy", "api"),
    case("curl-post", "curl -X POST http://x/restart", ["curl -X POST http://x/restart"], True),
    case("curl-data", "curl -d a=b http://x", ["curl -d a=b http://x"], True),
    case("curl-output", "curl -o /tmp/page http://x", ["curl -o /tmp/page http://x"], True, "write"),
    case("curl-remote-name", "curl -O http://x/f.tgz", ["curl -O http://x/f.tgz"], True, "write"),
    case("curl-config", "curl -K cfg http://x", ["curl -K cfg http://x"], True),
    case("wget-file", "wget http://x/f", ["wget http://x/f"], True, "write"),
    case("find-delete", "find /var/log -name '*.gz' -delete", ["find /var/log -name *.gz -delete"], True,
         "delete"),
    case("find-exec", r"find . -exec rm {} \;", ["find . -exec rm {} ;"], True),
    case("sed-in-place", "sed -i s/a/b/ f", ["sed -i s/a/b/ f"], True, "write"),
    case("sed-in-place-suffix", "sed -i.bak -e s/a/b/ f", ["sed -i.bak -e s/a/b/ f"], True, "write"),
    case("sed-write-command", "sed -n 'w /tmp/out' f", ["sed -n 'w /tmp/out' f"], True),
    case("sed-expanded-flags", "sed $FLAGS s/a/b/ f", ["sed $FLAGS s/a/b/ f"], True),
    case("awk-redirect", "awk '{print > \"/tmp/x\"}' f", ["awk '{print > \"/tmp/x\"}' f"], True),
    case("awk-system", "awk 'BEGIN{system(\"reboot\")}'", ["awk 'BEGIN{system(\"reboot\")}'"], True),
    case("rm", "rm -rf /tmp/x", ["rm -rf /tmp/x"], True, "delete"),
    case("kill-hup", "kill -HUP 123", ["kill -HUP 123"], True, "kill"),
    case("pkill", "pkill -f worker", ["pkill -f worker"], True, "kill"),
    case("eval", 'eval "systemctl restart api"', RESTART_API, True, "restart", "api"),
    case("exec", "exec systemctl restart api", RESTART_API, True, "restart", "api"),
    case("command", "command systemctl restart api", RESTART_API, True, "restart", "api"),
    case("sudo-bash-c", "sudo bash -c 'systemctl restart api'", RESTART_API, True, "restart", "api"),
    case("ssh-interactive", "ssh host", ["ssh host"], True),
    case("ssh-proxycommand", "ssh -o ProxyCommand='nc %h %p' host uptime",
         ["ssh -o 'ProxyCommand=nc %h %p' host uptime"], True),
    case("git-pull", "git pull", ["git pull"], True),
    case("git-checkout", "git checkout main", ["git checkout main"], True),
    case("git-reset", "git reset --hard", ["git reset --hard"], True),
    case("git-dash-c", "git -c core.pager=sh log", ["git -c core.pager=sh log"], True),
    case("git-stash", "git stash", ["git stash"], True),
    case("apt-get", "apt-get install -y x", ["apt-get install -y x"], True),
    case("pip-install", "pip install requests", ["pip install requests"], True),
    case("psql-drop", 'psql -c "DROP TABLE x"', ["psql -c 'DROP TABLE x'"], True),
    case("psql-select-then-delete", 'psql -c "SELECT 1; DELETE FROM x"', ["psql -c 'SELECT 1; DELETE FROM x'"],
         True),
    case("psql-explain-analyze", 'psql -c "EXPLAIN ANALYZE DELETE FROM x"',
         ["psql -c 'EXPLAIN ANALYZE DELETE FROM x'"], True),
    case("psql-interactive", "psql -h db", ["psql -h db"], True),
    case("mysql-update", 'mysql -e "UPDATE t SET a=1"', ["mysql -e 'UPDATE t SET a=1'"], True),
    case("redis-flushall", "redis-cli flushall", ["redis-cli flushall"], True, "delete"),
    case("redis-set", "redis-cli set k v", ["redis-cli set k v"], True),
    case("service-restart", "service nginx restart", ["service nginx restart"], True, "restart", "nginx"),
    case("supervisorctl-restart", "supervisorctl restart worker", ["supervisorctl restart worker"], True,
         "restart", "worker"),
    case("supervisorctl-restart-all", "supervisorctl restart all", ["supervisorctl restart all"], True, "restart",
         None),
    case("docker-compose-up-service", "docker-compose up -d web", ["docker-compose up -d web"], True, "redeploy",
         "web"),
    case("compose-restart", "docker compose restart web", ["docker compose restart web"], True, "restart", "web"),
    case("compose-down", "docker compose down", ["docker compose down"], True, "stop"),
    case("docker-stop-rm", "docker stop api; docker rm api", ["docker stop api", "docker rm api"], True, "stop",
         "api"),
    case("docker-exec", "docker exec api sh", ["docker exec api sh"], True, None, "api"),
    case("docker-run", "docker run -d --name x nginx", ["docker run -d --name x nginx"], True, "start"),
    case("docker-container-restart", "docker container restart -t 5 api", ["docker container restart -t 5 api"],
         True, "restart", "api"),
    case("systemctl-daemon-reload", "systemctl daemon-reload", ["systemctl daemon-reload"], True, "reload"),
    case("systemctl-reboot", "systemctl reboot", ["systemctl reboot"], True, "reboot"),
    case("systemctl-stop", "systemctl stop api", ["systemctl stop api"], True, "stop", "api"),
    case("systemctl-start", "systemctl start api", ["systemctl start api"], True, "start", "api"),
    case("systemctl-reload", "systemctl reload nginx", ["systemctl reload nginx"], True, "reload", "nginx"),
    case("systemctl-enable", "systemctl enable --now api", ["systemctl enable --now api"], True, None, "api"),
    case("reboot", "reboot", ["reboot"], True, "reboot"),
    case("shutdown", "shutdown -h now", ["shutdown -h now"], True, "reboot"),
    case("ip-link-set", "ip link set eth0 down", ["ip link set eth0 down"], True),
    case("tee-file", "echo y | tee /etc/x", ["echo y", "tee /etc/x"], True, "write"),
    case("sudo-tee", "echo y | sudo tee /etc/x", ["echo y", "tee /etc/x"], True, "write"),
    case("tee-here-string", "tee /etc/x <<< y", ["tee /etc/x"], True, "write"),
    case("dd", "dd if=/dev/zero of=/dev/sda", ["dd if=/dev/zero of=/dev/sda"], True, "write"),
    case("watch", "watch -n1 systemctl restart api", RESTART_API, True, "restart", "api"),
    case("path-qualified", "/usr/bin/systemctl restart api", ["/usr/bin/systemctl restart api"], True, "restart",
         "api"),
    case("path-qualified-sudo", "/bin/sudo /usr/bin/systemctl restart api", ["/usr/bin/systemctl restart api"],
         True, "restart", "api"),
    case("backslash-name", r"s\ystemctl restart api", RESTART_API, True, "restart", "api"),
    case("quoted-name", '"systemctl" restart api', RESTART_API, True, "restart", "api"),
    case("split-quotes-name", "sys''temctl restart api", RESTART_API, True, "restart", "api"),
    case("computed-name", "$(echo systemctl) restart api", ["echo systemctl", "'$(echo systemctl)' restart api"],
         True),
    case("computed-name-status", "$(echo systemctl) status api", ["echo systemctl", "'$(echo systemctl)' status api"],
         True),
    case("relative-program", "./systemctl status api", ["./systemctl status api"], True),
    case("nginx-reload", "nginx -s reload", ["nginx -s reload"], True, "reload", "nginx"),
    case("apachectl-graceful", "apachectl graceful", ["apachectl graceful"], True, "reload"),
    case("mkdir", "mkdir -p /srv/x", ["mkdir -p /srv/x"], True, "write"),
    case("chmod", "chmod 600 f", ["chmod 600 f"], True, "write"),
    case("cp", "cp a b", ["cp a b"], True, "write"),
    case("mv", "mv a b", ["mv a b"], True, "write"),
    case("truncate", "truncate -s 0 f", ["truncate -s 0 f"], True, "write"),
    case("sort-output", "sort -o out f", ["sort -o out f"], True, "write"),
    case("uniq-output", "uniq a b", ["uniq a b"], True, "write"),
    case("date-set", 'date -s "2020-01-01"', ["date -s 2020-01-01"], True),
    case("hostname-set", "hostname newname", ["hostname newname"], True),
    case("mount-device", "mount /dev/sdb1 /mnt", ["mount /dev/sdb1 /mnt"], True),
    case("dmesg-clear", "dmesg -Tc", ["dmesg -Tc"], True, "delete"),
    case("journalctl-vacuum", "journalctl --vacuum-size=100M", ["journalctl --vacuum-size=100M"], True, "delete"),
    case("journalctl-rotate", "journalctl --rotate", ["journalctl --rotate"], True),
    case("top-interactive", "top", ["top"], True),
    case("unknown-program", "frobnicate --all", ["frobnicate --all"], True),
    case("python-script", "python3 script.py", ["python3 script.py"], True),
    case("bash-script", "bash deploy.sh", ["bash deploy.sh"], True),
    case("curl-pipe-sh", "curl http://x | sh", ["curl http://x", "sh"], True),
    case("time-output-file", "/usr/bin/time -o /tmp/t ls", ["ls"], True, "write"),
    case("chroot", "chroot /srv/root systemctl restart api", RESTART_API, True, "restart", "api"),
    case("ionice-nice-rm", "ionice -c3 nice -n19 rm -rf /tmp/x", ["rm -rf /tmp/x"], True, "delete"),
    case("doas", "doas systemctl restart api", RESTART_API, True, "restart", "api"),
    case("busybox-rm", "busybox rm x", ["rm x"], True, "delete"),
    case("sudo-login-shell", "sudo -i", ["sudo -i"], True),
    case("xargs-sed", "xargs sed s/a/b/", ["sed s/a/b/"], True),
    case("assignment-substitution", "X=$(rm -rf /tmp/x)", ["rm -rf /tmp/x"], True, "delete"),
    case("redirect-target-substitution", "echo hi > $(rm y)", ["rm y", "echo hi"], True, "delete"),
    case("for-list-substitution", "for f in $(rm y); do :; done", ["rm y", ":"], True, "delete"),
    case("function-body-rm", "f() { rm x; }", ["rm x"], True, "delete"),
    case("tree-output", "tree -o /tmp/t /srv", ["tree -o /tmp/t /srv"], True, "write"),
    case("ss-kill", "ss -K dst 10.0.0.1", ["ss -K dst 10.0.0.1"], True, "kill"),
    case("file-compile", "file -C -m magic", ["file -C -m magic"], True, "write"),
    case("curl-long-output", "curl --output /tmp/x http://x", ["curl --output /tmp/x http://x"], True, "write"),
    case("wget-output-file", "wget -O /tmp/x http://x", ["wget -O /tmp/x http://x"], True, "write"),
    case("ssh-config-file", "ssh -F cfg host uptime", ["ssh -F cfg host uptime"], True),
    case("xargs-replace-in-shell", "xargs -I{} sh -c 'sed s/a/b/ {}'", ["sed s/a/b/ {}"], True),
    case("sudo-double-dash", "sudo -- systemctl restart api", RESTART_API, True, "restart", "api"),
    case("openssl-out", "openssl x509 -in c.pem -out d.pem", ["openssl x509 -in c.pem -out d.pem"], True, "write"),
    case("openssl-genrsa", "openssl genrsa 2048", ["openssl genrsa 2048"], True),
    case("git-output", "git log --output=/tmp/x", ["git log --output=/tmp/x"], True, "write"),
    case("kubectl-config-use-context", "kubectl config use-context prod", ["kubectl config use-context prod"],
         True),
    # bashlex keeps only the first line of a substitution; the reader reads it again
    case("multiline-substitution", "echo $(ls\nrm x)", ["ls", "rm x", "echo '$(ls\nrm x)'"], True, "delete"),
    case("multiline-backquotes", "echo `ls\nrm x`", ["ls", "rm x", "echo '`ls\nrm x`'"], True, "delete"),
    case("multiline-process-substitution", "cat <(ls\nrm x)", ["ls", "rm x", "cat '<(ls\nrm x)'"], True,
         "delete"),
    case("substitution-comment", "echo $(ls # )\nrm x)", ["ls", "rm x", "echo '$(ls # )\nrm x)'"], True,
         "delete"),
    case("brace-expansion-hides-a-flag", "sed {-i,s/a/b/,f}", ["sed {-i,s/a/b/,f}"], True),
    case("brace-expansion-program", "{rm,-rf,/tmp/x}", ["{rm,-rf,/tmp/x}"], True),
    case("ssh-nested-bash", "ssh h \"bash -c 'docker restart api'\"", ["docker restart api"], True, "restart",
         "api"),
]


@pytest.mark.parametrize("text, commands, mutating, kind, service", READ_ONLY + MUTATING)
def test_a_command_text_reads_as_a_shell_would(text: str, commands: list[str], mutating: bool, kind: str | None,
                                               service: str | None) -> None:
    reading = read_command(text)
    assert reading.parsed, reading.problem
    assert reading.problem is None
    assert [c.text for c in reading.commands] == commands
    assert is_read_only(reading) is (not mutating)
    judged = [e for _, e in reading_effects(reading) if e.mutating]
    first = judged[0] if judged else None
    got = (first.kind, first.service) if first is not None else (None, None)
    assert got == (kind, service)
    if first is not None:
        assert first.kind is None or first.kind in KINDS
        assert first.why


@pytest.mark.parametrize("text, problem", [
    pytest.param("cat <<EOF\nx\nEOF", "here-documents (<<) cannot be read", id="heredoc"),
    pytest.param("cat <<'EOF'\nx\nEOF", "here-documents (<<) cannot be read", id="heredoc-quoted"),
    pytest.param("ssh h 'cat <<EOF'", "in the text run by ssh: here-documents", id="heredoc-remote"),
    pytest.param('echo "unterminated', "the shell parser could not read it: unexpected EOF while looking for "
                 "matching '\"'", id="unterminated-quote"),
    pytest.param("bash -c 'echo \"x'", "in the text run by bash: the shell parser could not read it",
                 id="unterminated-inside-bash-c"),
    pytest.param("time ls", "the time keyword cannot be read", id="time-keyword"),
    pytest.param("echo ${x:-$(rm y)}", "a command inside ${…} cannot be read", id="substitution-in-parameter"),
    pytest.param("echo $((1+2))", "arithmetic $((…)) cannot be read", id="arithmetic"),
    pytest.param("[[ -f x ]]", "[[ … ]] cannot be read", id="double-bracket"),
    pytest.param("case x in a) y;; esac", "case … esac cannot be read", id="case"),
    pytest.param("echo $'a\\nb'", "$'…' and $\"…\" quoting cannot be read", id="ansi-c-quoting"),
    pytest.param("sed $'-i' s/a/b/ f", "$'…' and $\"…\" quoting cannot be read", id="ansi-c-hides-a-flag"),
    pytest.param("echo a\x00b", "NUL byte", id="nul-byte"),
    pytest.param("x" * (100 * 1024), f"the command is 102400 bytes; commands over {MAX_BYTES} bytes (16 KiB)",
                 id="100-KiB"),
    pytest.param("é" * (40 * 1024), "the command is 81920 bytes", id="bytes-not-characters"),
    pytest.param("echo " + "$(echo " * 20 + "x" + ")" * 20, f"nests more than {MAX_DEPTH} levels deep",
                 id="nested-20-deep"),
    pytest.param("(" * 11 + "ls" + ")" * 11, f"nests more than {MAX_DEPTH} levels deep", id="subshells-11-deep"),
    pytest.param("{ " * 11 + "ls; " + "}; " * 11, f"nests more than {MAX_DEPTH} levels deep", id="groups-11-deep"),
    pytest.param("(" * 8000 + "ls" + ")" * 8000, f"nests more than {MAX_DEPTH} levels deep", id="deep-parens"),
    pytest.param("{ " * 3000 + "ls; " + "}; " * 3000, "nests too deeply", id="recursion-limit"),
])
def test_what_cannot_be_read_says_why(text: str, problem: str) -> None:
    reading = read_command(text)
    assert reading == Reading((), False, reading.problem)
    assert reading.problem is not None and problem in reading.problem
    assert not is_read_only(reading)


def test_nesting_up_to_the_limit_is_read() -> None:
    text = "echo " + "$(echo " * MAX_DEPTH + "x" + ")" * MAX_DEPTH
    reading = read_command(text)
    assert reading.parsed and len(reading.commands) == MAX_DEPTH + 1


def test_wrappers_remote_host_and_written_files_are_reported() -> None:
    [cmd] = read_command('ssh -p 2222 -i key ops@web-1 "sudo systemctl restart nginx"').commands
    assert cmd == SimpleCommand(("systemctl", "restart", "nginx"), ("ssh", "sudo"), "web-1")
    [cmd] = read_command("nice -n 10 timeout 30 env A=1 systemctl restart api 2>&1 >/tmp/log").commands
    assert (cmd.wrappers, cmd.writes_files) == (("nice", "timeout", "env"), ("/tmp/log",))
    [cmd] = read_command("ssh ssh://root@db.internal:22 uptime").commands
    assert cmd.remote_host == "db.internal:22"
    [cmd] = read_command("/bin/sudo /usr/bin/systemctl restart api").commands
    assert (cmd.program, cmd.argv[0], cmd.wrappers) == ("systemctl", "/usr/bin/systemctl", ("sudo",))
    outer, inner = read_command("sudo bash -c 'systemctl status api' > out.txt").commands
    assert outer == SimpleCommand((), ("sudo", "bash"), None, ("out.txt",))  # bash -c's own redirection
    assert inner == SimpleCommand(("systemctl", "status", "api"), ("sudo", "bash"))
    assert (effect(outer).kind, effect(inner).mutating) == ("write", False)
    first, second = read_command("{ a; b; } > f 2>/dev/null").commands
    assert first.writes_files == second.writes_files == ("f",)
    [cmd] = read_command("echo x 2>&1 >&2 1>/dev/null 2>/dev/stderr").commands
    assert cmd.writes_files == ()


def test_words_known_only_at_run_time_are_flagged() -> None:
    assert read_command("cat $FILE").commands[0].expands
    assert not read_command("grep 'a$' f").commands[0].expands  # a literal dollar
    assert read_command("xargs grep x").commands[0].expands  # xargs appends words
    assert effect(read_command("cat $FILE").commands[0]).mutating is False  # cat only reads, whatever it reads
    assert effect(read_command("systemctl status $UNIT").commands[0]).mutating is False


def test_substitutions_run_outside_the_wrapper() -> None:
    subst, cmd = read_command("sudo echo $(id)").commands
    assert (subst.argv, subst.wrappers, cmd.wrappers) == (("id",), (), ("sudo",))


def test_the_tables_do_not_overlap() -> None:
    tables = [READERS, set(PROGRAM_KINDS), set(CHECKS)]
    assert [a & b for i, a in enumerate(tables) for b in tables[i + 1:]] == [set(), set(), set()]
    assert set(PROGRAM_KINDS.values()) <= KINDS


def test_program_names() -> None:
    assert program_name("/usr/local/sbin/nginx") == "nginx"
    assert program_name("/usr/bin/../bin/rm") == "rm"
    assert program_name("/opt/bin/rm") == "/opt/bin/rm"
    assert program_name("bin/rm") == "bin/rm"


def test_effects_say_why() -> None:
    cmd = read_command("frobnicate").commands[0]
    assert effect(cmd).why == "frobnicate is not known to be read-only"
    assert effect(read_command("sudo systemctl restart api").commands[0]).why == (
        "systemctl restart changes a service's state")
    assert effect(read_command("echo x > /etc/motd").commands[0]).why == "writes /etc/motd through a redirection"


# -- Claude Code permission rules -----------------------------------------------------------------------------

RULES = [rule.strip() for rule in READ_ONLY_TOOLS.split(",")]


def _one(text: str) -> SimpleCommand:
    commands = read_command(text).commands
    assert len(commands) == 1, commands
    return commands[0]


@pytest.mark.parametrize("rule, text, expected", [
    pytest.param("Bash", "rm -rf /", True, id="bare-bash-allows-everything"),
    pytest.param("Bash(*)", "rm -rf /", True, id="star-allows-everything"),
    pytest.param("Bash(systemctl status *)", "systemctl status api", True, id="wildcard"),
    pytest.param("Bash(systemctl status *)", "systemctl status", True, id="trailing-star-matches-bare"),
    pytest.param("Bash(systemctl status *)", "systemctl restart api", False, id="other-verb"),
    pytest.param("Bash(systemctl status *)", "systemctl statuses", False, id="word-boundary"),
    pytest.param("Bash(uptime)", "uptime", True, id="exact"),
    pytest.param("Bash(uptime)", "uptime -p", False, id="exact-no-arguments"),
    pytest.param("Bash(df *)", "df", True, id="df-bare"),
    pytest.param("Bash(df *)", "df -h", True, id="df-args"),
    pytest.param("Bash(df *)", "dfx", False, id="df-prefix-is-not-df"),
    pytest.param("Bash(docker ps *)", "docker ps -a", True, id="two-word-prefix"),
    pytest.param("Bash(ls*)", "lsof -i", True, id="star-without-space"),
    pytest.param("Bash(npm run test:*)", "npm run test", True, id="legacy-prefix-bare"),
    pytest.param("Bash(npm run test:*)", "npm run test --watch", True, id="legacy-prefix-args"),
    pytest.param("Bash(npm run test:*)", "npm run testing", False, id="legacy-prefix-word-boundary"),
    pytest.param("Bash(git * main)", "git checkout main", True, id="inner-wildcard"),
    pytest.param("Bash(git * main)", "git checkout dev", False, id="inner-wildcard-mismatch"),
    pytest.param("Read", "cat /etc/hosts", False, id="read-rule"),
    pytest.param("Grep", "grep x f", False, id="grep-rule"),
    pytest.param("BashOutput", "ls", False, id="other-tool-named-bash-something"),
    pytest.param("Bash(systemctl status *)", "sudo systemctl status api", True, id="sudo-stripped"),
    pytest.param("Bash(systemctl status *)", "/usr/bin/systemctl status api", True, id="system-path"),
    pytest.param("Bash(systemctl status *)", "./systemctl status api", False, id="relative-path"),
    pytest.param("Bash(systemctl status *)", "ssh web-1 'systemctl status api'", True, id="remote-command"),
    pytest.param("Bash(echo *)", 'echo "a b; rm -rf /"', True, id="quoted-argument-is-one-word"),
    pytest.param(" Bash(cat *) ", "cat /etc/hosts > /tmp/x", True, id="redirections-judged-by-the-caller"),
])
def test_rule_matching(rule: str, text: str, expected: bool) -> None:
    assert matches_rule(rule, _one(text)) is expected


@pytest.mark.parametrize("text, allowed", [
    pytest.param("systemctl status api | tail -n 20", True, id="every-part-allowed"),
    pytest.param("systemctl status api && systemctl restart api", False, id="one-part-not-allowed"),
    pytest.param("journalctl -u api | grep error", False, id="grep-not-in-the-tier1-bash-rules"),
    pytest.param("sudo docker logs api", True, id="wrapper-stripped"),
    pytest.param("cat $(systemctl restart api)", False, id="substitution-judged-too"),
    pytest.param("uptime; df -h; free -m", True, id="sequence"),
])
def test_a_text_is_allowed_when_every_command_is(text: str, allowed: bool) -> None:
    reading = read_command(text)
    assert reading.parsed
    assert all(allowed_by_rules(RULES, cmd) for cmd in reading.commands) is allowed


def test_rules_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="split the comma-separated setting"):
        allowed_by_rules(READ_ONLY_TOOLS, _one("uptime"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_read_command_never_raises(text: str) -> None:
    reading = read_command(text)
    assert reading.parsed or (reading.problem and not reading.commands)
    for cmd in reading.commands:
        judged = effect(cmd)
        assert judged.kind is None or judged.kind in KINDS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["sudo", "ssh h", "bash -c", "'", '"', "$(", ")", "`", "|", "&&", ";", "{", "}",
                                 "(", "<<", "<<<", ">", "2>&1", "$x", "${x}", "\\", "rm", "-rf", "\n", "#",
                                 "if", "then", "fi", "for", "do", "done", "eval", "xargs", "env A=1"]),
                max_size=30))
def test_hostile_shell_fragments_never_raise(parts: list[str]) -> None:
    reading = read_command(" ".join(parts))
    assert reading.parsed or reading.problem
