"""The site's pages that are not docstrings: the repository's Markdown files and the notebooks.

At ``builder-inited`` each Markdown file becomes an ``.rst`` page holding its HTML (rendered with
mistune, which ships with nbconvert; links between the rendered files are rewritten to their pages):
the README, CONTRIBUTING, the changelog, and the README's *References* section as the bibliography.
At ``build-finished`` every notebook is rendered to ``notebooks/<name>.html`` with nbconvert: the
executed copy in ``$ASRSCHED_DOCS_NOTEBOOKS`` (the main job's run folder) when there is one, else the
source without outputs (the notebooks page says which).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import asrsched

ROOT = Path(asrsched.__file__).resolve().parents[1]  # the checkout whose package is documented
GEN = Path(__file__).resolve().parents[1] / "_generated"
#: Markdown file -> (page name, title)
PAGES = {
    "README.md": ("readme", "Overview (README)"),
    "CONTRIBUTING.md": ("contributing", "Contributing"),
    "CHANGELOG.md": ("changelog", "Changelog"),
}
NOTEBOOKS_ENV = "ASRSCHED_DOCS_NOTEBOOKS"


def _html(markdown: str) -> str:
    import mistune

    html = mistune.create_markdown(escape=False, plugins=["table", "strikethrough", "url"])(markdown)
    for md, (page, _) in PAGES.items():  # links between the rendered files point to their pages
        html = re.sub(
            rf'href="(?:\./)?{re.escape(md)}(#[^"]*)?"', lambda m, p=page: f'href="{p}.html{m.group(1) or ""}"', html
        )
    return html


def _page(title: str, html: str, source: str) -> str:
    body = "\n".join("   " + ln if ln.strip() else "" for ln in html.splitlines())
    return f"{title}\n{'=' * len(title)}\n\n*From* ``{source}`` *in the repository.*\n\n.. raw:: html\n\n{body}\n"


def _references(readme: str) -> str:
    m = re.search(r"^## References\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if not m:
        raise RuntimeError("README.md has no '## References' section: the bibliography page needs it")
    return m.group(1)


def notebook_sources() -> list[tuple[Path, bool]]:
    """Every notebook to render, ``(path, executed)``: the run folder's executed copy when it has one."""
    run = os.environ.get(NOTEBOOKS_ENV, "").strip()
    out = []
    for src in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        done = Path(run) / src.name if run else None
        out.append((done, True) if done and done.is_file() else (src, False))
    return out


def _title(nb: Path) -> str:
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return nb.stem


def write_pages(app=None) -> None:
    """Write ``docs/_generated/*.rst`` (the Markdown pages and the notebooks page)."""
    GEN.mkdir(exist_ok=True)
    for md, (page, title) in PAGES.items():
        (GEN / f"{page}.rst").write_text(_page(title, _html((ROOT / md).read_text()), md))
    refs = _references((ROOT / "README.md").read_text())
    (GEN / "references.rst").write_text(_page("Bibliography", _html(refs), "README.md, References"))
    run = os.environ.get(NOTEBOOKS_ENV, "").strip()
    rows = []
    for nb, executed in notebook_sources():
        how = (
            f"executed in the main job's run <code>{Path(run).name}</code>"
            if executed
            else "source only, no outputs (build with the main job's run folder for outputs: <code>bash scripts/docs.sh RUN_DIR</code>)"
        )
        rows.append(f'<li><a href="../notebooks/{nb.stem}.html">{nb.stem}</a>: {_title(nb)} ({how})</li>')
    html = "<ul>\n" + "\n".join(rows) + "\n</ul>"
    (GEN / "notebooks.rst").write_text(_page("Notebooks", html, "notebooks/"))


def render_notebooks(app, exception) -> None:
    """Render every notebook to ``<outdir>/notebooks/<name>.html`` (html builders only)."""
    if exception is not None or app.builder.format != "html":
        return
    import nbformat
    from nbconvert import HTMLExporter

    out = Path(app.outdir) / "notebooks"
    out.mkdir(exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    for nb, _ in notebook_sources():
        body, _ = exporter.from_notebook_node(nbformat.read(nb, as_version=4))
        (out / f"{nb.stem}.html").write_text(body)


def setup(app):
    app.connect("builder-inited", write_pages)
    app.connect("build-finished", render_notebooks)
    return {"parallel_read_safe": True, "version": "1"}
