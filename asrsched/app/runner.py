"""Batch execution of the notebook series with papermill.

* :func:`notebooks` lists the numbered notebooks (``NN_*.ipynb``) in reading order: those shipped
  in the package, or ``$ASRSCHED_ROOT/notebooks`` (see :mod:`asrsched.app.paths`);
* :func:`run_notebook` executes one with parameters (papermill, with an execution timeout per
  cell), writing the executed copy into a run folder (default ``./runs/<timestamp>/``) and its
  figures into ``<figures>/<notebook>/`` (default ``./figures``);
* :func:`run_series` runs several (default: all) in order, keeps going after a failure, and
  writes ``<run folder>/summary.csv`` (notebook, status, seconds, error) and the figure gallery.
  Figures go through :func:`asrsched.figures.style.export_figure`, one kaleido server per
  notebook's export batch.

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
from asrsched.app.params import load_params, notebook_parameters, params_for

__all__ = ["notebooks", "resolve", "run_notebook", "run_series", "NotebookRun", "load_params",
           "notebook_parameters"]

DEFAULT_TIMEOUT_S = 900


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
) -> NotebookRun:
    """Execute one notebook with papermill; failures are reported, not raised.

    ``run_dir`` defaults to ``<base>/runs/<timestamp>``, ``figures_root`` to ``<base>/figures``
    (base: ``root``, ``$ASRSCHED_ROOT`` or the current directory). The kernel runs in the
    notebook's folder when that is ``<base>/notebooks`` (a checkout), else in ``run_dir``
    (:func:`asrsched.app.paths.kernel_dir`). Unknown parameter names raise ``ValueError`` before
    anything runs.
    """
    import papermill as pm

    nb = resolve(str(name), root)
    params = dict(parameters or {})
    known = notebook_parameters(nb)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{nb.stem}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(known)}")
    run_dir = Path(run_dir or paths.new_run_dir(root))
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / nb.name
    cwd = paths.kernel_dir(nb, fallback=run_dir, root=root)
    env_before = os.environ.get(paths.FIGURES_ENV)
    os.environ[paths.FIGURES_ENV] = str(Path(figures_root or paths.figures_dir(root)).resolve())
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(
            str(nb), str(out), parameters=params, kernel_name="python3", cwd=str(cwd),
            execution_timeout=timeout_s, progress_bar=progress, request_save_on_cell_execute=True,
        )
        return NotebookRun(nb.stem, "ok", time.perf_counter() - t0, str(out))
    except Exception as e:  # a failed notebook must not stop the series
        msg = f"{type(e).__name__}: {e}".strip()
        return NotebookRun(nb.stem, "failed", time.perf_counter() - t0, str(out),
                           msg[-2000:] or traceback.format_exc()[-2000:])
    finally:
        if env_before is None:
            os.environ.pop(paths.FIGURES_ENV, None)
        else:
            os.environ[paths.FIGURES_ENV] = env_before


def run_series(
    names: Sequence[str] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    figures_root: str | os.PathLike | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    root: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Run notebooks in order (all by default); returns and saves the summary table.

    Writes ``<run_dir>/summary.csv`` and rewrites the gallery ``<figures_root>/README.md``.
    """
    nbs = [resolve(n, root) for n in names] if names else notebooks(root)
    params = dict(params or {})
    for key in params:
        if key != "*":
            resolve(key, root)  # unknown notebook names fail before anything runs
    run_dir = Path(run_dir or paths.new_run_dir(root))
    rows = []
    for nb in nbs:
        p = params_for(nb.stem, params, notebook_parameters(nb))  # "*" applies where it fits
        print(f"[asrsched] running {nb.stem} {json.dumps(p) if p else ''}", flush=True)
        r = run_notebook(nb, p, run_dir=run_dir, figures_root=figures_root, timeout_s=timeout_s, root=root)
        print(f"[asrsched] {nb.stem}: {r.status} in {r.seconds:.0f} s {r.error[:300]}", flush=True)
        rows.append(r.__dict__)
    df = pd.DataFrame(rows)
    run_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(run_dir / "summary.csv", index=False)
    from asrsched.app.gallery import write_gallery  # figures/README.md: every figure, its caption and parameters

    write_gallery(figures_root or paths.figures_dir(root), run_dir=run_dir, root=root)
    return df
