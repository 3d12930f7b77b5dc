"""Where a notebook's outputs go: one git-ignored ``runs/`` folder per project, one folder per run.

Every notebook run (JupyterLab's Run All, ``papermill`` from any working directory, a renamed
copy of a notebook, a Voila visit) writes its exports under

    <project>/runs/<notebook>/<YYYYmmdd-HHMMSS>-<parameter hash>/    figures, tables and run.json

and never next to the notebook, never into the report gallery ``figures/``. ``run.json`` records
the notebook, its parameters and the package's provenance record (:func:`asrsched.core.provenance.provenance`).
A kernel that exports again with the same parameters reuses its folder; changed parameters (or a
restarted kernel) start a new one, so files made with different parameters are never mixed.

**The project** (:func:`project_root`) is ``$ASRSCHED_ROOT`` if set, else the first folder at or
above the working directory that is an asrsched checkout (``pyproject.toml`` beside
``asrsched/__init__.py``), else none: then ``./runs`` in the working directory.
``$ASRSCHED_RUNS`` names the runs folder directly (the batch runner sets it for its kernels).

**The report gallery** ``figures/<notebook>/`` is written only when asked: the batch runner with
``--gallery`` (``bash scripts/main.sh``) sets ``$ASRSCHED_FIGURES`` for its kernels, and
:func:`asrsched.figures.style.export_figure` takes an explicit ``root``.

Relative folder parameters of the notebooks (``OUT_DIR = "../runs/profile-01"``,
``CACHE_DIR = "../runs/sweep-cache"``) go through :func:`runs_path`, so they mean the same folder
whatever the kernel's working directory is.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from asrsched.core.provenance import provenance

__all__ = [
    "ROOT_ENV",
    "RUNS_ENV",
    "FIGURES_ENV",
    "RUN_RECORD",
    "project_root",
    "committed_path",
    "runs_root",
    "runs_path",
    "run_parameters",
    "parameters_hash",
    "interactive_run_dir",
    "gallery_root",
]

ROOT_ENV = "ASRSCHED_ROOT"  # a project folder: notebooks from <it>/notebooks, results under <it>/runs
RUNS_ENV = "ASRSCHED_RUNS"  # the runs folder itself (set by the batch runner for its kernels)
FIGURES_ENV = "ASRSCHED_FIGURES"  # a figures root that exports go to instead of the run folder (gallery runs)
RUN_RECORD = "run.json"

_PathLike = str | os.PathLike


def _is_checkout(d: Path) -> bool:
    return (d / "pyproject.toml").is_file() and (d / "asrsched" / "__init__.py").is_file()


def project_root(start: _PathLike | None = None) -> Path | None:
    """``$ASRSCHED_ROOT``, else the nearest asrsched checkout at or above ``start`` (default: the
    working directory), else ``None``."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).resolve()
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if _is_checkout(d):
            return d
    return None


def committed_path(rel: _PathLike) -> Path | None:
    """A committed result (``rel``, relative to the checkout, e.g. ``figures/06_ab_asr_policies/plan``): under
    :func:`project_root` if it is there, else under the checkout this package runs from (a notebook whose
    ``$ASRSCHED_ROOT`` is a scratch folder still finds it), else ``None`` (an installed package ships none)."""
    rel = Path(rel)
    if rel.is_absolute():
        return rel if rel.exists() else None
    root = project_root()
    package_checkout = Path(__file__).resolve().parents[2]
    for base in (root, package_checkout if _is_checkout(package_checkout) else None):
        if base is not None and (base / rel).exists():
            return base / rel
    return None


def runs_root(start: _PathLike | None = None) -> Path:
    """The runs folder: ``$ASRSCHED_RUNS``, else ``<project>/runs``, else ``./runs``."""
    env = os.environ.get(RUNS_ENV)
    if env:
        return Path(env).resolve()
    root = project_root(start)
    return (root if root is not None else Path.cwd().resolve()) / "runs"


def runs_path(path: _PathLike | None) -> Path | None:
    """A notebook's folder parameter as a place under :func:`runs_root`.

    ``None`` or ``""`` stay ``None`` (feature off); an absolute path is kept; a relative one loses
    leading ``../`` and ``runs/`` parts and goes under the runs folder, so the notebooks' defaults
    ``"../runs/sweep-cache"`` (written for a kernel in ``notebooks/``) and ``"sweep-cache"`` both mean
    ``<project>/runs/sweep-cache`` from any working directory.

    >>> runs_path("../runs/sweep-cache") == runs_path("sweep-cache") == runs_root() / "sweep-cache"
    True
    >>> str(runs_path("/data/x")), runs_path(None)
    ('/data/x', None)
    """
    if path is None or str(path) == "":
        return None
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    parts = list(p.parts)
    while parts and parts[0] in ("..", "."):
        parts.pop(0)
    if parts and parts[0] == "runs":
        parts.pop(0)
    return runs_root().joinpath(*parts) if parts else runs_root()


def gallery_root() -> Path | None:
    """``$ASRSCHED_FIGURES`` (set by a gallery batch run), else ``None``: exports go to the run folder."""
    env = os.environ.get(FIGURES_ENV)
    return Path(env) if env else None


# --------------------------------------------------------------------------------- run records
def _literal(v: Any) -> bool:
    """True for what a ``parameters`` cell can hold: JSON-able literals, lists/tuples/dicts of them."""
    if v is None or isinstance(v, bool | int | float | str):
        return True
    if isinstance(v, list | tuple):
        return all(_literal(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _literal(x) for k, x in v.items())
    return False


def notebook_file() -> Path | None:
    """The notebook the current kernel serves, when the frontend says so (JupyterLab sets
    ``JPY_SESSION_NAME`` / ``__session__``); ``None`` under papermill or outside a kernel."""
    main = sys.modules.get("__main__")
    for cand in (os.environ.get("JPY_SESSION_NAME"), getattr(main, "__session__", None)):
        if cand and str(cand).endswith(".ipynb") and Path(cand).is_file():
            return Path(cand).resolve()
    return None


def _parameter_names(nb: Path) -> list[str] | None:
    """The names assigned in the notebook's ``parameters`` cell (and a papermill-injected one)."""
    import ast

    try:
        cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return None
    names: list[str] = []
    for c in cells:
        tags = c.get("metadata", {}).get("tags", [])
        if c.get("cell_type") == "code" and ("parameters" in tags or "injected-parameters" in tags):
            src = c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            names += [
                t.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name) and t.id not in names
            ]
    return names or None


def run_parameters(namespace: dict | None = None) -> dict[str, Any]:
    """The current run's parameters, read from the kernel's namespace (``__main__``).

    With a known notebook file (JupyterLab), the names of its ``parameters`` cell; otherwise every
    UPPER_CASE global holding a plain literal (the notebooks' convention for parameters) except
    ``NB``, the notebook's own name.
    """
    ns = namespace if namespace is not None else vars(sys.modules.get("__main__", sys))
    nb = notebook_file()
    names = _parameter_names(nb) if nb else None
    if names is None:
        names = sorted(k for k in ns if k.isupper() and not k.startswith("_") and k != "NB")
    return {k: (list(ns[k]) if isinstance(ns[k], tuple) else ns[k]) for k in names if k in ns and _literal(ns[k])}


def parameters_hash(params: dict[str, Any]) -> str:
    """Eight hex digits identifying a parameter set (order-independent)."""
    blob = json.dumps(params, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


_RUN_DIRS: dict[tuple[str, str, str], Path] = {}  # (runs root, notebook, hash) -> folder, per process


def _reusable(root: Path, notebook: str, h: str, commit: str | None, clean: bool) -> Path | None:
    """The newest ``<root>/<notebook>/*-<h>`` folder made by the same clean commit, if any."""
    if not commit or not clean:
        return None
    for d in sorted((root / notebook).glob(f"*-{h}"), reverse=True):
        try:
            rec = json.loads((d / RUN_RECORD).read_text())
        except (OSError, ValueError):
            continue
        if rec.get("commit") == commit and rec.get("clean_tree") and rec.get("parameters_hash") == h:
            return d
    return None


def interactive_run_dir(notebook: str, params: dict[str, Any] | None = None, *, create: bool = True) -> Path:
    """``<runs>/<notebook>/<YYYYmmdd-HHMMSS>-<hash>/`` for the current parameters and code.

    The first call for a parameter set in this process picks the folder and writes its ``run.json``;
    later calls with the same parameters return the same folder. A new kernel (a restart, every Voila
    visit) with the same parameters reuses the newest folder that a clean checkout at the same commit
    made for them (its exports are overwritten by the same names); changed parameters, another
    commit or uncommitted changes get a new folder, so files from different inputs never mix.
    ``params`` defaults to :func:`run_parameters`.
    """
    params = run_parameters() if params is None else dict(params)
    h = parameters_hash(params)
    root = runs_root()
    key = (str(root), notebook, h)
    d = _RUN_DIRS.get(key)
    if d is None or (create and not d.exists()):
        nb = notebook_file()
        prov = provenance(f"interactive kernel: {nb or notebook}", params)
        d = _reusable(root, notebook, h, prov["commit"], prov["clean_tree"])
        if d is None:
            d = root / notebook / f"{time.strftime('%Y%m%d-%H%M%S')}-{h}"
        _RUN_DIRS[key] = d
        if create:
            d.mkdir(parents=True, exist_ok=True)
            rec = {
                "notebook": notebook,
                "kind": "interactive",
                **prov,
                "notebook_file": str(nb) if nb else None,
                "parameters_hash": h,
                "working_directory": str(Path.cwd()),
            }
            (d / RUN_RECORD).write_text(json.dumps(rec, indent=1, default=repr) + "\n")
    return d
