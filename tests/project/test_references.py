"""References: the README's bibliography, CITATION.cff, each notebook's introduction, and no pointer a reader cannot follow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
STUDIES = ("arXiv:2603.11273", "arXiv:2605.29641", "arXiv:2206.02371")  # the two studies and DQ
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def test_readme_bibliography_names_the_studies_and_the_methods():
    refs = README.split("## References", 1)[1].split("\n## ", 1)[0]
    for arxiv in STUDIES:
        assert arxiv in refs, arxiv
    keys = re.findall(r"^\| ([A-Z][^|]+ \d{4}) \|", refs, flags=re.M)
    assert len(keys) >= 10 and len(set(keys)) == len(keys), keys


def test_citation_cff_is_valid_and_cites_the_studies():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"]
    from asrsched import __version__

    assert cff["version"] == __version__  # one version everywhere
    ids = {i["value"] for r in cff["references"] for i in r["identifiers"]}
    assert set(STUDIES) <= ids


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_introduction_cites_its_sources(nb):
    src = nb.read_text()
    intro = src.split("# %% [markdown]", 1)[1].split("\n# %%", 1)[0]
    assert "**References**" in intro
    cited = re.findall(r"arXiv:\d{4}\.\d{4,5}", intro)
    assert cited and all(c in README for c in cited), cited


def test_no_pointer_a_reader_cannot_follow():
    """Code and notebooks say what they mean, not "issue 12", "paper 1" or "the field notes"."""
    bad = re.compile(r"\bissue \d+|\bfield[ -]notes\b|\bpaper [12]\b", re.I)
    files = [
        *(ROOT / "asrsched").rglob("*.py"),
        *(ROOT / "asrsched").rglob("*.md"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "scripts").glob("*.sh"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *NOTEBOOKS,
    ]
    hits = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in files
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if bad.search(line) and f != Path(__file__).resolve()
    ]  # this test names what it looks for
    assert not hits, hits
