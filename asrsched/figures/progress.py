"""Progress bars that behave in every place a notebook runs.

The lower layers (``asrsched.sim.parallel``, profiling, the load generator) draw their bars with
``tqdm.auto.tqdm``, looked up when a bar is made. In a Jupyter kernel, :func:`install` (called by
:func:`asrsched.figures.style.setup`, i.e. by every notebook's first code cell) points ``tqdm.auto`` at one of
two classes, chosen by :func:`mode`:

* ``"widget"`` (opt-in, ``$ASRSCHED_PROGRESS=widget``): :class:`WidgetBar`, tqdm's ipywidgets bar,
  shown through a display handle and **replaced by one line of plain text when it finishes**. A
  reloaded page or a saved notebook therefore holds text, never a view of a closed widget model
  (which JupyterLab draws as "Error displaying widget: model not found").
* ``"text"`` (the default in every kernel: JupyterLab, Voila, papermill, ``asrsched run``): :class:`TextBar`, a single line of
  plain text (stdout mime type, never the red stderr box) updated in place through a display
  handle, at most once a second, ending as ``✓ desc: 26/26 [00:12, 2.1 it/s]``.

Outside a kernel (a terminal, pytest) nothing is replaced: tqdm's own terminal bar runs.
``$ASRSCHED_PROGRESS`` = ``widget`` | ``text`` | ``terminal`` | ``off`` forces a mode
(``off``: no bars at all). :func:`progress_bar` makes a bar of the current mode directly.

Warnings are shown the same way everywhere: one plain line on stdout, ``⚠ OverloadWarning: ...``
(:func:`warning_line`), never tracebacks in a red stderr box. The dashboards install
:func:`show_warning_as_line` as ``warnings.showwarning``; a notebook cell wraps its work in
:func:`warnings_as_lines`, which prints each distinct warning once, with its count.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from tqdm import std as tqdm_std
from tqdm.notebook import tqdm_notebook

__all__ = [
    "warning_line",
    "show_warning_as_line",
    "warnings_as_lines",
    "PROGRESS_ENV",
    "MODES",
    "mode",
    "in_kernel",
    "TextBar",
    "WidgetBar",
    "OffBar",
    "bar_class",
    "progress_bar",
    "install",
    "final_line",
]

#: the environment variable that forces a progress mode
PROGRESS_ENV = "ASRSCHED_PROGRESS"
#: the progress modes: an ipywidgets bar, one line of text, tqdm's terminal bar, no bar
MODES = ("widget", "text", "terminal", "off")
# front ends that render a finished notebook without a live widget manager (or save it to a file)


def in_kernel() -> bool:
    """True inside a Jupyter kernel (not a terminal IPython, not plain Python)."""
    ip = sys.modules.get("IPython")
    if ip is None:
        return False
    try:
        shell = ip.get_ipython()
    except Exception:  # an IPython too old or half-imported
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def mode() -> str:
    """Which progress display fits here: ``$ASRSCHED_PROGRESS``, else ``terminal`` outside a kernel,
    else ``text``."""
    forced = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if forced:
        if forced not in MODES:
            raise ValueError(f"${PROGRESS_ENV}={forced!r}: allowed values {', '.join(MODES)}")
        return forced
    if not in_kernel():
        return "terminal"
    # Text everywhere by default. Widget bars are opt-in ($ASRSCHED_PROGRESS=widget): a bar that lives
    # a few milliseconds races JupyterLab's widget manager ("Cannot read properties of null (reading
    # 'widgets')", seen in a fresh environment on notebooks 01 and 04), and a text line survives a
    # reload, a saved notebook and every front end alike.
    return "text"


def final_line(bar: tqdm_std.tqdm) -> str:
    """One line for a finished (or stopped) bar: ``✓ desc: 26/26 [00:12, 2.10 it/s]``."""
    d = bar.format_dict
    total, n = d.get("total"), d.get("n", 0)
    ok = not total or n >= total
    elapsed = tqdm_std.tqdm.format_interval(d.get("elapsed", 0))
    # the whole run's mean rate, not tqdm's smoothed recent one (72 items in 1 s read "0.83 it/s" after a slow last item)
    rate = n / d["elapsed"] if d.get("elapsed") else d.get("rate")
    unit = d.get("unit") or "it"
    bits = [elapsed] + ([f"{rate:.3g} {unit}/s"] if rate and n else []) + ([d["postfix"]] if d.get("postfix") else [])
    count = f"{n:g}/{total:g}" if total else f"{n:g} {unit}"
    desc = (d.get("prefix") or "").rstrip(": ")
    return f"{'✓' if ok else '✗ stopped at'} {desc + ': ' if desc else ''}{count} [{', '.join(bits)}]"


class TextBar(tqdm_std.tqdm):
    """tqdm as one line of plain text in a notebook output, updated in place (display handle).

    No stderr stream (the red box), no carriage returns that a static page freezes into many
    lines; the finished line stays. Outside a kernel it falls back to printing the final line.
    """

    _handle = None

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("mininterval", 1.0)
        kwargs["gui"] = True  # tqdm then never writes to its file itself
        kwargs["disable"] = bool(kwargs.get("disable", False))
        super().__init__(*args, **kwargs)
        if not self.disable:
            self.display()

    def _show(self, text: str) -> None:
        from IPython.display import display

        data = {"text/plain": text}
        if self._handle is None:
            if in_kernel():
                self._handle = display(data, raw=True, display_id=True)
            return
        self._handle.update(data, raw=True)

    def display(self, msg: str | None = None, pos: int | None = None) -> None:  # noqa: ARG002 (tqdm's signature)
        if self.disable and msg is None:
            return
        d = self.format_dict
        d["bar_format"] = "{l_bar}{bar:20}{r_bar}"
        self._show(msg if msg is not None else self.format_meter(**d).replace("\r", ""))

    def clear(self, *_, **__) -> None:
        pass

    def close(self) -> None:
        if self.disable:
            return
        super().close()  # gui=True: tqdm prints nothing
        line = final_line(self)
        if self._handle is None and not in_kernel():
            print(line, file=sys.stdout, flush=True)
        else:
            self._show(line)


class OffBar(tqdm_std.tqdm):
    """A bar that is always disabled (``$ASRSCHED_PROGRESS=off``)."""

    def __init__(self, *args, **kwargs):
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


class WidgetBar(tqdm_notebook):
    """tqdm's ipywidgets bar that turns into one line of text when it finishes (JupyterLab).

    While it runs it is a live widget, shown through a display handle; on ``close()`` that output
    is replaced by the final line, so no saved output refers to a widget model after the run (a
    reloaded page shows the line, not "Error displaying widget").
    """

    _handle = None

    def __new__(cls, *args, **kwargs):
        # A widget made off the kernel's main thread (e.g. the load generator's event-loop thread)
        # races the front end's widget manager; such bars are text lines instead.
        if threading.current_thread() is not threading.main_thread():
            return TextBar(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        kwargs["display"] = False  # displayed below, through a handle
        kwargs["delay"] = 0
        super().__init__(*args, **kwargs)
        if not self.disable:
            from IPython.display import display

            self._handle = display(self.container, display_id=True)
            self.displayed = True

    def close(self):
        if self.disable:
            return
        super().close()
        if self._handle is not None:
            self._handle.update({"text/plain": final_line(self)}, raw=True)
        # The widget models are left open on purpose: the output no longer shows them, and closing a
        # model while the front end is still creating its view (a bar that lived a few milliseconds)
        # raises "Cannot read properties of null (reading 'widgets')" in JupyterLab's widget manager.


def bar_class(which: str | None = None) -> Any:
    """The tqdm-compatible class for mode ``which`` (default :func:`mode`)."""
    which = which or mode()
    if which not in MODES:
        raise ValueError(f"progress mode {which!r}: allowed values {', '.join(MODES)}")
    return {"widget": WidgetBar, "text": TextBar, "off": OffBar, "terminal": tqdm_std.tqdm}[which]


def progress_bar(*args, **kwargs):
    """A progress bar of the current :func:`mode` (``tqdm`` arguments)."""
    return bar_class()(*args, **kwargs)


_INSTALLED: dict[str, Any] = {}


def install(which: str | None = None) -> str:
    """Point ``tqdm.auto`` (and ``tqdm.autonotebook``) at the bar of this front end; returns the mode.

    Does nothing in a terminal (mode ``terminal``). Safe to call more than once; the last call wins.
    """
    which = which or mode()
    import tqdm.auto as auto
    import tqdm.autonotebook as autonb

    if "orig" not in _INSTALLED:
        _INSTALLED["orig"] = (auto.tqdm, auto.trange, autonb.tqdm, autonb.trange)
    if which == "terminal":
        auto.tqdm, auto.trange, autonb.tqdm, autonb.trange = _INSTALLED["orig"]
        return which
    cls = bar_class(which)

    def trange(*args, **kwargs):
        return cls(range(*args), **kwargs)

    auto.tqdm = autonb.tqdm = cls
    auto.trange = autonb.trange = trange
    return which


def warning_line(message: Warning | str, category: type[Warning]) -> str:
    """How a notebook shows a warning: one plain line, ``⚠ OverloadWarning: <message>``."""
    return f"⚠ {category.__name__}: {message}"


def show_warning_as_line(message: Warning | str, category: type[Warning], *_args: Any, **_kwargs: Any) -> None:
    """A ``warnings.showwarning`` that prints :func:`warning_line` on stdout (no source line, no stderr box)."""
    print(warning_line(message, category), file=sys.stdout)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Collect the warnings raised inside the block and print each distinct one as one :func:`warning_line`
    (``(xN)`` when it repeats) after it, also when the block raises: a cell's warnings then read the same in
    JupyterLab, under papermill and in a dashboard, and a sweep that warns a hundred times prints one line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            counts: dict[tuple[type[Warning], str], int] = {}
            for w in caught:
                key = (w.category, str(w.message))
                counts[key] = counts.get(key, 0) + 1
            for (category, message), n in counts.items():
                print(warning_line(message, category) + (f" (x{n})" if n > 1 else ""), file=sys.stdout)
