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
import copy
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

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
    "fit_title",
    "PRINT_WIDTH",
    "PRINT_HEIGHT",
    "PNG_SCALE",
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
        xaxis=dict(showgrid=True, gridcolor="#e5e5e5", zeroline=False, showline=True, linecolor="#444",
                   linewidth=1, ticks="outside", tickcolor="#444", automargin=True, title=dict(font=dict(size=15))),
        yaxis=dict(showgrid=True, gridcolor="#e5e5e5", zeroline=False, showline=True, linecolor="#444",
                   linewidth=1, ticks="outside", tickcolor="#444", automargin=True, title=dict(font=dict(size=15))),
        legend=dict(bgcolor="rgba(255,255,255,0.8)", font=dict(size=13)),
        hoverlabel=dict(font=dict(size=13)),
        margin=dict(l=70, r=30, t=70, b=60),
    )
)
pio.templates["asrsched"] = TEMPLATE
pio.templates.default = "plotly_white+asrsched"


def _keep_figurewidget_state_current() -> None:
    """Make a ``go.FigureWidget`` report its current figure whenever a frontend asks for its state.

    plotly refreshes a FigureWidget's synced state (``_widget_data``/``_widget_layout``) only when the
    figure itself is displayed; edits made before that travel as one-off messages. A FigureWidget
    shown *inside a container* (an ``ipywidgets.VBox`` panel, as every explorer in this package
    does) is never displayed itself, so a frontend that restores widget state after the cell ran
    (Voila dashboards, a reloaded JupyterLab page) drew it empty. This refreshes the two traits just
    before ipywidgets serialises them for such a request; live edits are untouched.
    """
    try:
        from plotly.basewidget import BaseFigureWidget
    except ImportError:  # no anywidget: there are no FigureWidgets to fix
        return
    if getattr(BaseFigureWidget, "_asrsched_current_state", False):
        return
    base_get_state = BaseFigureWidget.get_state
    wanted = {"_widget_data", "_widget_layout"}

    def get_state(self, key=None, drop_defaults=False):
        keys = [key] if isinstance(key, str) else key
        ready = "_layout_obj" in self.__dict__ and "_data" in self.__dict__  # not while plotly builds it
        if ready and (keys is None or wanted & set(keys)) and not self.__dict__.get("_asrsched_refreshing"):
            self._asrsched_refreshing = True
            try:
                with self.hold_sync():
                    self._widget_layout = copy.deepcopy(self._layout_obj._props)
                    self._widget_data = copy.deepcopy(self._data)
            finally:
                self._asrsched_refreshing = False
        return base_get_state(self, key=key, drop_defaults=drop_defaults)

    get_state.__doc__ = base_get_state.__doc__
    BaseFigureWidget.get_state = get_state
    BaseFigureWidget._asrsched_current_state = True


_keep_figurewidget_state_current()


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


STATIC_FORMATS = ("png", "svg", "pdf")
FORMATS = ("html", *STATIC_FORMATS)
_TITLE_CHAR_EM = 0.52  # mean glyph width of DejaVu Sans in em (measured ≈ 0.49 on titles), for wrapping


def fit_title(fig: go.Figure, width: int = PRINT_WIDTH) -> go.Figure:
    """Wrap a title too long for ``width`` px onto several lines (in place) and make room for it.

    Titles state findings and get long; plotly never wraps them, so at print width they would run
    off the page. Titles that already hold ``<br>`` or other markup are left alone.
    """
    title = fig.layout.title
    text = title.text if title is not None else None
    if not text or "<" in text:
        return fig
    size = (title.font.size if title.font and title.font.size else None) or TEMPLATE.layout.title.font.size or 18
    max_chars = max(20, int(width * 0.95 / (_TITLE_CHAR_EM * size)))
    if len(text) <= max_chars:
        return fig
    import textwrap

    n = -(-len(text) // max_chars)  # as few lines as fit, then balance their lengths (no one-word orphan)
    lines = textwrap.wrap(text, max_chars, break_long_words=False, break_on_hyphens=False)
    for chars in range(-(-len(text) // n), max_chars + 1):
        trial = textwrap.wrap(text, chars, break_long_words=False, break_on_hyphens=False)
        if len(trial) <= n:
            lines = trial
            break
    top = fig.layout.margin.t if fig.layout.margin and fig.layout.margin.t is not None else TEMPLATE.layout.margin.t
    # anchor the block to the top of the figure, so extra lines grow downwards into the added margin
    # instead of onto subplot titles
    fig.update_layout(title=dict(text="<br>".join(lines), yref="container", y=1, yanchor="top", pad=dict(t=14)),
                      margin_t=top + (len(lines) - 1) * size * 1.3)
    return fig


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or value in (".", "..") or any(c in value for c in '/\\:*?"<>|'):
        raise ValueError(f"{what} must be a plain file-name stem (no path separators), got {value!r}")


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

    * HTML inlines plotly.js (about 4.8 MB; opens offline, no CDN); its camera button saves a PNG at
      print size.
    * PNG is ``width x height`` CSS px at scale ``PNG_SCALE`` (default 2700 x 1680 px, 360 dpi at
      7.5 x 4.7 in); SVG (and PDF on request) at ``width x height``.
    * Long titles are wrapped to fit ``width`` (:func:`fit_title`) in the exported copies only.

    Static formats need Debian's chromium; if it is missing, a ``RuntimeError`` says what to install
    (HTML is still written). Bad ``name``/``notebook``/``formats`` raise ``ValueError`` before
    anything is written.
    """
    _check_name(name, "name")
    _check_name(notebook, "notebook")
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"formats: unknown {bad or formats!r}; allowed: {', '.join(FORMATS)}")
    out = figures_dir(notebook, root)
    paths: dict[str, Path] = {}
    fig = fit_title(go.Figure(fig), width)  # a FigureWidget exports as a plain figure; the caller's is untouched
    if "html" in formats:
        p = out / f"{name}.html"
        fig.write_html(p, include_plotlyjs=True, full_html=True, config={
            "displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": name, "width": width, "height": height,
                                     "scale": PNG_SCALE}})
        paths["html"] = p
    static = [f for f in formats if f in STATIC_FORMATS]
    if static:
        if not _chromium():
            raise RuntimeError(
                "static figure export (png/svg/pdf) needs Debian's chromium: apt-get install chromium "
                f"(or set BROWSER_PATH); HTML was written to {paths.get('html')}"
            )
        os.environ.setdefault("BROWSER_PATH", _chromium())
        with export_session(), warnings.catch_warnings():
            # plotly passes kaleido options that a running server ignores, and says so on every image
            warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
            for f in static:
                p = out / f"{name}.{f}"
                fig.write_image(p, format=f, width=width, height=height, scale=PNG_SCALE if f == "png" else 1)
                paths[f] = p
    return paths


def export_table(df, name: str, notebook: str, *, root: str | os.PathLike | None = None) -> Path:
    """Write a table as ``figures/<notebook>/<name>.csv``; returns the path.

    A named index (or any named level of a MultiIndex, e.g. from ``pivot_table``) is written as
    columns; an unnamed RangeIndex is not.
    """
    _check_name(name, "name")
    _check_name(notebook, "notebook")
    p = figures_dir(notebook, root) / f"{name}.csv"
    df.to_csv(p, index=any(n is not None for n in getattr(df.index, "names", [None])))
    return p
