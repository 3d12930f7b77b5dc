"""The figure check: exported SVGs rendered in a real browser; hidden data and unreadable text reported.

:func:`check_svgs` renders exported SVGs in Chromium (Playwright, Debian's ``/usr/bin/chromium``)
and reports, from the browser's own text boxes (what :func:`asrsched.figures.layout.apply_layout`
estimates from the font, measured):

* text that runs off the canvas or overlaps other text (tick labels, legend, titles);
* a numeric axis drawn with a single tick label (:func:`asrsched.figures.data_check.tick_problems`);

and, from the figure inside the HTML export beside the SVG (same name), the data rules of
:func:`asrsched.figures.data_check.data_problems`: points clipped at a fixed axis range with no label
saying their value, and relative changes below -100 %.
Command line (exit status 1 on any problem, 2 on bad input)::

    python -m asrsched.figures.layout_check figures/          # the gallery, or any folder of exports
    python -m asrsched.figures.layout_check runs/02_policy_sweep/<run>/cdf_e2el_uniform_rate21.svg

``asrsched check-figures PATH ...`` runs the same check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from asrsched.figures.data_check import data_problems, tick_problems
from asrsched.figures.reexport import html_figure_parts

__all__ = ["check_svgs", "figure_problems", "main"]

_TICK_GROUP = re.compile(r"<\s*([xy]\d*)tick$")


_MEASURE_JS = """() => {
  const svg = document.querySelector('svg');
  const W = parseFloat(svg.getAttribute('width')), H = parseFloat(svg.getAttribute('height'));
  const o = svg.getBoundingClientRect();
  const boxes = [];
  for (const t of svg.querySelectorAll('text')) {
    const s = (t.textContent || '').trim();
    if (!s) continue;
    const cs = getComputedStyle(t);
    if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity || '1') === 0) continue;
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const g = t.closest('g[class]');
    boxes.push({text: s.slice(0, 60), cls: (t.getAttribute('class') || '') + ' < ' + (g ? g.getAttribute('class') : ''),
                x0: r.left - o.left, y0: r.top - o.top, x1: r.right - o.left, y1: r.bottom - o.top,
                fs: parseFloat(cs.fontSize) || 12});
  }
  return {W, H, boxes};
}"""


def _glyph_box(b: dict) -> tuple[float, float, float, float]:
    """The ink of a text box: a DOM text box includes the font's line gap above and below the
    glyphs (about 20 % of the font size each side); compare what is drawn."""
    pad = 0.18 * b["fs"]
    return b["x0"] + 0.5, b["y0"] + pad, b["x1"] - 0.5, b["y1"] - pad


def _problems(measured: dict, tol: float = 1.0) -> list[str]:
    W, H, boxes = measured["W"], measured["H"], measured["boxes"]
    out = []
    for b in boxes:
        x0, y0, x1, y1 = _glyph_box(b)
        if x0 < -tol or y0 < -tol or x1 > W + tol or y1 > H + tol:
            out.append(
                f"text runs off the {W:g}x{H:g} canvas: {b['text']!r} at ({x0:.0f},{y0:.0f})-({x1:.0f},{y1:.0f})"
            )
    for i in range(len(boxes)):
        a = _glyph_box(boxes[i])
        for j in range(i + 1, len(boxes)):
            c = _glyph_box(boxes[j])
            w = min(a[2], c[2]) - max(a[0], c[0])
            h = min(a[3], c[3]) - max(a[1], c[1])
            if w > tol and h > tol:
                out.append(f"text overlaps: {boxes[i]['text']!r} and {boxes[j]['text']!r} ({w:.0f}x{h:.0f} px)")
    return out


def _tick_labels(measured: dict) -> dict[str, list[str]]:
    """The tick labels the browser drew, per axis (``"x"``, ``"y2"``), from the measured text boxes."""
    out: dict[str, list[str]] = {}
    for b in measured["boxes"]:
        m = _TICK_GROUP.search(b["cls"].strip())
        if m:
            out.setdefault(m.group(1), []).append(b["text"])
    return out


def figure_problems(svg: Path, measured: dict) -> list[str]:
    """Every problem of one exported figure: its text (measured in the browser), its ticks, and the
    data rules on the figure in the HTML export beside it (when there is one)."""
    out = _problems(measured) + tick_problems(_tick_labels(measured))
    html = svg.with_suffix(".html")
    if html.is_file():
        try:
            data, layout = html_figure_parts(html)
        except (ValueError, OSError) as e:
            out.append(f"{html.name}: the figure could not be read back ({e})")
        else:
            out += data_problems(data, layout)
    return out


def _svg_files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.rglob("*.svg"))
        elif p.suffix.lower() == ".svg":
            out.append(p)
        else:
            raise ValueError(f"{p}: not an .svg file or a folder")
    return out


def check_svgs(paths: Iterable[str | Path], *, chromium: str | None = None) -> dict[Path, list[str]]:
    """Render each SVG (files, or every ``*.svg`` under folders) in Chromium and list its problems
    (:func:`figure_problems`).

    Returns ``{svg path: [problem, ...]}`` for every file (an empty list when it is clean).
    Needs ``playwright`` (the ``dev`` extra) and Debian's chromium; never downloads a browser.
    """
    files = _svg_files(paths)
    if not files:
        return {}
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise RuntimeError(
            "the figure check needs playwright: pip install playwright "
            "(uses Debian's /usr/bin/chromium; no browser download)"
        ) from None
    import os
    import shutil

    exe = chromium or os.environ.get("BROWSER_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        raise RuntimeError(f"the figure check needs Debian's chromium (apt-get install chromium); not found at {exe}")
    flags = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    result: dict[Path, list[str]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=flags)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            for f in files:
                page.goto(f.resolve().as_uri())
                page.wait_for_selector("svg", timeout=30_000)
                result[f] = figure_problems(f, page.evaluate(_MEASURE_JS))
        finally:
            browser.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.figures.layout_check PATH ...``: exit 1 if any exported figure has a problem
    (text off the canvas or overlapping, a single-tick axis, clipped data without a label, a change
    below -100 %)."""
    ap = argparse.ArgumentParser(
        prog="python -m asrsched.figures.layout_check",
        description="Render exported SVGs in Chromium and report text off the canvas or overlapping, "
        "single-tick axes, clipped data without a label and relative changes below -100 %.",
    )
    ap.add_argument("paths", nargs="+", help="SVG files or folders (searched recursively)")
    args = ap.parse_args(argv)
    try:
        res = check_svgs(args.paths)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = {f: p for f, p in res.items() if p}
    for f, probs in bad.items():
        print(f"{f}:")
        for line in probs:
            print(f"  {line}")
    print(f"{len(res)} figures checked, {len(bad)} with problems")
    return 1 if bad or not res else 0


if __name__ == "__main__":
    raise SystemExit(main())
