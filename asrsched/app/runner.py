"""Batch execution of the notebook series with papermill.

* :func:`notebooks` lists the numbered notebooks (``NN_*.ipynb``) in reading order: those shipped
  in the package, or ``$ASRSCHED_ROOT/notebooks`` (see :mod:`asrsched.app.paths`);
* :func:`run_notebook` executes one with parameters (papermill, with an execution timeout per
  cell), writing the executed copy into a run folder (default ``<base>/runs/<timestamp>/``) and its
  figures and tables into ``<run folder>/figures/<notebook>/``; with ``gallery=True`` into the
  report gallery ``<base>/figures/<notebook>/`` instead (``bash scripts/main.sh``);
* :func:`run_series` runs several (default: all) in order, keeps going after a failure, and
  writes ``<run folder>/summary.csv`` (notebook, status, seconds, error) and the index
  ``README.md`` of the figures folder it wrote (the gallery's ``figures/README.md`` only when
  ``gallery=True``). Figures go through :func:`asrsched.figures.style.export_figure`, one kaleido
  server per notebook's export batch.

The kernels get ``$ASRSCHED_FIGURES`` (where exports go), ``$ASRSCHED_RUNS`` (the base's ``runs/``,
for the notebooks' caches) and ``$ASRSCHED_PROGRESS=text`` (progress as single text lines, which
an executed copy keeps readable).

Parameter files are JSON: ``{"02_policy_sweep": {"N_REQUESTS": 500}, "*": {"SEED": 1}}``
(:mod:`asrsched.app.params`).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from asrsched.app import paths
from asrsched.app.params import check_parameters, load_params, notebook_parameters, params_for

__all__ = [
    "notebooks",
    "resolve",
    "run_notebook",
    "run_series",
    "NotebookRun",
    "load_params",
    "notebook_parameters",
    "figures_root_for",
]

DEFAULT_TIMEOUT_S = 900


def figures_root_for(
    run_dir: str | os.PathLike,
    *,
    figures_root: str | os.PathLike | None = None,
    gallery: bool = False,
    root: str | os.PathLike | None = None,
) -> Path:
    """Where a batch run's exports go: ``figures_root`` if given, the gallery ``<base>/figures`` with
    ``gallery=True``, else ``<run_dir>/figures``."""
    if figures_root is not None:
        return Path(figures_root)
    return paths.figures_dir(root) if gallery else Path(run_dir) / "figures"


class _Env:
    """Set environment variables for the duration of a block (the kernel inherits them)."""

    def __init__(self, **values: str | None):
        self.values = {k: v for k, v in values.items() if v is not None}
        self.before: dict[str, str | None] = {}

    def __enter__(self):
        for k, v in self.values.items():
            self.before[k] = os.environ.get(k)
            os.environ[k] = v
        return self

    def __exit__(self, *exc):
        for k, v in self.before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def notebooks(root: str | os.PathLike | None = None) -> list[Path]:
    """Numbered notebooks (``NN_*.ipynb``) in reading order, from :func:`asrsched.app.paths.notebooks_dir`."""
    d = paths.notebooks_dir(root)
    return sorted(p for p in d.glob("[0-9][0-9]_*.ipynb"))


def resolve(name: str, root: str | os.PathLike | None = None) -> Path:
    """A notebook by path, file name, stem or number prefix (``"02"``)."""
    p = Path(name)
    if p.suffix == ".ipynb" and p.exists():
        return p
    allnb = notebooks(root)
    for nb in allnb:
        if name in (nb.name, nb.stem) or nb.stem.startswith(f"{name}_"):
            return nb
    raise ValueError(f"unknown notebook {name!r}; available: {', '.join(nb.stem for nb in allnb)}")


@dataclass
class NotebookRun:
    """One notebook execution: its name, status, time, output notebook and any error."""

    notebook: str
    status: str
    seconds: float
    output: str
    error: str = ""


def run_notebook(
    name: str | os.PathLike,
    parameters: Mapping[str, Any] | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    figures_root: str | os.PathLike | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    root: str | os.PathLike | None = None,
    progress: bool = True,
    gallery: bool = False,
    formats: Sequence[str] | None = None,
) -> NotebookRun:
    """Execute one notebook with papermill; failures are reported, not raised.

    ``run_dir`` defaults to ``<base>/runs/<timestamp>``; exports go to :func:`figures_root_for`
    (``<run_dir>/figures``; the gallery ``<base>/figures`` with ``gallery=True``; or ``figures_root``).
    ``formats`` (e.g. ``["html", "png", "svg", "pdf"]``) sets the formats of every export. The kernel
    runs in the notebook's folder when that is ``<base>/notebooks`` (a checkout), else in ``run_dir``
    (:func:`asrsched.app.paths.kernel_dir`). Unknown parameter names raise ``ValueError`` before
    anything runs.
    """
    import papermill as pm

    from asrsched.figures.progress import PROGRESS_ENV
    from asrsched.figures.style import FORMATS, FORMATS_ENV

    nb = resolve(str(name), root)
    params = dict(parameters or {})
    check_parameters(nb, params)
    if formats is not None:
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise ValueError(f"formats: unknown {bad or list(formats)!r}; allowed: {', '.join(FORMATS)}")
    run_dir = Path(run_dir or paths.new_run_dir(root))
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / nb.name
    cwd = paths.kernel_dir(nb, fallback=run_dir, root=root)
    figs = figures_root_for(run_dir, figures_root=figures_root, gallery=gallery, root=root).resolve()
    env = _Env(
        **{
            paths.FIGURES_ENV: str(figs),
            paths.RUNS_ENV: str(paths.runs_dir(root).resolve()),
            PROGRESS_ENV: "text",
            FORMATS_ENV: ",".join(formats) if formats else None,
        }
    )
    t0 = time.perf_counter()
    try:
        with env:
            pm.execute_notebook(
                str(nb),
                str(out),
                parameters=params,
                kernel_name="python3",
                cwd=str(cwd),
                execution_timeout=timeout_s,
                progress_bar=progress,
                request_save_on_cell_execute=True,
            )
        return NotebookRun(nb.stem, "ok", time.perf_counter() - t0, str(out))
    except Exception as e:  # a failed notebook must not stop the series
        msg = f"{type(e).__name__}: {e}".strip()
        return NotebookRun(
            nb.stem, "failed", time.perf_counter() - t0, str(out), msg[-2000:] or traceback.format_exc()[-2000:]
        )


def run_series(
    names: Sequence[str] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    figures_root: str | os.PathLike | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    root: str | os.PathLike | None = None,
    gallery: bool = False,
    formats: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Run notebooks in order (all by default); returns and saves the summary table.

    Writes ``<run_dir>/summary.csv`` and the index ``README.md`` of the figures folder
    (:func:`figures_root_for`: ``<run_dir>/figures``, or with ``gallery=True`` the report gallery
    ``<base>/figures``, whose ``README.md`` is rewritten only then).
    """
    nbs = [resolve(n, root) for n in names] if names else notebooks(root)
    params = dict(params or {})
    for key in params:
        if key != "*":
            resolve(key, root)  # unknown notebook names fail before anything runs
    for nb in nbs:  # every notebook's parameters (names, kinds) are checked before the first one runs
        check_parameters(nb, params_for(nb.stem, params, notebook_parameters(nb)))
    run_dir = Path(run_dir or paths.new_run_dir(root))
    rows = []
    for nb in nbs:
        p = params_for(nb.stem, params, notebook_parameters(nb))  # "*" applies where it fits
        print(f"[asrsched] running {nb.stem} {json.dumps(p) if p else ''}", flush=True)
        r = run_notebook(
            nb,
            p,
            run_dir=run_dir,
            figures_root=figures_root,
            timeout_s=timeout_s,
            root=root,
            gallery=gallery,
            formats=formats,
        )
        print(f"[asrsched] {nb.stem}: {r.status} in {r.seconds:.0f} s {r.error[:300]}", flush=True)
        rows.append(r.__dict__)
    df = pd.DataFrame(rows)
    run_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(run_dir / "summary.csv", index=False)
    from asrsched.app.gallery import write_gallery  # figures/README.md: every figure, its caption and parameters

    write_gallery(
        figures_root_for(run_dir, figures_root=figures_root, gallery=gallery, root=root), run_dir=run_dir, root=root
    )
    return df
