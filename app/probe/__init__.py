"""Tier 0, the probe: deterministic checks run without a language model, for $0.

``tierops probe --checks FILE`` has the claude CLI's contract (the same flags, stream-json on
stdout, a ``result`` line with ``structured_output``), so the supervisor spawns, streams, stores,
validates and routes it like any tier; the language-model tiers run only when it escalates.

* ``targets``: durations, ``host:port``, URLs and commands without their secrets;
* ``yamltext``: operators' YAML without aliases, and the line of each node;
* ``inventory``: the checks file (``schemas/checks.json``) and the inventory as the language-model
  tiers' prompt sees it; ``inventory_rules``: its problems as ``FILE:LINE``;
* ``environment``: the minimal environments of the probe and of its command checks (no secrets);
* ``net``, ``http``, ``x509``, ``command``: the means of the checks (resolving without blocking,
  a minimal HTTP/1.1 client, a certificate's dates, a command in its own process group);
* ``reaper``: what a command check detaches, killed when it ends (a child subreaper, Linux);
* ``limits``: the open-files limit raised, and how many checks fit in it at once;
* ``checks``: one check → a :class:`~app.probe.checks.CheckResult`, all checks concurrently;
* ``executor``: the stream-json the probe prints, and its report.

It imports only the foundation modules, so it sits first on the import line.
"""

import logging

log = logging.getLogger(__name__)
