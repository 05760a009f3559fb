"""README.md's Layout section against the tree (issue 16 point 9): every path it names exists, and every
top-level folder and every package of the library down to two levels is named."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_TRACKED = {"data", "build", "dist"}  # .gitignore: what a build or an install writes


def layout_paths(readme: str) -> list[str]:
    """The paths of the Layout block: an entry's depth is its indent / 2, its parent the last entry above."""
    block = readme.split("## Layout\n\n```\n", 1)[1].split("```", 1)[0]
    stack: list[str] = []
    paths = []
    for line in block.splitlines():
        m = re.match(r"( *)(\S+)", line)
        if not m or len(m.group(1)) % 2 or not re.fullmatch(r"[\w.\-]+/?", m.group(2)):
            continue  # a continued description
        depth = len(m.group(1)) // 2
        stack[depth:] = [m.group(2).rstrip("/")]
        paths.append("/".join(stack))
    return paths


def test_every_layout_entry_exists():
    paths = layout_paths((ROOT / "README.md").read_text())
    assert len(paths) > 20
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README.md Layout names {missing}, which the tree does not have"


def test_every_folder_is_in_the_layout():
    listed = set(layout_paths((ROOT / "README.md").read_text()))
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
           and p.name not in NOT_TRACKED and not p.name.endswith(".egg-info")}
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "ehrxqa_pipeline").glob("*/__init__.py")} | \
        {str(p.parent.relative_to(ROOT)) for p in (ROOT / "ehrxqa_pipeline").glob("*/*/__init__.py")}
    unlisted = sorted((top | packages) - listed)
    assert not unlisted, f"README.md Layout does not name {unlisted}: add a line saying what each holds"


def test_a_planted_layout_is_read_as_written():
    readme = "## Layout\n\n```\na/           x\n  b/         y\n             continued\n    c.py     z\nd/\n```\n"
    assert layout_paths(readme) == ["a", "a/b", "a/b/c.py", "d"]
