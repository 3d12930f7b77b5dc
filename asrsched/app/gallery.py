"""The figure gallery: ``figures/README.md``, generated from the exported files themselves.

Every figure that :func:`asrsched.figures.style.export_figure` wrote under ``figures/<notebook>/`` is
listed with a one-line caption, its formats, its print size and the notebook and parameters that
made it:

* the caption is the figure's own title (titles state the finding), read back from the exported
  HTML, followed by what is plotted against what (the axis titles, with units);
* the print size is read from the PNG header and the SVG root element, not assumed;
* the parameters come from ``figures/<notebook>/run.json``, which :func:`record_runs` writes from
  the papermill metadata of the executed notebooks of a batch run (defaults overlaid with the
  injected values). :func:`asrsched.app.runner.run_series` calls :func:`write_gallery` at its end.
  Files older than the last recorded run of their notebook are listed apart: committed results (tracked
  by git, with their provenance file) as such, anything else as stale.

It opens with the claims index (:func:`asrsched.app.claims.claims_index_markdown`): each claim of the two
studies beside our number and a verdict. The index is generated, and not tracked: a run of
``bash scripts/main.sh`` leaves the checkout clean.

Command line: ``python -m asrsched.app.gallery [--figures DIR] [--run-dir RUN_DIR]``.
"""

from __future__ import annotations

import argparse
import html as _html
import json
import os
import re
import struct
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asrsched.app import paths
from asrsched.app.claims import claims_index_markdown
from asrsched.app.params import parse_value
from asrsched.core.provenance import provenance
from asrsched.figures.outputs import RUN_RECORD
from asrsched.figures.reexport import html_figure_parts
from asrsched.figures.style import PNG_SCALE, PRINT_HEIGHT, PRINT_WIDTH

__all__ = ["figure_layout", "FigureInfo", "scan_figures", "record_runs", "write_gallery", "render_gallery", "main"]

FORMAT_ORDER = ("html", "png", "svg", "pdf")


def figure_layout(html_path: str | os.PathLike) -> dict:
    """The plotly ``layout`` dict of a figure exported as HTML by plotly's ``write_html``.

    Raises ``ValueError`` if the file holds no ``Plotly.newPlot(...)`` call.
    """
    return html_figure_parts(html_path)[1]


def _plain(text: Any) -> str:
    """Markup-free one-line text from a plotly title (``<br>`` and tags removed)."""
    if not text:
        return ""
    s = re.sub(r"<br\s*/?>", " ", str(text))
    s = re.sub(r"<[^>]+>", "", s)
    return re.sub(r"\s+", " ", _html.unescape(s)).strip()


def _title(obj: Any) -> str:
    if isinstance(obj, dict):
        t = obj.get("title")
        return _plain(t.get("text") if isinstance(t, dict) else t)
    return ""


def _axis_title(layout: dict, kind: str) -> str:
    """The first non-empty title among ``xaxis``, ``xaxis2``, ... (subplots title one axis only)."""
    keys = sorted((k for k in layout if re.fullmatch(rf"{kind}\d*", k)), key=lambda k: int(k[5:] or 1))
    for k in keys:
        t = _title(layout[k])
        if t:
            return t
    return ""


def png_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR header."""
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    return struct.unpack(">II", head[16:24])


def svg_size(path: str | os.PathLike) -> tuple[float, float] | None:
    """(width, height) of an SVG's root element, in CSS px, if stated."""
    head = Path(path).read_text(encoding="utf-8", errors="replace")[:4000]
    m = re.search(r"<svg\b[^>]*>", head)
    if not m:
        return None
    w = re.search(r'\bwidth="([\d.]+)', m.group(0))
    h = re.search(r'\bheight="([\d.]+)', m.group(0))
    return (float(w.group(1)), float(h.group(1))) if w and h else None


@dataclass
class FigureInfo:
    """One exported figure (all formats of one name) in ``figures/<notebook>/``."""

    notebook: str
    name: str
    files: dict[str, Path]
    title: str = ""
    xaxis: str = ""
    yaxis: str = ""
    png_px: tuple[int, int] | None = None
    svg_px: tuple[float, float] | None = None
    html_offline: bool | None = None
    mtime: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def caption(self) -> str:
        """The title (the finding) and, from the axis titles, what is plotted against what."""
        axes = (
            f"{self.yaxis} vs {self.xaxis}"
            if self.xaxis and self.yaxis
            else f"y: {self.yaxis}"
            if self.yaxis
            else f"x: {self.xaxis}"
            if self.xaxis
            else ""
        )
        if self.title and axes:
            return f"{self.title} ({axes})"
        return self.title or axes or "(no title)"


def _inspect(info: FigureInfo) -> FigureInfo:
    html = info.files.get("html")
    if html:
        try:
            layout = figure_layout(html)
            info.title = _title(layout)
            info.xaxis = _axis_title(layout, "xaxis")
            info.yaxis = _axis_title(layout, "yaxis")
        except (ValueError, json.JSONDecodeError, IndexError) as e:
            info.problems.append(f"HTML not readable as a plotly figure: {e}")
        with open(html, "rb") as f:
            head = f.read(400_000)
        inlined = b"<script src=" not in head and re.search(rb"plotly\.js v\d", head) is not None
        shared = b'src="plotly.min.js"' in head and (html.parent / "plotly.min.js").is_file()
        info.html_offline = inlined or shared
        if not info.html_offline:
            info.problems.append("HTML finds no plotly.js offline (neither inlined nor plotly.min.js beside it)")
    else:
        info.problems.append("no HTML export")
    if "png" in info.files:
        try:
            info.png_px = png_size(info.files["png"])
        except ValueError as e:
            info.problems.append(str(e))
    if "svg" in info.files:
        info.svg_px = svg_size(info.files["svg"])
    info.mtime = min(p.stat().st_mtime for p in info.files.values())
    return info


def scan_figures(figures_root: str | os.PathLike) -> dict[str, list[FigureInfo]]:
    """Figures per notebook folder under ``figures_root`` (folders and names sorted)."""
    root = Path(figures_root)
    out: dict[str, list[FigureInfo]] = {}
    for d in sorted(p for p in root.glob("*/") if p.is_dir() and not p.name.startswith(".")):
        groups: dict[str, dict[str, Path]] = {}
        for f in d.iterdir():
            ext = f.suffix.lstrip(".").lower()
            if f.is_file() and ext in FORMAT_ORDER:
                groups.setdefault(f.stem, {})[ext] = f
        out[d.name] = [
            _inspect(FigureInfo(d.name, n, dict(sorted(groups[n].items(), key=lambda kv: FORMAT_ORDER.index(kv[0])))))
            for n in sorted(groups)
        ]
    return out


def _parse_time(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


def record_runs(run_dir: str | os.PathLike, figures_root: str | os.PathLike) -> list[Path]:
    """Write ``<figures_root>/<notebook>/run.json`` for every executed notebook in ``run_dir``.

    The record is the package's provenance record (:func:`asrsched.core.provenance.provenance`: commit,
    machine, load, command) with the effective parameters (the notebook's defaults overlaid with what
    papermill injected), plus which of them were injected, the run's start/end time and status, and
    the path of the executed copy. Notebooks without papermill metadata are skipped.
    """
    import nbformat
    import papermill as pm

    written = []
    for nb_path in sorted(Path(run_dir).glob("*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        meta = nb.metadata.get("papermill")
        if not meta:
            continue
        injected = dict(meta.get("parameters") or {})
        note = ""
        try:
            defaults = {k: v["default"] for k, v in pm.inspect_notebook(str(nb_path)).items()}
        except Exception as e:  # an unreadable parameters cell must not hide the run
            defaults, note = {}, f"defaults not readable ({type(e).__name__}: {e}); only injected values listed"
        params = {**{k: parse_value(v) for k, v in defaults.items()}, **injected}
        rec = {
            "notebook": nb_path.stem,
            **provenance(params=params),
            "injected": sorted(injected),
            "start_time": meta.get("start_time"),
            "end_time": meta.get("end_time"),
            "status": "failed" if meta.get("exception") else ("ok" if meta.get("end_time") else "incomplete"),
            "executed_copy": str(nb_path.resolve()),
        }
        if note:
            rec["note"] = note
        d = Path(figures_root) / nb_path.stem
        d.mkdir(parents=True, exist_ok=True)
        (d / RUN_RECORD).write_text(json.dumps(rec, indent=1, default=str) + "\n")
        written.append(d / RUN_RECORD)
    return written


def _fmt_value(v: Any) -> str:
    """A parameter value as the Python literal a notebook (or ``-p NAME VALUE``) takes, shortened."""
    s = repr(v)
    return s if len(s) <= 90 else s[:87] + "…"


def _size_text(info: FigureInfo) -> str:
    bits = []
    if info.png_px:
        w, h = info.png_px
        bits.append(f"PNG {w}×{h} px")
    if info.svg_px:
        bits.append(f"SVG {info.svg_px[0]:g}×{info.svg_px[1]:g}")
    return ", ".join(bits)


def tracked_files(folder: str | os.PathLike) -> set[Path]:
    """The files under ``folder`` that git tracks (committed results), resolved; empty outside a checkout."""
    folder = Path(folder)
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "ls-files", "-z", "--full-name", "."],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        top = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return set()
    return {(Path(top) / f).resolve() for f in out.split("\0") if f}


def render_gallery(figures_root: str | os.PathLike, *, notebooks_dir: str | os.PathLike | None = None) -> str:
    """The gallery README as markdown (see :func:`write_gallery`)."""
    root = Path(figures_root)
    figs = scan_figures(root)
    house_png = (PRINT_WIDTH * PNG_SCALE, PRINT_HEIGHT * PNG_SCALE)
    n_fig = sum(len(v) for v in figs.values())
    lines = [
        "# Figure gallery",
        "",
        "Generated by `asrsched.app.gallery` from the exported files and results tables (not tracked by git;",
        "rewritten at the end of every gallery run, so a run leaves the checkout clean).",
        "",
        *claims_index_markdown(root),
        "## How this gallery is made",
        "",
        "Regenerate everything with `bash scripts/main.sh` (all notebooks,",
        "default parameters; it runs `asrsched run --gallery`), one notebook with",
        "`bash scripts/main.sh 02 -p NAME VALUE`, or only this index with `python -m asrsched.app.gallery`.",
        "Other runs (`asrsched run` without `--gallery`, JupyterLab, Voila) write under `runs/`, never here.",
        "",
        "**Formats.** Every figure is written three times by `asrsched.figures.style.export_figure`: **HTML**",
        "(interactive; opens offline with the folder's one `plotly.min.js`, or inlined with",
        "`ASRSCHED_HTML_PLOTLYJS=inline`), **PNG** and **SVG** (print); PDF on",
        "request (`--formats`, or `asrsched export FIG.html --formats pdf`). Text is laid out by",
        "`asrsched.figures.layout` and checked with `asrsched check-figures figures/`.",
        f"**Print size:** {PRINT_WIDTH}×{PRINT_HEIGHT} CSS px (7.5×4.7 in at 120 px/in); PNG at scale {PNG_SCALE} =",
        f"{house_png[0]}×{house_png[1]} px, i.e. 360 dpi at 7.5 in wide (for a 3.5 in column: ≈ 770 dpi); SVG is",
        "vector at the same size. Fonts: DejaVu Sans 15 px (≈ 9 pt at 7.5 in), titles 18 px. Colours:",
        "Okabe-Ito (colour-blind safe), one fixed colour per policy (`asrsched.figures.style.POLICY_COLORS`) in every",
        "notebook. Tables (CSV) sit beside the figures.",
        "",
        f"{n_fig} figures in {len(figs)} notebook folders.",
        "",
    ]
    nb_dir = Path(notebooks_dir) if notebooks_dir else None
    committed = tracked_files(root)
    for nb, infos in figs.items():
        folder = root / nb
        rec_path = folder / RUN_RECORD
        rec = json.loads(rec_path.read_text()) if rec_path.exists() else None
        src = f"../notebooks/{nb}.ipynb"
        exists = nb_dir is None or (nb_dir / f"{nb}.ipynb").exists()
        lines += [
            f"## {nb}",
            "",
            f"Notebook: [`notebooks/{nb}.ipynb`]({src})" + ("" if exists else " (not in this checkout)") + ".",
        ]
        started = _parse_time(rec.get("start_time")) if rec else None
        if rec:
            inj = set(rec.get("injected", []))
            when = (rec.get("end_time") or rec.get("start_time") or "")[:19].replace("T", " ")
            lines += [
                f"Last batch run: {when} UTC, status **{rec.get('status')}**"
                + (" — figures below may be from an earlier run" if rec.get("status") != "ok" else "")
                + ".",
                (
                    "Parameters (set by the run in **bold**, the rest are the notebook's defaults"
                    if inj
                    else "Parameters (all the notebook's defaults"
                )
                + (f"; {rec['note']}" if rec.get("note") else "")
                + "):",
                "",
            ]
            for k, v in rec.get("parameters", {}).items():
                lines.append(f"- {'**' if k in inj else ''}`{k}`{'**' if k in inj else ''} = `{_fmt_value(v)}`")
            lines.append("")
        else:
            lines += [
                "No batch-run record: these files were exported interactively or by a single-notebook",
                "run; the parameters that made them are not known. Re-run the series to record them.",
                "",
            ]
        fresh = [i for i in infos if started is None or i.mtime >= started - 1]
        stale = [i for i in infos if i not in fresh]
        if fresh:
            lines += ["| figure | caption | files | size |", "|---|---|---|---|"]
            for i in fresh:
                files = " · ".join(f"[{ext}]({nb}/{p.name})" for ext, p in i.files.items())
                size = _size_text(i)
                if i.png_px and i.png_px != house_png:
                    size += " (not the house size)"
                cap = i.caption.replace("|", "\\|")
                if i.problems:
                    cap += " — **" + "; ".join(i.problems) + "**"
                lines.append(f"| `{i.name}` | {cap} | {files} | {size} |")
            lines.append("")
        tables = sorted(p for p in folder.glob("*.csv"))
        fresh_tables = [t for t in tables if started is None or t.stat().st_mtime >= started - 1]
        if fresh_tables:
            lines.append(
                "Tables: " + ", ".join(f"[`{t.name}`]({nb}/{t.name}) ({_csv_shape(t)})" for t in fresh_tables) + "."
            )
            lines.append("")
        old_tables = [t for t in tables if t not in fresh_tables]
        kept = sorted(p for p in folder.rglob("*") if p.is_file() and p.resolve() in committed)
        if kept:
            lines += [
                "Committed results (regenerated by the command in their provenance file, not by this run): "
                + ", ".join(f"[`{p.relative_to(folder)}`]({nb}/{p.relative_to(folder).as_posix()})" for p in kept)
                + ".",
                "",
            ]
        old = [i.name for i in stale] + [t.name for t in old_tables if t not in kept]
        if old:
            lines += [
                "Stale (older than the last run, not made by it; delete or ignore): "
                + ", ".join(f"`{n}`" for n in old)
                + ".",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def _csv_shape(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline()
        n = sum(1 for _ in f)
    return f"{n} rows × {len(header.split(','))} columns"


def write_gallery(
    figures_root: str | os.PathLike | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
) -> Path:
    """Record the runs in ``run_dir`` (if given) and write ``<figures_root>/README.md``.

    ``figures_root`` defaults to ``$ASRSCHED_FIGURES`` or ``<base>/figures``; the notebooks the
    gallery links to are looked up in :func:`asrsched.app.paths.notebooks_dir` (``root``: a project
    folder with ``notebooks/``, see :mod:`asrsched.app.paths`). Returns the README path.
    """
    figures_root = Path(figures_root or os.environ.get(paths.FIGURES_ENV) or paths.figures_dir(root))
    figures_root.mkdir(parents=True, exist_ok=True)
    if run_dir is not None and Path(run_dir).is_dir():
        record_runs(run_dir, figures_root)
    try:
        nb_dir = paths.notebooks_dir(root)
    except FileNotFoundError:
        nb_dir = None
    text = render_gallery(figures_root, notebooks_dir=nb_dir)
    out = figures_root / "README.md"
    out.write_text(text, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m asrsched.app.gallery [--figures DIR] [--run-dir DIR]``: rewrite the gallery README."""
    ap = argparse.ArgumentParser(prog="python -m asrsched.app.gallery", description=__doc__.split("\n\n")[0])
    ap.add_argument("--figures", default=None, help="figures root (default $ASRSCHED_FIGURES or ./figures)")
    ap.add_argument("--run-dir", default=None, help="a batch run folder (runs/<timestamp>) to record first")
    args = ap.parse_args(argv)
    if args.run_dir and not Path(args.run_dir).is_dir():
        ap.error(f"--run-dir: no such folder {args.run_dir}")
    out = write_gallery(args.figures, run_dir=args.run_dir)
    print(f"wrote {out} ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
