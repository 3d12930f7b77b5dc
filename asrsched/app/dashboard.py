"""Dashboard mode: one notebook as a Voila app (outputs and controls only, no code).

``asrsched dashboard 02 -p N_REQUESTS 400`` writes a parameterised copy of the notebook to
``runs/dashboard/<notebook>.ipynb`` (the parameters go into a papermill-style
``injected-parameters`` cell, checked against the notebook's ``parameters`` cell before anything
starts), then serves it with ``voila`` on ``127.0.0.1`` with a random token and prints the URL.
Every visit runs the notebook top to bottom in a fresh kernel, then the sliders and dropdowns
work as in JupyterLab.

* The kernel's working directory is the one a batch run would use (:func:`asrsched.app.paths.kernel_dir`):
  the original ``notebooks/`` folder in a checkout run from its root, so relative paths in the
  parameters (caches, ``../runs/...``) mean what they mean in JupyterLab and in batch runs; the
  copy's folder otherwise (notebooks from an installed package).
* The copy goes to ``runs/dashboard/`` (``--out-dir`` to change); each visit's exports go to its own
  run folder ``runs/<notebook>/<time>-<parameter hash>/`` with ``run.json``
  (:mod:`asrsched.figures.outputs`; ``--figures DIR`` for one fixed folder), so a dashboard never
  overwrites the report gallery in ``figures/``. ``runs/`` is the project's (``$ASRSCHED_ROOT``,
  the checkout at or above the current directory, or the current directory).
* Progress bars are one line of plain text in a dashboard (:mod:`asrsched.figures.progress`, mode
  ``text``): no red stderr box of frozen tqdm lines, and no widget bar that Voila would restore as
  "Error displaying widget".
* Tracebacks are shown in the page (``--hide-tracebacks`` to hide them).
* The page shows each cell's outputs as soon as the cell has run (Voila's progressive rendering), not
  a spinner until the whole notebook is done, and it opens with the parameter values in effect (those
  set for this dashboard in bold).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asrsched.app import paths
from asrsched.app.params import (
    check_parameters,
    load_params,
    notebook_parameters,
    params_for,
    parse_value,
    small_params,
)
from asrsched.app.runner import resolve

__all__ = ["prepare", "voila_command", "parameters_markdown", "show_parameters", "main"]

# Runs in the dashboard's kernel before the notebook's own imports (hidden: Voila strips sources).
# * the working directory is the notebook's own folder, as in JupyterLab and in batch runs;
# * progress bars are single text lines (asrsched.figures.progress): no stderr box, no widget bar
#   that Voila would restore as "Error displaying widget"; warnings are one "⚠" line on stdout.
DASHBOARD_PRELUDE = """import os as _os
_os.chdir({cwd!r})
_os.environ["ASRSCHED_PROGRESS"] = "text"
import asrsched.figures.progress as _progress
_progress.install("text")
import warnings as _warnings
_warnings.showwarning = _progress.show_warning_as_line
"""

# Appended to the injected cell: the parameter values in effect, at the top of the page.
PARAMETERS_SHOWN = """
import asrsched.app.dashboard as _dashboard
_dashboard.show_parameters(globals(), {names!r}, {injected!r})
"""


def parameters_markdown(namespace: Mapping[str, Any], names: list[str], injected: list[str]) -> str:
    """One paragraph: every parameter's value in ``namespace``, the ``injected`` ones in bold."""
    parts = []
    for n in names:
        item = f"`{n} = {namespace.get(n)!r}`"
        parts.append(f"**{item}**" if n in injected else item)
    return (
        "**Parameters in effect** (set for this dashboard in bold; the rest are the notebook's defaults): "
        + ", ".join(parts)
    )


def show_parameters(namespace: Mapping[str, Any], names: list[str], injected: list[str]) -> None:
    """Display :func:`parameters_markdown` (the dashboard's first output)."""
    from IPython.display import Markdown, display

    display(Markdown(parameters_markdown(namespace, names, injected)))


def prepare(
    notebook: str,
    parameters: Mapping[str, Any] | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
) -> Path:
    """Write the parameterised copy of ``notebook`` that the dashboard serves; returns its path.

    ``notebook`` is a path, file name, stem or number (``"02"``). Unknown parameter names raise
    ``ValueError`` naming the allowed ones, before anything is written.
    """
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb_path = resolve(str(notebook), root).resolve()
    params = dict(parameters or {})
    check_parameters(nb_path, params)
    out_dir = Path(out_dir or paths.runs_dir(root) / "dashboard")
    cwd = paths.kernel_dir(nb_path, fallback=out_dir, root=root)
    names = list(notebook_parameters(nb_path))
    nb = parameterize_notebook(load_notebook_node(str(nb_path)), params)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            shown = PARAMETERS_SHOWN.format(injected=sorted(params), names=names)
            cell.source = DASHBOARD_PRELUDE.format(cwd=str(cwd)) + cell.source + "\n" + shown
            break
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / nb_path.name
    nbformat.write(nb, out)
    return out


def voila_command(
    path: str | os.PathLike,
    *,
    ip: str = "127.0.0.1",
    port: int = 8866,
    token: str | None = None,
    open_browser: bool = True,
    show_tracebacks: bool = True,
    extra: list[str] | None = None,
) -> list[str]:
    """The ``voila`` command line serving ``path`` (``token=None``: no token; loopback by default)."""
    cmd = [
        sys.executable,
        "-m",
        "voila",
        str(path),
        f"--Voila.ip={ip}",
        f"--port={port}",
        f"--VoilaConfiguration.show_tracebacks={show_tracebacks}",
        "--VoilaConfiguration.progressive_rendering=True",  # outputs as each cell finishes, not one spinner
        "--Voila.port_retries=0",
    ]
    cmd.append(f"--Voila.token={token or ''}")
    if not open_browser:
        cmd.append("--no-browser")
    return cmd + list(extra or [])


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="asrsched dashboard",
        description="Serve one notebook as a Voila dashboard (outputs and controls, no code).",
        epilog="Arguments after -- go to voila unchanged. Example: asrsched dashboard 03 -p N_REQUESTS 1500",
    )
    ap.add_argument("notebook", help="path, file name, stem or number (e.g. 02)")
    ap.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="a parameter (Python literal), repeatable",
    )
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--params", help="JSON parameter file {notebook: {NAME: value}} (as for asrsched run)")
    src.add_argument(
        "--small", action="store_true", help="the notebook's small parameter set (notebooks/small_params.json)"
    )
    ap.add_argument("--ip", default="127.0.0.1", help="address to listen on (default loopback only)")
    ap.add_argument("--port", type=int, default=8866)
    tok = ap.add_mutually_exclusive_group()
    tok.add_argument("--token", default=None, help="access token (default: a random one, printed with the URL)")
    tok.add_argument("--no-token", action="store_true", help="no token (anyone who can reach the port gets in)")
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser")
    ap.add_argument(
        "--figures",
        default=None,
        help="a fixed folder for exports (default: each visit's run folder runs/<notebook>/<time>-<hash>)",
    )
    ap.add_argument("--out-dir", default=None, help="where the parameterised copy goes (default runs/dashboard)")
    ap.add_argument("--hide-tracebacks", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="write the copy and print the command; start nothing")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``asrsched dashboard NB [-p NAME VALUE] [--params FILE] [--port P] [--token T|--no-token] ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        nb = resolve(args.notebook)
        # "*" applies where the notebook has the parameter; -p wins over the file
        sets = small_params() if args.small else load_params(args.params)
        params = params_for(nb.stem, sets, notebook_parameters(nb))
        params.update({k: parse_value(v) for k, v in (args.param or [])})
        path = prepare(nb, params, out_dir=args.out_dir)
    except (ValueError, FileNotFoundError) as e:
        print(f"asrsched dashboard: error: {e}", file=sys.stderr)
        return 2
    token = None if args.no_token else (args.token or secrets.token_urlsafe(16))
    cmd = voila_command(
        path,
        ip=args.ip,
        port=args.port,
        token=token,
        open_browser=not args.no_browser,
        show_tracebacks=not args.hide_tracebacks,
        extra=extra,
    )
    figures = Path(args.figures).resolve() if args.figures else None
    host = "127.0.0.1" if args.ip in ("0.0.0.0", "") else args.ip
    url = f"http://{host}:{args.port}/" + (f"?token={token}" if token else "")
    print(f"[dashboard] {nb.stem} with {params or 'default parameters'}", flush=True)
    print(
        f"[dashboard] notebook copy: {path}\n[dashboard] figures: "
        f"{figures or paths.runs_dir() / nb.stem / '<time>-<parameter hash>'}",
        flush=True,
    )
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    print(f"[dashboard] open {url}  (Ctrl-C stops)", flush=True)
    env = dict(os.environ, **({paths.FIGURES_ENV: str(figures)} if figures else {}))
    if not figures:
        env.pop(paths.FIGURES_ENV, None)  # a gallery setting of the calling shell must not leak in
    env.setdefault(paths.RUNS_ENV, str(paths.runs_dir().resolve()))  # the kernel may run in the copy's folder
    proc = subprocess.Popen(cmd, env=env)

    def _forward(signum, _frame):
        proc.send_signal(signum)

    old = signal.signal(signal.SIGTERM, _forward)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    raise SystemExit(main())
