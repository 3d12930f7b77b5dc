"""Where the app layer finds the notebooks and where it writes what they make.

Nothing here assumes a source checkout, so ``pip install .`` followed by ``asrsched run 03`` works
from any folder:

* **notebooks** come from the package (``asrsched.notebooks``: the checkout's ``notebooks/`` folder
  in an editable install, ``site-packages/asrsched/notebooks`` in a wheel), or from
  ``$ASRSCHED_ROOT/notebooks`` when that variable is set;
* **results** go under the *base* folder: ``$ASRSCHED_ROOT``, else the asrsched checkout at or
  above the current directory, else the current directory
  (:func:`asrsched.figures.outputs.project_root`). A batch run's executed copies and its exports
  go to ``runs/<timestamp>/`` (exports in ``runs/<timestamp>/figures/<notebook>/``); only a
  gallery run (``asrsched run --gallery``, ``bash scripts/main.sh``) writes the report gallery
  ``figures/<notebook>/``. Interactive runs write to ``runs/<notebook>/<time>-<hash>/``
  (:mod:`asrsched.figures.outputs`). The command line's ``--run-dir`` and ``--figures`` choose
  other folders.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from asrsched.figures.outputs import FIGURES_ENV, ROOT_ENV, RUNS_ENV, project_root

__all__ = [
    "write_study",
    "ROOT_ENV",
    "FIGURES_ENV",
    "RUNS_ENV",
    "base_dir",
    "notebooks_dir",
    "runs_dir",
    "new_run_dir",
    "figures_dir",
    "kernel_dir",
]

_PathLike = str | os.PathLike


def base_dir(root: _PathLike | None = None) -> Path:
    """The folder results go under: ``root``, else ``$ASRSCHED_ROOT``, else the asrsched checkout at
    or above the current directory, else the current directory."""
    if root:
        return Path(root)
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env)
    found = project_root()
    return found if found is not None else Path.cwd()


def _package_notebooks() -> Path | None:
    """The folder holding the notebooks shipped as package data (``asrsched.notebooks``), if any."""
    from importlib import resources

    try:
        res = resources.files("asrsched.notebooks")
    except ModuleNotFoundError:
        return None
    if isinstance(res, Path):
        return res
    # a package without __init__.py (a namespace portion) answers with a MultiplexedPath: its entries are Paths
    for child in res.iterdir():
        if isinstance(child, Path):
            return child.parent
    return None


def notebooks_dir(root: _PathLike | None = None) -> Path:
    """The folder of the numbered notebooks.

    ``root`` or ``$ASRSCHED_ROOT``: ``<root>/notebooks``. Otherwise the package data
    ``asrsched.notebooks``; in an editable install of a checkout whose ``notebooks/`` has no
    ``__init__.py`` (setuptools' editable finder maps only packages it can import), the
    ``notebooks/`` folder beside the package.
    """
    if root or os.environ.get(ROOT_ENV):
        return base_dir(root) / "notebooks"
    found = _package_notebooks()
    if found is not None:
        return found
    import asrsched

    checkout = Path(asrsched.__file__).resolve().parent.parent / "notebooks"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        "the notebooks are not installed (no package asrsched.notebooks); "
        f"reinstall asrsched or set ${ROOT_ENV} to a folder holding notebooks/"
    )


def runs_dir(root: _PathLike | None = None) -> Path:
    """``<base>/runs``: the run folders of :func:`new_run_dir` (and the notebooks' caches)."""
    return base_dir(root) / "runs"


def new_run_dir(root: _PathLike | None = None) -> Path:
    """A fresh run folder name, ``<base>/runs/<YYYYmmdd-HHMMSS>`` (not created)."""
    return runs_dir(root) / time.strftime("%Y%m%d-%H%M%S")


def figures_dir(root: _PathLike | None = None) -> Path:
    """``<base>/figures``: the report gallery (one folder per notebook and ``README.md``), written only
    by gallery runs."""
    return base_dir(root) / "figures"


def kernel_dir(notebook: _PathLike, *, fallback: _PathLike, root: _PathLike | None = None) -> Path:
    """The working directory of the kernel that runs ``notebook``.

    The notebooks' relative paths (``OUT_DIR = "../runs/profile-01"``) are written for a kernel in
    ``notebooks/`` beside ``runs/``, as JupyterLab starts it. When the notebook is the base folder's
    own ``<base>/notebooks/`` (a checkout run from its root, or ``$ASRSCHED_ROOT``) that is its
    folder, as always. Otherwise (notebooks from an installed package, which is no place to write)
    it is ``fallback`` (the run folder), so whatever a notebook writes relative to its working
    directory stays under the folder the user chose.
    """
    nb_folder = Path(notebook).resolve().parent
    if nb_folder == (base_dir(root) / "notebooks").resolve():
        return nb_folder
    return Path(fallback).resolve()


def write_study(out, command: str, argv, config: dict, seconds: float, tables: dict) -> Path:
    """Write a simulated study to folder ``out``: each of ``tables`` (``{"runs.csv": frame, ...}``) and
    ``run.json`` (``config``, ``seconds`` and the provenance of ``asrsched <command> <argv>``); the folder."""
    import json
    import shlex

    from asrsched.core.provenance import provenance

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(out / name, index=False)
    cmd = " ".join(shlex.quote(x) for x in ["asrsched", command, *argv])
    run = dict(config=config, seconds=seconds, provenance=provenance(cmd, config, paths=("asrsched",)))
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str))
    return out
