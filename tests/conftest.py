"""Suite-wide rule: a skipped test is a failure unless skipping was allowed.

A test that skips because an extra, a browser or a model is missing would otherwise pass
silently, and CI would report green without having run it. So every skip -- a ``skipif``
marker, ``pytest.skip``, ``pytest.importorskip``, at collection or at run time -- is turned
into a failure that names the reason, unless

* the skip is for a missing extra (:func:`extras.need`: the quick subset on the base install)
  and the environment does not set ``ASRSCHED_ALL_EXTRAS=1`` (``scripts/test.sh``, the full suite
  CI runs, installs every extra and sets it: there a missing extra fails), or
* the environment sets ``ASRSCHED_ALLOW_SKIP=1`` (any partial install on purpose), or
* the test carries ``@pytest.mark.allow_skip(reason=...)``: a skip that is legitimate in every
  complete install (a GPU-only test on a CPU machine, a parametrisation that does not apply).

Expected failures (``xfail``) are not skips and are left alone. See CONTRIBUTING.md, *Tests*.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest
from extras import PREFIX

ALLOW_ENV = "ASRSCHED_ALLOW_SKIP"
ALL_EXTRAS_ENV = "ASRSCHED_ALL_EXTRAS"


def skips_allowed() -> bool:
    """Whether ``ASRSCHED_ALLOW_SKIP=1`` is set."""
    return os.environ.get(ALLOW_ENV, "").strip() == "1"


def _allowed(reason: str) -> bool:
    """Whether a skip with this reason passes without a marker: any skip under ``ASRSCHED_ALLOW_SKIP=1``, a
    missing extra unless ``ASRSCHED_ALL_EXTRAS=1``."""
    if skips_allowed():
        return True
    return reason.startswith(PREFIX) and os.environ.get(ALL_EXTRAS_ENV, "").strip() != "1"


def _reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _message(what: str, reason: str) -> str:
    return (
        f"{what} skipped ({reason}), and skips fail in this suite: install what it needs "
        f"(pip install -e '.[dev,vllm,notebooks,whisper,serve,dashboard]', Debian chromium), set {ALLOW_ENV}=1 "
        f"for a partial install, or mark a skip that is legitimate everywhere with @pytest.mark.allow_skip"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"allow_skip(reason): this test may skip (e.g. needs a GPU); other skips fail unless {ALLOW_ENV}=1"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    if (
        rep.skipped
        and not hasattr(rep, "wasxfail")
        and not _allowed(_reason(rep.longrepr))
        and item.get_closest_marker("allow_skip") is None
    ):
        rep.outcome = "failed"
        rep.longrepr = _message(f"test {item.nodeid}", _reason(rep.longrepr))


_SKIPPED_MODULES: list[str] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that skips as a whole (``importorskip`` at import) is recorded; the session then fails.

    Turning the collection report itself into an error would abort the whole run before any test
    ran; this way every other test still runs, and the exit status and summary name the module.
    Under pytest-xdist this hook also runs in the controlling process, which receives every skipped
    collection report from its workers, so the rule holds with ``-n`` too.
    """
    if report.skipped and not _allowed(_reason(report.longrepr)):
        _SKIPPED_MODULES.append(_message(f"module {report.nodeid}", _reason(report.longrepr)))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for line in _SKIPPED_MODULES:
        terminalreporter.write_line(f"FAILED (skip not allowed): {line}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    if _SKIPPED_MODULES and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------------------------------------------------------
# Parallel runs (pytest-xdist; scripts/test.sh runs ``-n 2 --dist loadfile --no-loadscope-reorder``)
#
# * A module's tests run on one worker (``loadfile``), so a module fixture (a real server, a fresh
#   venv, a vLLM engine) starts once.
# * The vLLM group: every module with a test marked ``vllm`` (a real vLLM engine) is one unit of work,
#   so those modules run on one worker, one after another, while the other worker runs the rest. Two
#   vLLM engines on two cores slow each other by far more than anything else does (their OpenMP threads
#   spin): a step-time fit read a median error of 18 % beside a second engine, 3-4 % beside a browser
#   test or a busy loop. (xdist's own ``--dist loadgroup`` would need ``xdist_group`` marks, which a
#   module's ``pytestmark`` does not carry to the scheduler under pytest 9 with pytest-xdist 3.8:
#   tried, they spread.)
# * Order: the vLLM group first (the longest unit), then modules with a slow test, then the rest (each
#   in collection order, a module's tests together), so that the long units start early and the two
#   workers finish together.
VLLM_GROUP = "vllm-engines"


@functools.cache
def uses_vllm(path: Path) -> bool:
    """Whether the test file at ``path`` marks a test ``vllm`` (read as text: the controller collects nothing)."""
    try:
        return "pytest.mark.vllm" in path.read_text()
    except OSError:
        return False


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, with the vLLM group's files as one unit of work (see above)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class VllmGroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return VLLM_GROUP if uses_vllm(config.rootpath / path) else path

    return VllmGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[str, tuple[bool, bool, int]] = {}
    for i, it in enumerate(items):
        m = it.nodeid.split("::")[0]
        vllm, slow = it.get_closest_marker("vllm") is None, it.get_closest_marker("slow") is None
        r = rank.get(m, (True, True, i))
        rank[m] = (r[0] and vllm, r[1] and slow, r[2])
    items.sort(key=lambda it: rank[it.nodeid.split("::")[0]])


# ------------------------------------------------------------------------------------------------
# Where the time goes: ``ASRSCHED_TEST_TIMELINE=path.jsonl`` appends one line per test (worker, test,
# start and end on the wall clock, outcome); every worker appends to the same file.
TIMELINE_ENV = "ASRSCHED_TEST_TIMELINE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    path = os.environ.get(TIMELINE_ENV, "").strip()
    t0 = time.time()
    yield
    if path:
        line = {
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "test": item.nodeid,
            "start": t0,
            "end": time.time(),
        }
        with open(path, "a") as fh:  # one short write per line: appends from two processes do not interleave
            fh.write(json.dumps(line) + "\n")
