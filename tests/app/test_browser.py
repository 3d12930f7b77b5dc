"""The notebooks as a person uses them: JupyterLab and Voila in a real (headless) Chromium.

For every ``notebooks/NN_*.ipynb`` (new notebooks are picked up automatically):

* JupyterLab is started on 127.0.0.1 with a random token, in a temporary root holding copies of
  the notebooks with tiny parameters injected (``notebooks/small_params.json``, the same
  ``{notebook: {NAME: value}}`` format as ``asrsched run --params``; a papermill-style
  ``injected-parameters`` cell after the ``parameters`` cell);
* Debian's chromium (driven by Playwright, never a downloaded browser) opens the notebook, clicks
  Run > Run All Cells and waits until every code cell has an execution count and the kernel is
  idle; no output may be an error (or a traceback on stderr);
* one interactive control is moved the way a user would (a slider by keyboard, or a dropdown
  choice), and the plotly figure beside it must change in the DOM (title or traces);
* Run All leaves no new file beside the notebook and writes a ``run.json`` under ``runs/<notebook>/``
  (JupyterLab's kernel runs in the notebook's folder; ``$ASRSCHED_ROOT`` is the temporary root);
* the notebook is saved and the page reloaded: no output may read "Error displaying widget"
  (finished progress bars turn into text, so nothing refers to a closed widget model);
* the same through the dashboard command (``asrsched dashboard NB --small``, Voila), where
  the page must also show no stderr box (progress and warnings are plain lines), and then what the run
  made: each notebook's tables, figures in every format and printed findings (``tests/notebook_checks.py``;
  Voila executes the notebook in a fresh kernel with nbclient, its parameters injected as papermill does).

Screenshots before and after each interaction, the whole page at the end, and a JSON summary go
to ``runs/browser-artifacts/`` (``$ASRSCHED_BROWSER_ARTIFACTS``). Look at them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from extras import need
from notebook_checks import CHECKS, EXTRA_PARAMS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARAMS_FILE = ROOT / "notebooks" / "small_params.json"  # the small sets (asrsched run NN --small)
PARAMS = json.loads(PARAMS_FILE.read_text())
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ARTIFACTS = Path(os.environ.get("ASRSCHED_BROWSER_ARTIFACTS") or ROOT / "runs" / "browser-artifacts")
CHROMIUM = os.environ.get("BROWSER_PATH") or "/usr/bin/chromium"
# Flags that work for Debian's chromium under Playwright (no sandbox in containers, no GPU, no phoning home).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Which control to move, by its ``description``; default: the first slider, else the first dropdown.
CONTROL = {}
RUN_TIMEOUT_S = 420  # Run All, per notebook, with the tiny parameters
# Figures are exported as HTML only in JupyterLab and in the dashboards whose outputs are not checked: the
# PNG/SVG pass (kaleido driving a second Chromium, 5-10 s a notebook) runs in the dashboards whose files
# tests/notebook_checks.py checks, and in notebook 03's papermill runs (tests/app/test_runner.py).
STATIC_EXPORT_OFF = {"ASRSCHED_FORMATS": "html"}
UPDATE_TIMEOUT_S = 240  # one control change until the figure has redrawn
RETRY_AFTER_S = 60  # no redraw by then: the control is moved once more

# JupyterLab 4 and Voila render an error output (a traceback) with the stderr mime type; what tells it
# apart from warnings and progress bars on stderr is IPython's traceback text.
STDERR_SEL = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
ERROR_SEL = STDERR_SEL + ', .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^Cell In\[\d+\], line \d+", re.M)
CONTROL_SEL = ".widget-slider, .widget-dropdown"
# simulation-only notebooks: in JupyterLab and in their dashboards they show no stderr box at all (01 and 04 run
# real Whisper and servers, whose own logs may go to stderr)
NO_STDERR = {"02_policy_sweep", "03_workload_drift", "05_ab_estimators", "06_ab_asr_policies"}
FIG_SEL = ".js-plotly-plot"

if not Path(CHROMIUM).exists():
    pytest.skip(f"Debian chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = need("playwright.sync_api")


# ----------------------------------------------------------------------------------------- helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=3)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    raise TimeoutError(f"{url} not up after {timeout} s:\n{log.read_text()[-3000:]}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http_status(url: str) -> int:
    """The HTTP status of a GET, redirects not followed."""
    try:
        with urllib.request.build_opener(_NoRedirect).open(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def parameterised_copy(nb: Path, dest: Path) -> dict:
    """Copy ``nb`` to ``dest`` with its tiny parameters injected (papermill's way); returns them."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    params = PARAMS.get(nb.stem)
    node = load_notebook_node(str(nb))
    if params is not None:
        node = parameterize_notebook(node, params)
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(node, dest)
    return params


def needs_params_and_controls(nb: Path) -> None:
    """Fail if ``nb`` has no tiny parameters; skip it if it has no control to drive."""
    needs_params(nb)
    if not has_interactive_code(nb):
        pytest.skip(f"{nb.stem} has no interactive control (no ipywidgets/explorer call)")


def needs_params(nb: Path) -> dict:
    from asrsched.app.runner import notebook_parameters

    params = PARAMS.get(nb.stem)
    if params is None:
        pytest.fail(
            f"{nb.stem} has no tiny parameters in {PARAMS_FILE.name}: add an entry "
            f'{{"{nb.stem}": {{...}}}} that runs in well under a minute (see the other entries)'
        )
    unknown = set(params) - set(notebook_parameters(nb))
    assert not unknown, f"{PARAMS_FILE.name}: {nb.stem} has no parameter(s) {sorted(unknown)}"
    return params


def has_interactive_code(nb: Path) -> bool:
    src = " ".join(
        c.get("source", "") if isinstance(c.get("source"), str) else "".join(c.get("source", []))
        for c in json.loads(nb.read_text())["cells"]
        if c["cell_type"] == "code"
    )
    return bool(re.search(r"ipywidgets|explorer\(|interact\(|FigureWidget", src))


def figure_signature(fig) -> dict:
    """What the user sees of a plotly figure: its title and the geometry of every trace drawn."""
    return fig.evaluate("""el => ({
        title: (el.querySelector('.gtitle') || {}).textContent || '',
        traces: Array.from(el.querySelectorAll('g.trace path, g.trace .point'))
                     .map(p => (p.getAttribute('d') || '').slice(0, 300)).join('|'),
        n_traces: el.querySelectorAll('g.trace').length,
    })""")


def wait_stable(page, probe, *, interval_ms: int = 250, polls: int = 3, timeout_s: float = 30):
    """Poll ``probe()`` until it returns the same value ``polls`` times in a row; returns that value.

    Polling instead of a fixed pause: a fast machine moves on as soon as the page has settled, a slow
    one waits as long as it needs (up to ``timeout_s``, then the last value is returned)."""
    last, same, t_end = probe(), 1, time.monotonic() + timeout_s
    while same < polls and time.monotonic() < t_end:
        page.wait_for_timeout(interval_ms)
        now = probe()
        same = same + 1 if now == last else 1
        last = now
    return last


def dom_state(page) -> dict:
    """What a settled page is judged by: outputs, figures, controls and widget errors on it."""
    return page.evaluate(f"""() => ({{outputs: document.querySelectorAll('.jp-OutputArea-output').length,
        figures: document.querySelectorAll('{FIG_SEL}').length,
        controls: document.querySelectorAll('{CONTROL_SEL}').length,
        broken: (document.body.innerText.match(/Error displaying widget/g) || []).length}})""")


def output_errors(scope) -> list[str]:
    """The text of every output that shows a Python error (traceback), last 1500 characters each."""
    return [t.strip()[-1500:] for t in scope.locator(ERROR_SEL).all_text_contents() if TRACEBACK.search(t)]


WIDGET_ERROR_SEL = ".jupyter-widgets-error-widget"  # a widget whose model or view failed in the front end


def widget_errors(page) -> list[str]:
    """The JavaScript error of every widget drawn as ipywidgets' error view ("Click to show javascript
    error."): each is clicked open and its message and stack read (first 1500 characters each)."""
    out = []
    boxes = page.locator(WIDGET_ERROR_SEL)
    for i in range(boxes.count()):
        box = boxes.nth(i)
        try:
            box.scroll_into_view_if_needed(timeout=5000)
            box.click(timeout=5000)
            page.wait_for_timeout(200)
        except Exception as e:  # the text before the click still says that a widget failed
            out.append(f"(could not open: {type(e).__name__}) {box.inner_text()[:300]}")
            continue
        out.append(box.inner_text().strip()[:1500])
    return out


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook tab in front


def lab_url(lab: dict, name: str) -> str:
    """The notebook in its own fresh workspace (no tabs restored from the previous test)."""
    ws = re.sub(r"\W", "-", name)
    return f"{lab['base']}/lab/workspaces/{ws}/tree/notebooks/{name}?reset&token={lab['token']}"


def shutdown_kernels(lab: dict, name: str) -> None:
    """Stop the kernel behind a notebook (JupyterLab keeps it running after the tab is gone)."""
    auth = {"Authorization": f"token {lab['token']}"}
    with urllib.request.urlopen(urllib.request.Request(f"{lab['base']}/api/sessions", headers=auth), timeout=10) as r:
        sessions = json.loads(r.read())
    for sess in sessions:
        if sess.get("path", "").endswith(name):
            req = urllib.request.Request(f"{lab['base']}/api/sessions/{sess['id']}", headers=auth, method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()


def open_and_run_all(page, url: str) -> None:
    """Open a notebook in JupyterLab, wait for its kernel, click Run > Run All Cells, see it start.

    The toolbar's idle indicator shows before the kernel is connected, and a Run All issued then is
    dropped silently; so wait for the status bar to say Idle, and click again if no cell starts.
    """
    page.goto(url)
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$")).wait_for(timeout=120_000)
    for _attempt in range(3):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).first.click()
        for _ in range(40):
            page.wait_for_timeout(500)
            if any(p != "[ ]:" for p in visible_prompts(page)):
                return
    raise AssertionError(f"Run All Cells started nothing after 3 clicks: prompts {visible_prompts(page)}")


def visible_prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        f"{PANEL} .jp-CodeCell .jp-InputArea-prompt", "els => els.map(e => e.textContent.trim())"
    )


def move_control(page, area, stem: str) -> str:
    """Move one slider (keyboard) or dropdown (select) inside ``area``; returns what was done."""
    want = CONTROL.get(stem)
    controls = area.locator(CONTROL_SEL)
    target = None
    if want:
        target = controls.filter(has=page.locator(".widget-label", has_text=want)).first
    elif area.locator(".widget-slider").count():
        target = area.locator(".widget-slider").first
    else:
        target = area.locator(".widget-dropdown").first
    label = (target.locator(".widget-label").first.text_content() or "").strip()
    if "widget-slider" in (target.get_attribute("class") or ""):
        readout = target.locator(".widget-readout")
        before = readout.text_content() if readout.count() else ""
        handle = target.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()

        def moved(t_max: float = 3.0) -> str:  # the readout, as soon as it changed (or after t_max s)
            t_end = time.monotonic() + t_max
            while True:
                now = readout.text_content() if readout.count() else ""
                if now != before or time.monotonic() > t_end:
                    return now
                page.wait_for_timeout(50)

        page.keyboard.press("ArrowRight")
        after = moved()
        if after == before:  # already at the maximum
            page.keyboard.press("ArrowLeft")
            page.keyboard.press("ArrowLeft")
            after = moved()
        assert after != before, f"slider {label!r} did not move with the keyboard ({before})"
        return f"slider {label!r}: {before.strip()} -> {after.strip()}"
    select = target.locator("select").first
    options = select.locator("option").all_text_contents()
    current = select.evaluate("s => s.options[s.selectedIndex].text")
    others = [o for o in options if o != current]
    assert others, f"dropdown {label!r} has a single option {options}"
    select.select_option(label=others[0])
    return f"dropdown {label!r}: {current} -> {others[0]}"


def interact_and_check(page, area, stem: str, kind: str, busy) -> dict:
    """Screenshot, move a control, wait for the figure to change, screenshot; returns a summary."""
    fig = area.locator(FIG_SEL).first
    fig.wait_for(state="visible", timeout=60_000)
    # plotly draws the axes first and the traces when the widget's state has arrived: on a loaded machine (two
    # test workers beside Chromium) that took over a second once, so wait for traces (30 s at most), then for calm
    t_draw = time.monotonic()
    while figure_signature(fig)["n_traces"] == 0 and time.monotonic() - t_draw < 30:
        page.wait_for_timeout(250)
    t_draw = time.monotonic() - t_draw
    before = wait_stable(page, lambda: figure_signature(fig), timeout_s=20)  # drawn and no longer changing
    area.scroll_into_view_if_needed()
    area.screenshot(path=str(ARTIFACTS / f"{kind}-{stem}-before.png"))
    assert before["n_traces"] > 0, f"{kind} {stem}: the figure is drawn empty before any interaction"
    # every slider has a track a hand can use and a label that is not cut (05's were about 30 px long)
    tracks = area.locator(".widget-slider .noUi-target").evaluate_all(
        "els => els.map(e => Math.round(e.getBoundingClientRect().width))"
    )
    cut = area.locator(".widget-slider .widget-label, .widget-dropdown .widget-label").evaluate_all(
        "els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"
    )
    assert not tracks or min(tracks) >= 100, f"{kind} {stem}: slider tracks {tracks} px (at least 100 px wanted)"
    assert not cut, f"{kind} {stem}: control labels cut short: {cut}"
    t0 = time.monotonic()
    action = move_control(page, area, stem)
    after, retried = before, False
    while time.monotonic() - t0 < UPDATE_TIMEOUT_S:
        page.wait_for_timeout(250)
        after = figure_signature(fig)
        if after != before and not busy():
            after = wait_stable(page, lambda: figure_signature(fig), timeout_s=30)  # plotly has finished the redraw
            break
        if not retried and time.monotonic() - t0 > RETRY_AFTER_S:
            # once, as a user would: the front end can lose a widget message on a loaded machine (seen once in
            # Voila beside the vLLM tests); a broken explorer does not redraw after the second move either
            action += f"; no redraw after {RETRY_AFTER_S} s, moved again: {move_control(page, area, stem)}"
            retried = True
    seconds = time.monotonic() - t0
    area.screenshot(path=str(ARTIFACTS / f"{kind}-{stem}-after.png"))
    assert after != before, (
        f"{kind} {stem}: the figure did not change within {UPDATE_TIMEOUT_S} s after "
        f"{action}; title stayed {before['title']!r}"
    )
    assert after["n_traces"] > 0, f"{kind} {stem}: the figure is empty after {action}"
    return {
        "action": action,
        "traces_drawn_s": round(t_draw, 1),
        "slider_tracks_px": tracks,
        "retried": retried,
        "title_before": before["title"],
        "title_after": after["title"],
        "title_changed": before["title"] != after["title"],
        "update_s": round(seconds, 1),
    }


def beside_notebooks(nb_dir: Path) -> set[str]:
    """Every file under the notebooks folder, but JupyterLab's own checkpoints."""
    return {
        str(p.relative_to(nb_dir)) for p in nb_dir.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts
    }


def reload_saved(page, stem: str, saved: Path) -> float:
    """Save the notebook (Ctrl+S), reload the page, wait until its outputs are drawn again; seconds waited.

    Saved: the file ``saved`` on disk changed and no tab is marked unsaved. Drawn again: a figure is
    back and the page has not changed for 3 s."""
    mtime = saved.stat().st_mtime_ns
    t0 = time.monotonic()
    page.locator(f"{PANEL} .jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')", timeout=60_000)
    deadline = time.monotonic() + 60
    while saved.stat().st_mtime_ns == mtime and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert saved.stat().st_mtime_ns != mtime, f"{stem}: Ctrl+S did not write {saved.name} within 60 s"
    page.reload()
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$")).wait_for(timeout=120_000)
    page.locator(f"{PANEL} {FIG_SEL}").first.wait_for(timeout=60_000)  # outputs are being drawn again
    # the explorers' widget views restore (or fail to) asynchronously: wait until nothing changed for 3 s
    wait_stable(page, lambda: dom_state(page), interval_ms=250, polls=12, timeout_s=60)
    page.screenshot(path=str(ARTIFACTS / f"lab-{stem}-reloaded.png"), full_page=True)
    return time.monotonic() - t0


def progress_lines(scope) -> list[str]:
    """The finished progress lines (``✓ …``) shown as plain output text."""
    texts = scope.locator(".jp-OutputArea-output pre").all_text_contents()
    return [t.strip()[:160] for t in texts if t.strip().startswith(("✓", "✗"))]


def record(kind: str, stem: str, summary: dict) -> None:
    """Add one test's summary to ``summary.json`` (under a lock: the JupyterLab and Voila tests may run in two
    pytest-xdist workers at once)."""
    path = ARTIFACTS / "summary.json"
    with open(ARTIFACTS / "summary.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[f"{kind}/{stem}"] = summary
        path.write_text(json.dumps(data, indent=1) + "\n")


# ---------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield b
        b.close()


# Known, harmless: jupyterlab-plotly's renderer for fig.show() caches a PNG of each figure into the
# output model with model.setData(), which Voila's read-only output model lacks; the figure itself is
# drawn before that (the screenshots show it).
KNOWN_PAGE_ERRORS = [re.compile(r"setData is not a function[\s\S]*jupyterlab-plotly")]


def new_page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.problems = []

    def on_error(e):
        text = f"{e} {(e.stack or '')[:600]}"
        if not any(k.search(text) for k in KNOWN_PAGE_ERRORS):
            page.problems.append(text)

    page.on("pageerror", on_error)
    return page


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on loopback with a token, over copies of the notebooks with tiny parameters."""
    root = tmp_path_factory.mktemp("lab")
    for nb in NOTEBOOKS:
        parameterised_copy(nb, root / "notebooks" / nb.name)
    cfg = root / ".jupyter"
    settings = cfg / "lab" / "user-settings" / "@jupyterlab"
    # render every cell (no virtual scrolling: the DOM holds all outputs); no news or update pop-ups
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    token = secrets.token_hex(16)
    port = free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(cfg),
        JUPYTERLAB_SETTINGS_DIR=str(cfg / "lab" / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(cfg / "lab" / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(cfg / "runtime"),
        ASRSCHED_ROOT=str(root),
        PYTHONUNBUFFERED="1",
    )
    for k in ("ASRSCHED_FIGURES", "ASRSCHED_RUNS", "ASRSCHED_PROGRESS"):  # as a user starts it: nothing set
        env.pop(k, None)
    env.update(STATIC_EXPORT_OFF)
    log = root / "jupyterlab.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
            ],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/status?token={token}", proc, log)
        assert http_status(f"{base}/api/status") == 403, "JupyterLab answered without the token"
        yield {"base": base, "token": token, "root": root}
    finally:
        stop(proc)
        shutil.copy(log, ARTIFACTS / "jupyterlab.log") if ARTIFACTS.exists() else None


# ------------------------------------------------------------------------------------------- tests
@pytest.mark.allow_skip(reason="a notebook without an interactive control has nothing to drive")
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_in_jupyterlab(nb, lab, browser):
    needs_params_and_controls(nb)
    page = new_page(browser)
    nb_dir = lab["root"] / "notebooks"
    files_before = beside_notebooks(nb_dir)
    t0 = time.monotonic()
    try:
        open_and_run_all(page, lab_url(lab, nb.name))
        indicator = f"{PANEL} .jp-Notebook-ExecutionIndicator"

        def busy():
            return page.get_attribute(indicator, "data-status") != "idle"

        done, last = 0, []
        while time.monotonic() - t0 < RUN_TIMEOUT_S:
            page.wait_for_timeout(500)
            last = visible_prompts(page)
            if output_errors(page):
                break  # Run All stops at the first error
            ok = bool(last) and all(re.fullmatch(r"\[\d+\]:", p) for p in last) and not busy()
            done = done + 1 if ok else 0
            if done >= 3:  # every cell numbered and the kernel idle for a second
                break
        run_s = time.monotonic() - t0
        page.screenshot(path=str(ARTIFACTS / f"lab-{nb.stem}-run.png"))
        errors = output_errors(page)
        assert not errors, f"{nb.stem}: error output in the browser:\n" + "\n---\n".join(errors)
        assert done >= 3, f"{nb.stem}: Run All did not finish in {RUN_TIMEOUT_S} s; prompts {last}"
        broken = page.get_by_text("Error displaying widget").count()
        assert not broken, f"{nb.stem}: {broken} widget(s) read 'Error displaying widget'"
        cells = (
            page.locator(f"{PANEL} .jp-CodeCell")
            .filter(has=page.locator(FIG_SEL))
            .filter(has=page.locator(CONTROL_SEL))
        )
        assert cells.count() >= 1, (
            f"{nb.stem}: no output holds both a control and a plotly figure (the widgets did not render)"
        )
        # the simulation notebooks print warnings and progress as plain lines: no stderr box (the red block)
        boxes = [t.strip()[:300] for t in page.locator(f"{PANEL} {STDERR_SEL}").all_text_contents() if t.strip()]
        assert not boxes or nb.stem not in NO_STDERR, (
            f"{nb.stem}: JupyterLab shows {len(boxes)} stderr box(es): {boxes}"
        )
        area = cells.last.locator(".jp-Cell-outputArea")
        summary = interact_and_check(page, area, nb.stem, "lab", busy)
        assert not output_errors(page), f"{nb.stem}: error after moving the control: {output_errors(page)}"
        assert not page.problems, f"{nb.stem}: JavaScript errors in the page: {page.problems}"
        # outputs: nothing new beside the notebook, a run folder with run.json under runs/
        new = beside_notebooks(nb_dir) - files_before
        assert not new, f"{nb.stem}: Run All wrote beside the notebook: {sorted(new)}"
        records = sorted((lab["root"] / "runs" / nb.stem).glob("*/run.json"))
        assert records, f"{nb.stem}: no runs/{nb.stem}/<run>/run.json after Run All"
        rec = json.loads(records[-1].read_text())
        assert all(rec["parameters"].get(k) == v for k, v in PARAMS[nb.stem].items()), rec["parameters"]
        line = page.locator(f"{PANEL} .jp-CodeCell").filter(has=page.get_by_text(re.compile(r"^✓ exported to")))
        if line.count():  # what an export cell shows when it is done
            line.first.scroll_into_view_if_needed()
            line.first.screenshot(path=str(ARTIFACTS / f"lab-{nb.stem}-export-line.png"))
        # save, reload: finished progress bars are text, no view of a closed widget model
        reload_s = reload_saved(page, nb.stem, nb_dir / nb.name)
        broken = page.locator(f"{PANEL} .jp-CodeCell").filter(has=page.get_by_text("Error displaying widget"))
        where = [(c.locator(".jp-InputArea-editor").first.text_content() or "")[:120] for c in broken.all()]
        if where:
            broken.first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"lab-{nb.stem}-reloaded-broken.png"))
        assert not where, f"{nb.stem}: after a reload, outputs of these cells read 'Error displaying widget': {where}"
        summary.update(
            run_all_s=round(run_s, 1),
            total_s=round(time.monotonic() - t0, 1),
            reload_s=round(reload_s, 1),
            params=PARAMS[nb.stem],
            run_folder=str(records[-1].parent.relative_to(lab["root"])),
            progress_lines=progress_lines(page),
        )
        record("lab", nb.stem, summary)
    finally:
        page.close()
        shutdown_kernels(lab, nb.name)


VOILA = NOTEBOOKS


@pytest.mark.allow_skip(reason="a notebook without an interactive control has nothing to drive")
@pytest.mark.parametrize("nb", VOILA, ids=[nb.stem for nb in VOILA])
def test_dashboard_in_voila(nb, browser, tmp_path):
    needs_params_and_controls(nb)
    port, token = free_port(), secrets.token_hex(16)
    log = tmp_path / "voila.log"
    # the run's own runs/ (a relative OUT_DIR lands there, never resuming an earlier run's measurements); a
    # notebook whose outputs are checked exports every format (tests/notebook_checks.py), the others HTML only
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        ASRSCHED_RUNS=str(tmp_path / "runs"),
        **({} if nb.stem in CHECKS else STATIC_EXPORT_OFF),
    )
    extra = [a for k, v in EXTRA_PARAMS.get(nb.stem, lambda _: {})(tmp_path).items() for a in ("-p", k, repr(v))]
    with open(log, "w") as fh:  # the documented command, as a user types it
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asrsched.app.cli",
                "dashboard",
                nb.stem[:2],
                "--small",
                "--port",
                str(port),
                "--token",
                token,
                "--no-browser",
                "--out-dir",
                str(tmp_path / "dash"),
                "--figures",
                str(tmp_path / "figures"),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    page = new_page(browser)
    t0 = time.monotonic()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/login", proc, log)  # the page itself would start a kernel
        assert http_status(f"{base}/") in (302, 403), "the dashboard answered without the token"
        page.goto(f"{base}/?token={token}", timeout=RUN_TIMEOUT_S * 1000, wait_until="commit")
        # Voila streams the outputs while it runs the notebook; it is done when its spinner is gone
        # and the last output holding a figure next to a control is on the page (or, when a widget
        # failed in the front end, its error view: it will not draw later).
        deadline = t0 + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            if output_errors(page):
                break
            loading = page.evaluate(
                "() => !!document.querySelector('#loading') && "
                "getComputedStyle(document.querySelector('#loading')).display !== 'none'"
            )
            ready = (
                page.locator(".jp-OutputArea")
                .filter(has=page.locator(FIG_SEL))
                .filter(has=page.locator(CONTROL_SEL))
                .count()
            )
            if not loading and ready and page.evaluate("document.readyState") == "complete":
                break
            if not loading and page.locator(WIDGET_ERROR_SEL).count():
                break
        run_s = time.monotonic() - t0
        wait_stable(page, lambda: dom_state(page), timeout_s=20)
        page.screenshot(path=str(ARTIFACTS / f"voila-{nb.stem}-run.png"), full_page=True)
        errors = output_errors(page)
        assert not errors, f"{nb.stem}: error output in the dashboard:\n" + "\n---\n".join(errors)
        broken = page.get_by_text("Error displaying widget").count()
        assert not broken, f"{nb.stem}: {broken} widget(s) in the dashboard read 'Error displaying widget'"
        failed = widget_errors(page)
        assert not failed, (
            f"{nb.stem}: widget(s) failed in the dashboard's front end:\n"
            + "\n---\n".join(failed)
            + (f"\npage errors: {page.problems}")
        )
        # progress and warnings are plain lines: no stderr box (the red block) anywhere on the page
        boxes = [t.strip()[:300] for t in page.locator(STDERR_SEL).all_text_contents() if t.strip()]
        assert not boxes or nb.stem not in NO_STDERR, (
            f"{nb.stem}: the dashboard shows {len(boxes)} stderr box(es): {boxes}"
        )
        areas = page.locator(".jp-OutputArea").filter(has=page.locator(FIG_SEL)).filter(has=page.locator(CONTROL_SEL))
        if not areas.count():  # say what the page did show, and what Voila logged, so a timeout can be read
            state = page.evaluate(
                "() => ({loading: !!document.querySelector('#loading') && getComputedStyle("
                "document.querySelector('#loading')).display !== 'none', state: document.readyState, "
                "outputs: document.querySelectorAll('.jp-OutputArea').length, "
                f"figures: document.querySelectorAll('{FIG_SEL}').length, "
                f"controls: document.querySelectorAll('{CONTROL_SEL}').length, "
                "last: (Array.from(document.querySelectorAll('.jp-OutputArea')).pop() || {}).innerText})"
            )
            state["last"] = (state.get("last") or "")[-400:]
            pytest.fail(
                f"{nb.stem}: the dashboard shows no control next to a figure after {run_s:.0f} s "
                f"(alive={proc.poll() is None}); page: {state}; voila log tail:\n"
                + log.read_text(errors="replace")[-1500:]
            )
        # Voila has no kernel-status API: the figure's change (then a pause to settle) marks the update
        summary = interact_and_check(page, areas.last, nb.stem, "voila", lambda: False)
        assert not output_errors(page), f"{nb.stem}: error after moving the control: {output_errors(page)}"
        assert not page.problems, f"{nb.stem}: JavaScript errors in the dashboard: {page.problems}"
        # what the run made: its tables, figures in every format and printed findings, checked per notebook
        if nb.stem in CHECKS:
            outputs = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
            CHECKS[nb.stem](tmp_path / "figures" / nb.stem, tmp_path / "runs", tmp_path, outputs)
        summary.update(
            run_all_s=round(run_s, 1),
            total_s=round(time.monotonic() - t0, 1),
            progress_lines=progress_lines(page),
            outputs_checked=nb.stem in CHECKS,
        )
        record("voila", nb.stem, summary)
    finally:
        page.close()
        stop(proc)
        shutil.copy(log, ARTIFACTS / f"voila-{nb.stem}.log")


def test_error_in_a_cell_is_seen_in_the_browser(lab, browser):
    """The error check is not vacuous: a notebook that raises is caught by the same DOM query."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(
        cells=[
            new_code_cell(
                "import sys, warnings\nwarnings.warn('just a warning')\nprint('10%|#  | 1/10', file=sys.stderr)"
            ),
            new_code_cell("raise ValueError('rate must be > 0, got -1')"),
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab["root"] / "notebooks" / "zz_broken.ipynb")
    page = new_page(browser)
    try:
        open_and_run_all(page, lab_url(lab, "zz_broken.ipynb"))
        for _ in range(240):
            page.wait_for_timeout(250)
            if output_errors(page):
                break
        page.screenshot(path=str(ARTIFACTS / "lab-zz_broken-run.png"))
        errors = output_errors(page)
        assert len(errors) == 1 and "ValueError" in errors[0] and "rate must be > 0" in errors[0], errors
        assert visible_prompts(page)[1] == "[2]:"
        # a warning or a progress bar on stderr is not an error
        assert page.locator(STDERR_SEL).count() == 2, page.locator(STDERR_SEL).all_text_contents()
    finally:
        page.close()
        shutdown_kernels(lab, "zz_broken.ipynb")


def test_batch_executed_notebook_shows_a_plot_where_the_explorer_was(lab, browser):
    """``asrsched run 02 --small`` (papermill) writes an executed copy; opened later in JupyterLab (untrusted, as
    any notebook from elsewhere), the explorer's output is a plot (its static image), not ``VBox(children=...``
    as text and not a widget error; trusted, the panel comes back from the copy's saved widget state with its
    figure drawn (not "Loading widget..." for good)."""
    run_dir = lab["root"] / "executed"
    env = {k: v for k, v in os.environ.items() if k not in ("ASRSCHED_FIGURES", "ASRSCHED_PROGRESS")}
    cmd = [sys.executable, "-m", "asrsched.app.cli", "run", "02", "--small", "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, cwd=ROOT, env={**env, **STATIC_EXPORT_OFF}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    nb = json.loads((run_dir / "02_policy_sweep.ipynb").read_text())
    (cell,) = [c for c in nb["cells"] if c["cell_type"] == "code" and "policy_explorer(" in "".join(c["source"])]
    (out,) = [o for o in cell["outputs"] if o["output_type"] == "execute_result"]
    assert {"image/png", "application/vnd.jupyter.widget-view+json", "text/plain"} <= set(out["data"]), out["data"]
    states = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()
    figures = [s["state"] for s in states if s["state"].get("_widget_data") is not None]
    # the policy explorer's figure (FCFS and the chosen policy) and the frontier explorer's, both saved non-empty
    assert figures and all(f["_widget_data"] for f in figures), "a saved FigureWidget state is empty"
    assert any(len(f["_widget_data"]) == 2 for f in figures), [len(f["_widget_data"]) for f in figures]
    page = new_page(browser)
    try:
        url = f"{lab['base']}/lab/workspaces/executed/tree/executed/02_policy_sweep.ipynb?reset&token={lab['token']}"
        page.goto(url)
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
        area = (
            page.locator(f"{PANEL} .jp-CodeCell")
            .filter(has=page.locator(".jp-InputArea-editor", has_text="policy_explorer("))
            .last.locator(".jp-Cell-outputArea")
        )
        plot = area.locator("img, .js-plotly-plot .main-svg").first
        plot.wait_for(state="visible", timeout=60_000)
        area.scroll_into_view_if_needed()
        area.screenshot(path=str(ARTIFACTS / "lab-02_policy_sweep-executed-explorer.png"))
        box = plot.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 150, f"the explorer's plot is drawn at {box}"
        text = area.inner_text()
        assert "VBox(children" not in text and "Error displaying widget" not in text, text[:300]
        # trusted: the widget view, restored from metadata.widgets, with the explorer's two CDFs
        page.locator(f"{PANEL} .jp-Notebook").first.click()
        page.keyboard.press("Control+Shift+C")
        page.keyboard.type("Trust Notebook")
        page.keyboard.press("Enter")
        page.locator(".jp-Dialog button", has_text=re.compile(r"^Trust$")).click()
        traces = area.locator(".js-plotly-plot g.trace")
        traces.first.wait_for(timeout=60_000)
        area.scroll_into_view_if_needed()
        area.screenshot(path=str(ARTIFACTS / "lab-02_policy_sweep-executed-explorer-trusted.png"))
        assert traces.count() == 2 and area.locator(CONTROL_SEL).count() >= 4, area.inner_text()[:300]
        assert not widget_errors(page) and "Loading widget" not in area.inner_text()
    finally:
        page.close()
        shutdown_kernels(lab, "02_policy_sweep.ipynb")
