"""Every relative link of the top-level pages (README, CONTRIBUTING, BENCHMARKS), config/README.md and docs/
points at a file (and heading) that exists."""

from __future__ import annotations

import re

import pytest

from tests.helpers import PROJECT_DIR

PAGES = [*sorted(PROJECT_DIR.glob("*.md")), PROJECT_DIR / "config" / "README.md", *sorted((PROJECT_DIR / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    out = set()
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _links(text: str) -> list[str]:
    # Links inside code fences are examples, not links.
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [m for m in LINK.findall(prose) if not re.match(r"[a-z]+:", m)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for link in _links(page.read_text(encoding="utf-8")):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8"))):
            broken.append(link)
    assert broken == []


def test_readme_is_a_front_page():
    lines = (PROJECT_DIR / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert lines[2:6] == [
        "```sh",
        "make plan    # offline plan of the dev stack: no Pulumi CLI, no cluster, no credentials",
        "make test    # the whole test suite",
        "```",
    ]
