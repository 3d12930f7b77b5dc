"""Batch execution of the notebook series with papermill.

* :func:`notebooks` lists ``notebooks/NN_*.ipynb`` in reading order;
* :func:`run_notebook` executes one with parameters (papermill, with an
  execution timeout per cell), writing the executed copy into a git-ignored run
  folder (``runs/<timestamp>/``) and its figures into ``figures/<notebook>/``;
* :func:`run_series` runs several (default: all) in order, keeps going after a
  failure, and writes ``runs/<timestamp>/summary.csv`` (notebook, status, seconds,
  error). Figures go through :func:`asrsched.figures.style.export_figure`, one kaleido
  server per notebook's export batch.

Parameter files are JSON: ``{"02_policy_sweep": {"N_REQUESTS": 500}, "*": {"SEED": 1}}``.
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

__all__ = ["notebooks", "run_notebook", "run_series", "project_root", "NotebookRun", "load_params"]

DEFAULT_TIMEOUT_S = 900


def project_root() -> Path:
    """The repository root: ``$ASRSCHED_ROOT`` or the folder above the package."""
    env = os.environ.get("ASRSCHED_ROOT")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def notebooks(root: str | os.PathLike | None = None) -> list[Path]:
    """Numbered notebooks under ``<root>/notebooks``, in reading order."""
    d = Path(root or project_root()) / "notebooks"
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


def load_params(path: str | os.PathLike | None) -> dict[str, dict]:
    """Read a JSON parameter file (``{notebook_stem_or_*: {NAME: value}}``)."""
    if not path:
        return {}
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"parameter file not found: {path}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"parameter file {path} is not valid JSON: {e}") from None
    if not isinstance(d, dict) or not all(isinstance(v, dict) for v in d.values()):
        raise ValueError(f"parameter file {path} must map notebook names to {{NAME: value}} objects")
    return d


def notebook_parameters(nb: Path) -> dict[str, Any]:
    """Names and default values of a notebook's ``parameters`` cell."""
    import papermill as pm

    return {k: v["default"] for k, v in pm.inspect_notebook(str(nb)).items()}


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

    Unknown parameter names raise ``ValueError`` before anything runs.
    """
    import papermill as pm

    root = Path(root or project_root())
    nb = resolve(str(name), root)
    params = dict(parameters or {})
    known = notebook_parameters(nb)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{nb.stem}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(known)}")
    run_dir = Path(run_dir or root / "runs" / time.strftime("%Y%m%d-%H%M%S"))
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / nb.name
    env_before = os.environ.get("ASRSCHED_FIGURES")
    os.environ["ASRSCHED_FIGURES"] = str(Path(figures_root or root / "figures").resolve())
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(
            str(nb), str(out), parameters=params, kernel_name="python3", cwd=str(nb.parent),
            execution_timeout=timeout_s, progress_bar=progress, request_save_on_cell_execute=True,
        )
        return NotebookRun(nb.stem, "ok", time.perf_counter() - t0, str(out))
    except Exception as e:  # a failed notebook must not stop the series
        msg = f"{type(e).__name__}: {e}".strip()
        return NotebookRun(nb.stem, "failed", time.perf_counter() - t0, str(out),
                           msg[-2000:] or traceback.format_exc()[-2000:])
    finally:
        if env_before is None:
            os.environ.pop("ASRSCHED_FIGURES", None)
        else:
            os.environ["ASRSCHED_FIGURES"] = env_before


def run_series(
    names: Sequence[str] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    figures_root: str | os.PathLike | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    root: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Run notebooks in order (all by default); returns and saves the summary table."""
    root = Path(root or project_root())
    nbs = [resolve(n, root) for n in names] if names else notebooks(root)
    params = dict(params or {})
    for key in params:
        if key != "*":
            resolve(key, root)  # unknown notebook names fail before anything runs
    run_dir = Path(run_dir or root / "runs" / time.strftime("%Y%m%d-%H%M%S"))
    rows = []
    for nb in nbs:
        known = notebook_parameters(nb)
        p = {k: v for k, v in params.get("*", {}).items() if k in known}  # "*" applies where it fits
        p.update(params.get(nb.stem.split("_")[0], {}))
        p.update(params.get(nb.stem, {}))
        print(f"[asrsched] running {nb.stem} {json.dumps(p) if p else ''}", flush=True)
        r = run_notebook(nb, p, run_dir=run_dir, figures_root=figures_root, timeout_s=timeout_s, root=root)
        print(f"[asrsched] {nb.stem}: {r.status} in {r.seconds:.0f} s {r.error[:300]}", flush=True)
        rows.append(r.__dict__)
    df = pd.DataFrame(rows)
    run_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(run_dir / "summary.csv", index=False)
    from asrsched.app.gallery import write_gallery  # figures/README.md: every figure, its caption and parameters

    write_gallery(figures_root or root / "figures", run_dir=run_dir, root=root)
    return df
