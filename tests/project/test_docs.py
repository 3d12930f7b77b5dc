"""The documentation site builds in strict mode: every warning and every broken ``asrsched`` reference fails it.

Runs ``bash scripts/docs.sh`` as the main job and CI do (into a temporary folder), checks that the API
reference, the guides, the bibliography and the notebooks are there, that a notebook from a run folder
is rendered with its outputs, and that a page referring to a function that does not exist fails the build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from extras import need

need("sphinx", "nbconvert", "mistune")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _build(src: Path, out: Path, run_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASRSCHED_DOCS_NOTEBOOKS=str(run_dir or ""))
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-E", "-q", str(src), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
    )


def test_site_builds_strictly_with_api_guides_bibliography_and_notebooks(tmp_path):
    run = tmp_path / "run"  # a run folder holding one executed notebook: its output must reach the site
    run.mkdir()
    nb = json.loads((ROOT / "notebooks" / "03_workload_drift.ipynb").read_text())
    nb["cells"].append(
        {
            "cell_type": "code",
            "execution_count": 1,
            "id": "probe",
            "metadata": {},
            "source": "1 + 1",
            "outputs": [
                {
                    "output_type": "execute_result",
                    "execution_count": 1,
                    "metadata": {},
                    "data": {"text/plain": "OUTPUT-FROM-THE-RUN-42"},
                }
            ],
        }
    )
    (run / "03_workload_drift.ipynb").write_text(json.dumps(nb))
    out = tmp_path / "html"
    r = subprocess.run(
        ["bash", "scripts/docs.sh", str(run)],
        cwd=ROOT,
        env=dict(os.environ, ASRSCHED_DOCS_OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "WARNING" not in r.stderr and "ERROR" not in r.stderr, r.stderr[-3000:]
    engine = (out / "_generated" / "api" / "asrsched.sim.engine.html").read_text()
    assert 'id="asrsched.sim.engine.simulate"' in engine  # the API reference documents the functions
    assert {p.stem for p in (out / "_generated" / "api").glob("*.html")} >= {
        "asrsched.core.service",
        "asrsched.abtest.estimators",
        "asrsched.serving.app",
        "asrsched.figures.style",
    }
    refs = (out / "_generated" / "references.html").read_text()
    assert "arXiv" in refs or "arxiv" in refs  # the bibliography from the README
    assert "Vocabulary" in (out / "_generated" / "contributing.html").read_text()
    pages = sorted(p.name for p in (out / "notebooks").glob("*.html"))
    assert pages == sorted(p.with_suffix(".html").name for p in (ROOT / "notebooks").glob("0*.ipynb"))
    assert "OUTPUT-FROM-THE-RUN-42" in (out / "notebooks" / "03_workload_drift.html").read_text()
    assert "OUTPUT-FROM-THE-RUN-42" not in (out / "notebooks" / "02_policy_sweep.html").read_text()
    listing = (out / "_generated" / "notebooks.html").read_text()
    assert "executed in the main job" in listing and "source only" in listing


def test_a_broken_reference_fails_the_build(tmp_path):
    """The site's configuration with a page that names a function that does not exist beside one that does.

    The API reference is cut to the one module the page refers to (the full one is the other test's), so the
    build is quick; the only warning is the broken name."""
    src = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns("_build", "_generated"))
    (src / "broken.rst").write_text(
        "Broken\n======\n\nSee :func:`asrsched.core.labels.no_such_function`, unlike "
        ":func:`asrsched.core.labels.metric_label`.\n"
    )
    (src / "api.rst").write_text(
        "API\n===\n\n.. autosummary::\n   :toctree: _generated/api\n\n   asrsched.core.labels\n"
    )
    idx = src / "index.rst"
    idx.write_text(idx.read_text().replace("   api\n", "   api\n   broken\n"))
    r = _build(src, tmp_path / "html")
    assert r.returncode != 0
    warnings = [ln for ln in r.stderr.splitlines() if "WARNING" in ln or "ERROR" in ln]
    assert len(warnings) == 1 and "asrsched.core.labels.no_such_function" in warnings[0], r.stderr[-3000:]
    assert (
        'id="asrsched.core.labels.metric_label"'
        in (tmp_path / "html" / "_generated" / "api" / "asrsched.core.labels.html").read_text()
    )
