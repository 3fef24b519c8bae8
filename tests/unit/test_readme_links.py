"""The README is the front door: every relative link in it leads somewhere, and every guide it
links to is a page of the documentation site. (The site's own links are checked by
`mkdocs build --strict`, which `make test` runs.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), target up to a space (a title may follow) or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(markdown: str) -> list[str]:
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    return LINK.findall(prose)


def relative(targets: list[str]) -> list[str]:
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def slug(heading: str) -> str:
    """GitHub's (and the toc extension's, for these headings) anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", markdown), re.M)}


def test_the_link_finder_sees_links_and_skips_code() -> None:
    text = 'See [a](docs/a.md#x) and ![b](img/b.png "B"), not `[c](c.md)` or\n```\n[d](d.md)\n```\n'
    assert links(text) == ["docs/a.md#x", "img/b.png"]
    assert relative(["https://x.org", "mailto:a@b", "docs/a.md"]) == ["docs/a.md"]
    assert slug("What to set in `infra/sluice.yaml`") == "what-to-set-in-infrasluiceyaml"


def test_the_readme_links_to_the_docs_at_all() -> None:
    targets = relative(links(README.read_text()))
    assert any(t.startswith("docs/") for t in targets), "the README should link to its guides"


@pytest.mark.parametrize("target", sorted(set(relative(links(README.read_text())))))
def test_every_relative_readme_link_resolves(target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (README.parent / path).resolve() if path else README
    assert file.exists(), f"README.md links to {path}, which does not exist"
    assert REPO in file.parents or file == README, f"{target} leaves the repository"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file.read_text()), f"{path} has no heading for #{anchor}"


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_guide_the_readme_links_to_is_on_the_site() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    docs = config.get("docs_dir", "docs")
    linked = {t.partition("#")[0] for t in relative(links(README.read_text()))}
    guides = {t.removeprefix(f"{docs}/") for t in linked if t.startswith(f"{docs}/") and t.endswith(".md")}
    assert guides, "the README should link to its guides"
    assert guides <= nav, f"linked from the README but not in mkdocs.yml's nav: {sorted(guides - nav)}"
    for page in nav:
        assert (REPO / docs / page).exists(), f"mkdocs.yml's nav names {page}, which does not exist"
