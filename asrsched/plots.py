"""House style for every figure, and the one export helper.

* ``POLICY_COLORS``: one fixed, colour-blind-safe colour per policy (Okabe-Ito),
  the same in every notebook; ``ESTIMATOR_COLORS`` likewise for the A/B study.
* ``TEMPLATE`` (registered as plotly template ``"asrsched"`` and made the default
  on import): readable fonts at print size, white background, light grid.
* :func:`export_figure` writes one figure as HTML (plotly.js inlined, opens
  offline), PNG and SVG into ``figures/<notebook>/``; :func:`export_table` writes
  a CSV beside it. Static images go through kaleido 1.x and Debian's chromium;
  wrap a batch of exports in :func:`export_session` so one kaleido server (one
  Chromium) serves them all.

Print size: PNG and SVG are rendered at ``PRINT_WIDTH x PRINT_HEIGHT`` CSS pixels
(900 x 560, i.e. 7.5 x 4.7 in at 120 px/in) with ``PNG_SCALE = 3``: 2700 x 1680 px,
360 dpi at that size.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

import plotly.graph_objects as go
import plotly.io as pio

__all__ = [
    "POLICY_COLORS",
    "ESTIMATOR_COLORS",
    "policy_color",
    "TEMPLATE",
    "export_figure",
    "export_table",
    "export_session",
    "figures_dir",
]

# Okabe-Ito palette (colour-blind safe), one fixed colour per policy.
OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
POLICY_COLORS = {
    "fcfs": "#000000",
    "sjf": "#D55E00",
    "hrrn": "#0072B2",
    "adaptive": "#009E73",
    "ljf": "#CC79A7",
    "random": "#999999",
}
ESTIMATOR_COLORS = {
    "naive": "#000000",
    "group": "#999999",
    "switchback": "#E69F00",
    "qdq": "#56B4E9",
    "wdq": "#0072B2",
    "mixed_dq": "#D55E00",
    "truth": "#009E73",
}


def policy_color(name: str) -> str:
    """The house colour of a policy (or estimator); a stable fallback for others."""
    key = str(name).lower()
    if key in POLICY_COLORS:
        return POLICY_COLORS[key]
    if key in ESTIMATOR_COLORS:
        return ESTIMATOR_COLORS[key]
    return OKABE_ITO[sum(map(ord, key)) % len(OKABE_ITO)]


PRINT_WIDTH, PRINT_HEIGHT, PNG_SCALE = 900, 560, 3

TEMPLATE = go.layout.Template(
    layout=dict(
        font=dict(family="DejaVu Sans, Arial, sans-serif", size=15, color="#222"),
        title=dict(font=dict(size=18), x=0.02, xanchor="left"),
        paper_bgcolor="white",
        plot_bgcolor="white",
        colorway=OKABE_ITO,
        xaxis=dict(showgrid=True, gridcolor="#e5e5e5", zeroline=False, linecolor="#444", ticks="outside",
                   title=dict(font=dict(size=15))),
        yaxis=dict(showgrid=True, gridcolor="#e5e5e5", zeroline=False, linecolor="#444", ticks="outside",
                   title=dict(font=dict(size=15))),
        legend=dict(bgcolor="rgba(255,255,255,0.8)", font=dict(size=13)),
        margin=dict(l=70, r=30, t=70, b=60),
    )
)
pio.templates["asrsched"] = TEMPLATE
pio.templates.default = "plotly_white+asrsched"


def figures_dir(notebook: str, root: str | os.PathLike | None = None) -> Path:
    """``<root>/<notebook>/`` (root defaults to ``$ASRSCHED_FIGURES`` or ``./figures``)."""
    root = Path(root or os.environ.get("ASRSCHED_FIGURES", "figures"))
    d = root / notebook
    d.mkdir(parents=True, exist_ok=True)
    return d


_SERVER_DEPTH = 0


def _chromium() -> str | None:
    for p in (os.environ.get("BROWSER_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if p and Path(p).exists():
            return p
    return None


@contextlib.contextmanager
def export_session() -> Iterator[None]:
    """Keep one kaleido server (one Chromium) alive for a batch of static exports."""
    global _SERVER_DEPTH
    import kaleido

    if _SERVER_DEPTH == 0 and _chromium():
        os.environ.setdefault("BROWSER_PATH", _chromium())
        kaleido.start_sync_server(silence_warnings=True)
    _SERVER_DEPTH += 1
    try:
        yield
    finally:
        _SERVER_DEPTH -= 1
        if _SERVER_DEPTH == 0:
            with contextlib.suppress(Exception):
                kaleido.stop_sync_server(silence_warnings=True)


def export_figure(
    fig: go.Figure,
    name: str,
    notebook: str,
    *,
    root: str | os.PathLike | None = None,
    formats: tuple[str, ...] = ("html", "png", "svg"),
    width: int = PRINT_WIDTH,
    height: int = PRINT_HEIGHT,
) -> dict[str, Path]:
    """Write ``fig`` as ``figures/<notebook>/<name>.{html,png,svg}``; returns the paths.

    HTML inlines plotly.js (opens offline). PNG/SVG need Debian's chromium; if
    it is missing, a ``RuntimeError`` says what to install (HTML is still written).
    """
    out = figures_dir(notebook, root)
    paths: dict[str, Path] = {}
    fig = go.Figure(fig)  # a FigureWidget exports as a plain figure
    if "html" in formats:
        p = out / f"{name}.html"
        fig.write_html(p, include_plotlyjs=True, full_html=True)
        paths["html"] = p
    static = [f for f in formats if f in ("png", "svg", "pdf")]
    if static:
        if not _chromium():
            raise RuntimeError(
                "static figure export needs Debian's chromium (apt-get install chromium); "
                f"HTML was written to {paths.get('html')}"
            )
        os.environ.setdefault("BROWSER_PATH", _chromium())
        with export_session():
            for f in static:
                p = out / f"{name}.{f}"
                fig.write_image(p, format=f, width=width, height=height, scale=PNG_SCALE if f == "png" else 1)
                paths[f] = p
    return paths


def export_table(df, name: str, notebook: str, *, root: str | os.PathLike | None = None) -> Path:
    """Write a table as ``figures/<notebook>/<name>.csv``; returns the path."""
    p = figures_dir(notebook, root) / f"{name}.csv"
    df.to_csv(p, index=getattr(df.index, "name", None) is not None)
    return p
