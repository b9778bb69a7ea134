"""The documentation stays true: docs/settings.md is what the Settings class generates, every
setting is in it, links between the README and docs/ resolve, the README stays short, and the
Quick start stays two commands that CI runs the second of."""

from __future__ import annotations

import re
import runpy

from app.config import Settings
from tests.fakes.claude_control import REPO as ROOT

README = (ROOT / "README.md").read_text()
SETTINGS_DOC = ROOT / "docs" / "settings.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_settings_doc_is_generated_from_the_settings_class():
    render = runpy.run_path(str(ROOT / "scripts" / "settings-doc.py"), run_name="settings_doc")["render"]
    assert SETTINGS_DOC.read_text() == render(), "docs/settings.md is stale: run python scripts/settings-doc.py"


def test_every_setting_is_in_the_settings_doc():
    documented = set(re.findall(r"^\| `(TIEROPS_[A-Z0-9_]+)` \|", SETTINGS_DOC.read_text(), re.M))
    expected = {f"TIEROPS_{name.upper()}" for name in Settings.model_fields}
    assert documented == expected


def test_every_setting_has_a_description():
    for name, field in Settings.model_fields.items():
        assert field.description, name


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", section, re.M | re.S)
    commands = [[line.strip() for line in block.splitlines() if line.strip()] for block in blocks]
    assert [len(c) for c in commands] == [1, 1], "two code blocks of one command each"
    assert "tierops serve" in commands[0][0]
    assert commands[1][0] == "bash scripts/test.sh"
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_short():
    assert len(README.encode()) <= 20 * 1024


def _anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, candidate = 0, slug
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def test_links_between_the_readme_and_the_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # an outside address
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
    assert all(f"docs/{p.name}" in README for p in (ROOT / "docs").glob("*.md")), "the README lists every doc"
