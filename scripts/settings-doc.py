#!/usr/bin/env python3
"""Writes docs/settings.md from the ``Settings`` class (app/config.py): every ``TIEROPS_*`` variable
with its default, the values it accepts and its description, in the class's order and sections.

Run it after changing a setting: ``python scripts/settings-doc.py`` (``--check`` only says whether
the file is current, exit 1 when it is not). tests/test_docs.py fails while the file is stale.
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotated_types import Ge, Gt, Le, Lt  # noqa: E402  (after the path: the checkout's app)
from pydantic import SecretStr  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

from app.config import RENAMED, Settings  # noqa: E402
from app.paths import BUNDLED_DIR  # noqa: E402

OUTPUT = ROOT / "docs" / "settings.md"
CONFIG = ROOT / "app" / "config.py"
# Defaults worked out at run time (the platform's state directory, the database beside it) or per
# command: written as people read them.
COMPUTED_DEFAULTS = {
    "home": "`$XDG_STATE_HOME/tierops` (`~/.local/state/tierops`)",
    "db": "`HOME/tierops.db`",
    "log_level": "`info` (serve, supervise, run, prune, backup), `warning` (others)",
}
SECTION = re.compile(r"^\s*# -- (.+?) -+\s*$")
FIELD = re.compile(r"^    ([a-z][a-z0-9_]*): ")

INTRO = """# Settings

[← README](../README.md)

Every setting is an environment variable (or a line of a `.env` file in the working directory).
An invalid value stops any command with one line, `tierops: error: TIEROPS_X: what is wrong
(got '…')`, exit 2; a `TIEROPS_*` name that is not a setting gets a warning naming the closest
one (`TIEROPS_INTERVALS … did you mean TIEROPS_INTERVAL?`). `tierops doctor` shows both, and the
dashboard's `/config` page shows every setting's value in force and where it came from. Secrets
(tokens, notification URLs, routes, the heartbeat URL) are never shown, only whether they are set.

"""


def sections() -> dict[str, str]:
    """Each field's section, from the ``# -- name ---`` comments of the Settings class."""
    found: dict[str, str] = {}
    current = "general"
    inside = False
    for line in CONFIG.read_text(encoding="utf-8").splitlines():
        if line.startswith("class Settings("):
            inside = True
            continue
        if inside and line and not line.startswith((" ", "#")):
            break
        if not inside:
            continue
        if m := SECTION.match(line):
            current = m.group(1)
        elif (m := FIELD.match(line)) and m.group(1) in Settings.model_fields:
            found[m.group(1)] = current
    return found


def default_text(name: str, field: FieldInfo) -> str:
    if name in COMPUTED_DEFAULTS:
        return COMPUTED_DEFAULTS[name]
    value: Any = field.default
    if value is None or value == "":
        return "(empty)"
    if isinstance(value, SecretStr):
        return "(set)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        try:
            return f"bundled `{value.relative_to(BUNDLED_DIR).as_posix()}`"
        except ValueError:
            return f"`{value}`"
    return f"`{value}`"


def accepted(field: FieldInfo) -> str:
    """The values a setting accepts, from its type and bounds."""
    annotation = field.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if annotation is bool:
        return "`true`, `false`"
    bounds = []
    for meta in field.metadata:
        for kind, sign in ((Ge, "≥"), (Gt, ">"), (Le, "≤"), (Lt, "<")):
            if isinstance(meta, kind):
                bounds.append(f"{sign} {getattr(meta, kind.__name__.lower())}")
    kinds = {int: "a whole number", float: "a number", str: "text"}
    base = next((word for t, word in kinds.items() if annotation is t), "")
    if not base:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        base = ("a path" if Path in args else "a secret" if SecretStr in args else "text") if args else "text"
        if annotation is Path:
            base = "a path"
    return base + (f", {' and '.join(bounds)}" if bounds else "")


def cell(text: str) -> str:
    """Text for a table cell: ``|`` escaped, and ``*`` outside code spans (``ANTHROPIC_*``, a cron
    expression) kept literal rather than read as emphasis."""
    parts = text.replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(part if i % 2 else part.replace("*", "\\*") for i, part in enumerate(parts))


def render() -> str:
    """docs/settings.md as the Settings class says it should read."""
    where = sections()
    out = [INTRO]
    if RENAMED:
        renamed = ", ".join(f"`{old}` (now `{new}`)" for old, new in sorted(RENAMED.items()))
        out.append(f"Renamed settings still honoured under their old name, with a warning: {renamed}.\n\n")
    out.append("Generated from `app/config.py` by `scripts/settings-doc.py`; do not edit by hand.\n")
    current = None
    for name, field in Settings.model_fields.items():
        section = where.get(name, "general")
        if section != current:
            current = section
            out.append(f"\n## {section[:1].upper()}{section[1:]}\n\n")
            out.append("| variable | default | accepts | description |\n| --- | --- | --- | --- |\n")
        out.append(f"| `TIEROPS_{name.upper()}` | {cell(default_text(name, field))} | {cell(accepted(field))} | "
                   f"{cell(field.description or '')} |\n")
    return "".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/settings.md is not current")
    args = parser.parse_args()
    text = render()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
    if args.check:
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python scripts/settings-doc.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.parent.mkdir(parents=True, exist_ok=True)
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
