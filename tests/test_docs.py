"""The README stays a front door, and the documentation's links lead somewhere.

- The README opens with exactly the two commands of the project's contract (CI runs its
  test command) and stays short: the reference material lives in docs/.
- Every relative link and image in README.md and docs/*.md names a file of the
  repository, and a ``#fragment`` into a Markdown file names one of its headings.
- The README's first-five-minutes screenshots are the ones docs/screenshots/take_start.py
  takes, every one of them shown, at the desktop or phone width it uses.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 200
SHOTS = ROOT / "docs" / "screenshots"
FIRST_COMMANDS = ["    pip install . && agent-bridge serve", "    ./scripts/test"]

LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (examples there are not links)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", "")).lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_readme_starts_with_the_two_commands_and_stays_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if line.strip()]
    assert body[0].startswith("# ")
    assert body[1:3] == FIRST_COMMANDS
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference material to docs/"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path):
    broken = []
    for line in prose(doc):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            path_part, _, fragment = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert broken == []


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_first_five_minutes_screenshots_are_the_scripts_and_all_shown():
    shown = set(re.findall(r"docs/screenshots/(start-[\w-]+\.png)", README.read_text(encoding="utf-8")))
    taken = set(re.findall(r'"(start-[\w-]+\.png)"', (SHOTS / "take_start.py").read_text(encoding="utf-8")))
    on_disk = {p.name for p in SHOTS.glob("start-*.png")}
    assert shown == taken == on_disk
    for name in sorted(on_disk):
        width, height = png_size(SHOTS / name)
        assert width == (390 if "phone" in name else 1280) and 300 <= height <= 1000, (name, width, height)
