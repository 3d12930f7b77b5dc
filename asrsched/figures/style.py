"""House style for every figure, and the one export helper.

* ``POLICY_COLORS``: one fixed, colour-blind-safe colour per policy (Okabe-Ito),
  the same in every notebook; ``ESTIMATOR_COLORS`` likewise for the A/B study.
* ``TEMPLATE`` (registered as plotly template ``"asrsched"``; every export is drawn with
  :data:`HOUSE_TEMPLATE`): readable fonts at print size, white background, light grid.
* :func:`setup` (every notebook's first code cell calls it; :func:`teardown` undoes it) makes the
  process show what the exports show: the house template as plotly's default, the layout pass
  on every figure a notebook shows, explorers whose state survives a saved or reloaded page, and
  progress bars that fit the front end (:mod:`asrsched.figures.progress`). Importing this module
  changes nothing outside it.
* :func:`export_figure` writes one figure as HTML (plotly.js shared by the folder's figures, opens
  offline), PNG and SVG (PDF on request) into the run's folder (see below);
  :func:`export_table` writes a CSV beside it. Static images go through kaleido 1.x
  and Debian's chromium; wrap a batch of exports in :func:`export_session` so one
  kaleido server (one Chromium) serves them all, with one progress line for the batch.
* Every exported copy goes through :func:`asrsched.figures.layout.apply_layout` (titles
  wrap, axis titles get room, subplots don't collide, log axes get 1-2-5 ticks).
* the explorers' "export this view" button is :func:`asrsched.figures.panel.export_view_button`;
  :mod:`asrsched.figures.reexport` turns an exported HTML back into a figure and writes it in other
  formats (``asrsched export``).

Where exports go (:func:`export_dir`): an explicit ``root``; else ``$ASRSCHED_FIGURES``
(set by ``asrsched run --gallery`` / ``scripts/main.sh``: the report gallery
``figures/<notebook>/``); else the run folder ``runs/<notebook>/<time>-<hash>/`` with its
``run.json`` (:mod:`asrsched.figures.outputs`): interactive runs never write next to
the notebook and never into the gallery.

Print size: PNG and SVG are rendered at ``PRINT_WIDTH x PRINT_HEIGHT`` CSS pixels
(900 x 560, i.e. 7.5 x 4.7 in at 120 px/in) with ``PNG_SCALE = 3``: 2700 x 1680 px,
360 dpi at that size.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from asrsched.figures.layout import apply_layout, fit_title
from asrsched.figures.outputs import gallery_root, interactive_run_dir, project_root
from asrsched.figures.progress import install as install_progress
from asrsched.figures.progress import progress_bar, show_warning_as_line

__all__ = [
    "POLICY_COLORS",
    "ESTIMATOR_COLORS",
    "policy_color",
    "policy_family",
    "TEMPLATE",
    "HOUSE_TEMPLATE",
    "setup",
    "teardown",
    "export_figure",
    "export_table",
    "export_session",
    "shown_path",
    "export_dir",
    "fit_title",
    "FORMATS",
    "default_formats",
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
    # the families of asrsched.core.gamma_boost and asrsched.core.nudge (a member takes its family's colour)
    "gamma_boost": "#E69F00",
    "gamma_boost_partial": "#F0E442",
    "nudge": "#56B4E9",
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


def policy_family(name: str) -> str:
    """A policy family member's family (``gamma_boost_0.5`` -> ``gamma_boost``, ``gamma_boost_0.5_real`` ->
    ``gamma_boost_partial``, ``nudge_m4_1`` -> ``nudge``); any other name, lower-cased, as it is."""
    key = str(name).lower()
    if key in POLICY_COLORS:
        return key
    if key.startswith("gamma_boost_"):
        return "gamma_boost_partial" if "_" in key.removeprefix("gamma_boost_") else "gamma_boost"
    return "nudge" if key.startswith("nudge_") else key


def policy_color(name: str) -> str:
    """The house colour of a policy (or estimator); a stable fallback for others."""
    key = policy_family(name)
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
        xaxis=dict(
            showgrid=True,
            gridcolor="#e5e5e5",
            zeroline=False,
            showline=True,
            linecolor="#444",
            linewidth=1,
            ticks="outside",
            tickcolor="#444",
            automargin=True,
            title=dict(font=dict(size=15)),
        ),
        yaxis=dict(
            showgrid=True,
            gridcolor="#e5e5e5",
            zeroline=False,
            showline=True,
            linecolor="#444",
            linewidth=1,
            ticks="outside",
            tickcolor="#444",
            automargin=True,
            title=dict(font=dict(size=15)),
        ),
        legend=dict(bgcolor="rgba(255,255,255,0.8)", font=dict(size=13)),
        hoverlabel=dict(font=dict(size=13)),
        margin=dict(l=70, r=30, t=70, b=60),
    )
)
#: plotly's white theme under the house layout: the template of every export (and the default after :func:`setup`)
HOUSE_TEMPLATE = "plotly_white+asrsched"
pio.templates["asrsched"] = TEMPLATE  # a named template; registering it changes no default


def _current_state_get_state(base_get_state):
    """A ``FigureWidget.get_state`` that reports the current figure whenever a frontend asks for its state.

    plotly refreshes a FigureWidget's synced state (``_widget_data``/``_widget_layout``) only when the
    figure itself is displayed; edits made before that travel as one-off messages. A FigureWidget
    shown *inside a container* (an ``ipywidgets.VBox`` panel, as every explorer in this package
    does) is never displayed itself, so a frontend that restores widget state after the cell ran
    (Voila dashboards, a reloaded JupyterLab page) drew it empty. This refreshes the two traits just
    before ipywidgets serialises them for such a request; live edits are untouched.

    The refresh itself sends nothing: the state request's reply must be the first ``update`` the
    frontend sees for it. jupyter-widgets' restore path (``_loadFromKernelModels``, taken when its bulk
    request times out, as on a busy machine) builds the model from the first ``update`` that answers
    the request; a separate update holding only the two refreshed traits came first and drew
    "Failed to load model class 'undefined'" in place of the explorer's figure.
    """
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
                    self._states_to_send -= wanted  # they travel in the reply this state is for
            finally:
                self._asrsched_refreshing = False
        return base_get_state(self, key=key, drop_defaults=drop_defaults)

    get_state.__doc__ = base_get_state.__doc__
    return get_state


def _laid_out_display(base_show, base_bundle):
    """``go.Figure.show`` and ``_repr_mimebundle_`` that show a copy of the figure after the layout pass
    (:func:`asrsched.figures.layout.apply_layout`), so what the reader sees in JupyterLab or Voila has
    the wrapped titles and 1-2-5 log ticks of the exports, at most :data:`PRINT_WIDTH` wide (a figure
    set wider is drawn at that width, as its export is, so no panel is cut off by the output area). The caller's figure is untouched;
    FigureWidgets (the explorers) keep their own live pass."""

    def _copy(fig):
        # never wider than the print width: a notebook's output area is about 970 px, and the export is 900
        w = min(int(fig.layout.width or PRINT_WIDTH), PRINT_WIDTH)
        h = fig.layout.height or PRINT_HEIGHT
        c = go.Figure(fig)
        if fig.layout.width:
            c.layout.width = w
        return apply_layout(c, w, int(h))

    def show(self, *args, **kwargs):
        return base_show(_copy(self), *args, **kwargs)

    def _repr_mimebundle_(self, include=None, exclude=None, validate=True, **kwargs):
        return base_bundle(_copy(self), include=include, exclude=exclude, validate=validate, **kwargs)

    show.__doc__, _repr_mimebundle_.__doc__ = base_show.__doc__, base_bundle.__doc__
    return show, _repr_mimebundle_


#: what :func:`setup` replaced, to put back (empty when it is not in effect)
_SETUP: dict = {}
# tables shown whole: no cell cut to "..." (a claim's text, a recovered share) and no column elided; HTML wraps
PANDAS_DISPLAY = {"display.max_colwidth": None, "display.max_columns": None}


def setup(progress: str | None = None) -> str:
    """Show figures and progress in this process as the notebooks do; :func:`teardown` undoes it.

    * plotly's default template becomes :data:`HOUSE_TEMPLATE`;
    * every plain ``go.Figure`` shown (``fig.show()`` or a cell's value) is a copy after the layout
      pass, as its export is;
    * a ``FigureWidget`` inside a container reports its current state, so explorers survive a
      saved notebook, a reloaded page and Voila;
    * pandas shows tables whole (:data:`PANDAS_DISPLAY`: no cell cut short, no column elided);
    * every warning is one plain line on stdout (:func:`asrsched.figures.progress.show_warning_as_line`),
      in every cell: no red stderr box with a source line in JupyterLab, the same line under papermill
      and in a dashboard (a cell that warns many times wraps its work in
      :func:`asrsched.figures.progress.warnings_as_lines` to print each distinct warning once);
    * ``tqdm.auto`` draws the bar of this front end (:func:`asrsched.figures.progress.install`
      with ``progress``: a mode of :data:`asrsched.figures.progress.MODES`, or ``None`` for the
      front end's own).

    Every notebook calls it in its first code cell. Calling it again changes only the progress
    mode. Returns the progress mode in effect.
    """
    if not _SETUP:
        _SETUP["template"] = pio.templates.default
        _SETUP["figure"] = (go.Figure.show, go.Figure._repr_mimebundle_)
        pio.templates.default = HOUSE_TEMPLATE
        go.Figure.show, go.Figure._repr_mimebundle_ = _laid_out_display(*_SETUP["figure"])
        import pandas as pd

        _SETUP["showwarning"] = warnings.showwarning
        warnings.showwarning = show_warning_as_line
        _SETUP["pandas"] = {k: pd.get_option(k) for k in PANDAS_DISPLAY}
        for k, v in PANDAS_DISPLAY.items():
            pd.set_option(k, v)
        try:
            from plotly.basewidget import BaseFigureWidget
        except ImportError:  # no anywidget: there are no FigureWidgets to fix
            pass
        else:
            _SETUP["widget"] = BaseFigureWidget.get_state
            BaseFigureWidget.get_state = _current_state_get_state(BaseFigureWidget.get_state)
    return install_progress(progress)


def teardown() -> None:
    """Undo :func:`setup`: plotly's default template, figure display, pandas' display options, widget state and
    tqdm as they were."""
    if not _SETUP:
        return
    pio.templates.default = _SETUP.pop("template")
    go.Figure.show, go.Figure._repr_mimebundle_ = _SETUP.pop("figure")
    warnings.showwarning = _SETUP.pop("showwarning")
    import pandas as pd

    for k, v in _SETUP.pop("pandas").items():
        pd.set_option(k, v)
    if "widget" in _SETUP:
        from plotly.basewidget import BaseFigureWidget

        BaseFigureWidget.get_state = _SETUP.pop("widget")
    install_progress("terminal")


def export_dir(notebook: str, root: str | os.PathLike | None = None) -> Path:
    """The folder ``notebook``'s exports go to (created).

    ``<root>/<notebook>/`` when ``root`` is given; else ``$ASRSCHED_FIGURES/<notebook>/`` (a gallery
    batch run: ``asrsched run --gallery``, ``scripts/main.sh``); else this run's own folder
    ``<project>/runs/<notebook>/<time>-<parameter hash>/`` with its ``run.json``
    (:func:`asrsched.figures.outputs.interactive_run_dir`).
    """
    _check_name(notebook, "notebook")
    root = root if root is not None else gallery_root()
    d = Path(root) / notebook if root is not None else interactive_run_dir(notebook)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _chromium() -> str | None:
    for p in (os.environ.get("BROWSER_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if p and Path(p).exists():
            return p
    return None


class _OneLine(logging.Filter):
    """Keeps kaleido's and choreographer's log records (e.g. a ``JSONError`` traceback from the
    pipe to Chromium, which they ignore themselves) out of the page: each becomes one line in the
    export's progress line instead of a traceback on stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        exc = record.exc_info[1] if record.exc_info else None
        line = record.getMessage().strip().splitlines()[0][:160]
        if exc is not None:
            line += f" ({type(exc).__name__})"
        _SESSION["notes"].append(f"{record.name.split('.')[0]}: {line}")
        return False


_ONE_LINE = _OneLine()
_THIRD_PARTY = ("kaleido", "choreographer", "logistro")


def _quiet_third_party_logs() -> None:
    for name in list(logging.Logger.manager.loggerDict):
        if name.split(".")[0] in _THIRD_PARTY:
            lg = logging.getLogger(name)
            if _ONE_LINE not in lg.filters:
                lg.addFilter(_ONE_LINE)


_SESSION: dict = {"depth": 0, "bar": None, "figures": 0, "dirs": [], "notes": [], "server": False}


def _start_server() -> None:
    import kaleido

    if _chromium():
        os.environ.setdefault("BROWSER_PATH", _chromium())
        kaleido.start_sync_server(silence_warnings=True)
        _SESSION["server"] = True
        _quiet_third_party_logs()


def _stop_server() -> None:
    import kaleido

    if _SESSION["server"]:
        with contextlib.suppress(Exception):
            kaleido.stop_sync_server(silence_warnings=True)
        _SESSION["server"] = False


def shown_path(d: Path) -> str:
    """A folder as a progress or status line shows it: relative to the project when inside it."""
    root = project_root()
    try:
        return str(d.resolve().relative_to(root)) if root else str(d)
    except ValueError:
        return str(d)


@contextlib.contextmanager
def export_session(desc: str = "exporting figures") -> Iterator[None]:
    """Keep one kaleido server (one Chromium) alive for a batch of exports, with one progress line.

    The line counts the figures as they are written and ends as ``✓ exported to <folder>: 9 fig
    [00:12]``; what kaleido or choreographer log meanwhile is summarised on it, never printed as
    a traceback.
    """
    import kaleido  # noqa: F401  (fail early with ImportError when the notebooks extra is missing)

    if _SESSION["depth"] == 0:
        _SESSION.update(figures=0, dirs=[], notes=[], bar=progress_bar(total=None, desc=desc, unit="fig", leave=True))
        _quiet_third_party_logs()  # the kaleido server starts with the first static image
    _SESSION["depth"] += 1
    try:
        yield
    finally:
        _SESSION["depth"] -= 1
        if _SESSION["depth"] == 0:
            _stop_server()
            bar, _SESSION["bar"] = _SESSION["bar"], None
            if bar is not None:
                if _SESSION["dirs"]:
                    dirs = sorted(set(_SESSION["dirs"]))
                    bar.set_description(
                        f"exported to {shown_path(dirs[0])}" + (f" (+{len(dirs) - 1} more)" if len(dirs) > 1 else "")
                    )
                notes = list(dict.fromkeys(_SESSION["notes"]))
                if notes:
                    bar.set_postfix_str(f"{len(notes)} note(s) from the image exporter, ignored: {notes[0]}")
                bar.close()


STATIC_FORMATS = ("png", "svg", "pdf")
FORMATS = ("html", *STATIC_FORMATS)
FORMATS_ENV = "ASRSCHED_FORMATS"  # e.g. "html,png,svg,pdf": the formats of every export (asrsched run --formats)


def default_formats() -> tuple[str, ...]:
    """``$ASRSCHED_FORMATS`` (comma-separated) or ``("html", "png", "svg")``."""
    env = os.environ.get(FORMATS_ENV, "").strip()
    if not env:
        return ("html", "png", "svg")
    fmts = tuple(f.strip().lower().lstrip(".") for f in env.split(",") if f.strip())
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise ValueError(f"${FORMATS_ENV}={env!r}: unknown {bad or fmts!r}; allowed: {', '.join(FORMATS)}")
    return fmts


PLOTLYJS_ENV = "ASRSCHED_HTML_PLOTLYJS"  # "shared" (default): one plotly.min.js per folder; "inline": in every HTML


def plotlyjs_mode() -> bool | str:
    """plotly's ``include_plotlyjs`` for HTML exports: ``"directory"`` (one shared ``plotly.min.js`` beside
    the figures; the default) or ``True`` (inlined) with ``$ASRSCHED_HTML_PLOTLYJS=inline``. Any other value
    is a ``ValueError`` naming the variable."""
    v = os.environ.get(PLOTLYJS_ENV, "shared").strip().lower()
    if v not in ("shared", "inline"):
        raise ValueError(f"${PLOTLYJS_ENV}: {v!r} is not one of 'shared', 'inline'")
    return True if v == "inline" else "directory"


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or value in (".", "..") or any(c in value for c in '/\\:*?"<>|'):
        raise ValueError(f"{what} must be a plain file-name stem (no path separators), got {value!r}")


def export_figure(
    fig: go.Figure,
    name: str,
    notebook: str,
    *,
    root: str | os.PathLike | None = None,
    formats: tuple[str, ...] | None = None,
    width: int = PRINT_WIDTH,
    height: int = PRINT_HEIGHT,
) -> dict[str, Path]:
    """Write ``fig`` as ``<folder>/<name>.{html,png,svg}`` (and ``.pdf`` on request); returns the paths.

    * ``<folder>`` is :func:`export_dir` (the run's folder under ``runs/``, or the gallery in a
      ``--gallery`` batch run, or ``<root>/<notebook>``).
    * ``formats`` defaults to :func:`default_formats` (``html, png, svg``, or ``$ASRSCHED_FORMATS``);
      any of ``html``, ``png``, ``svg``, ``pdf``.
    * HTML loads plotly.js from ``plotly.min.js`` beside it, written once per folder (about 4.8 MB; opens
      offline, no CDN; a run folder of 20 figures is 5 MB, not 100); ``$ASRSCHED_HTML_PLOTLYJS=inline``
      (:data:`PLOTLYJS_ENV`) inlines it in every file instead, for an HTML that travels alone. Its camera button saves a PNG at
      print size.
    * PNG is ``width x height`` CSS px at scale ``PNG_SCALE`` (default 2700 x 1680 px, 360 dpi at
      7.5 x 4.7 in); SVG and PDF at ``width x height``.
    * The exported copies go through :func:`asrsched.figures.layout.apply_layout` (wrapped titles,
      room for axis titles, spaced subplots, 1-2-5 log ticks); the caller's figure is untouched.

    Static formats need Debian's chromium; if it is missing, a ``RuntimeError`` says what to install
    (HTML is still written). A failed image is retried once with a fresh exporter, then reported as
    one ``RuntimeError`` line. Bad ``name``/``notebook``/``formats`` raise ``ValueError`` before
    anything is written.
    """
    _check_name(name, "name")
    _check_name(notebook, "notebook")
    formats = tuple(formats) if formats is not None else default_formats()
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"formats: unknown {bad or formats!r}; allowed: {', '.join(FORMATS)}")
    js = plotlyjs_mode() if "html" in formats else None
    out = export_dir(notebook, root)
    paths: dict[str, Path] = {}
    # a FigureWidget exports as a plain figure, in the house template; the caller's figure is untouched
    fig = go.Figure(fig)
    fig.update_layout(template=HOUSE_TEMPLATE)
    fig = apply_layout(fig, width, height)
    with export_session():
        if "html" in formats:
            p = out / f"{name}.html"
            fig.write_html(
                p,
                include_plotlyjs=js,
                full_html=True,
                config={
                    "displaylogo": False,
                    "toImageButtonOptions": {
                        "format": "png",
                        "filename": name,
                        "width": width,
                        "height": height,
                        "scale": PNG_SCALE,
                    },
                },
            )
            paths["html"] = p
        static = [f for f in formats if f in STATIC_FORMATS]
        if static:
            if not _chromium():
                raise RuntimeError(
                    "static figure export (png/svg/pdf) needs Debian's chromium: apt-get install chromium "
                    f"(or set BROWSER_PATH); HTML was written to {paths.get('html')}"
                )
            os.environ.setdefault("BROWSER_PATH", _chromium())
            if not _SESSION["server"]:
                _start_server()
            with warnings.catch_warnings():
                # plotly passes kaleido options that a running server ignores, and says so on every image
                warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)
                for f in static:
                    p = out / f"{name}.{f}"
                    _write_image(fig, p, f, width, height)
                    paths[f] = p
        _SESSION["dirs"].append(out)
        _SESSION["figures"] += 1
        if _SESSION["bar"] is not None:
            _SESSION["bar"].set_description(f"exporting to {shown_path(out)}", refresh=False)
            _SESSION["bar"].update(1)
    return paths


def _write_image(fig: go.Figure, path: Path, fmt: str, width: int, height: int) -> None:
    """One static image; on failure, once more through a fresh kaleido server, then one clear error."""
    scale = PNG_SCALE if fmt == "png" else 1
    try:
        fig.write_image(path, format=fmt, width=width, height=height, scale=scale)
        return
    except Exception:  # kaleido/choreographer: a broken pipe to Chromium, a JSONError, a timeout
        _stop_server()
        _start_server()
    try:
        fig.write_image(path, format=fmt, width=width, height=height, scale=scale)
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise RuntimeError(
            f"static export of {path.name} failed twice ({type(e).__name__}: {msg}); "
            "other formats of it may have been written"
        ) from None


def export_table(df, name: str, notebook: str, *, root: str | os.PathLike | None = None) -> Path:
    """Write a table as ``<folder>/<name>.csv`` (the folder of :func:`export_dir`); returns the path.

    A named index (or any named level of a MultiIndex, e.g. from ``pivot_table``) is written as
    columns; an unnamed RangeIndex is not.
    """
    _check_name(name, "name")
    _check_name(notebook, "notebook")
    p = export_dir(notebook, root) / f"{name}.csv"
    df.to_csv(p, index=any(n is not None for n in getattr(df.index, "names", [None])))
    return p
