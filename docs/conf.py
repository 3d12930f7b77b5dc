"""Sphinx configuration of the documentation site: ``bash scripts/docs.sh [RUN_DIR]``.

Strict: the build runs with ``-W --keep-going -n`` (every warning, and every reference to an
``asrsched`` name that does not exist, fails it). The API reference comes from the docstrings
(autosummary, one page per module); the guides, the bibliography and the changelog are the
repository's Markdown files (:mod:`asrsched_pages`); the notebooks are rendered with the outputs of
the main job's run when ``ASRSCHED_DOCS_NOTEBOOKS`` names its folder, else from their sources.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

import asrsched  # noqa: E402

project = "asrsched"
author = "the asrsched authors"
release = version = asrsched.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.viewcode", "asrsched_pages"]
templates_path = ["_templates"]
exclude_patterns = ["_build"]
autosummary_generate = True
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False  # not tqdm's or vLLM's own docstrings
autodoc_typehints = "none"  # the signatures carry them; the docstrings say what they mean
html_theme = "alabaster"
html_title = f"asrsched {release}"
html_theme_options = {
    "description": "Duration-aware scheduling for ASR serving",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "260px",
}
# a broken reference fails the build, for this package's names; other projects' names are not checked
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!asrsched\b).*")]
