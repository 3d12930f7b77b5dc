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

import fcntl
import os
import tempfile
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
    return (f"{what} skipped ({reason}), and skips fail in this suite: install what it needs "
            f"(pip install -e '.[dev,vllm,notebooks,whisper,serve,dashboard]', Debian chromium), set {ALLOW_ENV}=1 "
            f"for a partial install, or mark a skip that is legitimate everywhere with @pytest.mark.allow_skip")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"allow_skip(reason): this test may skip (e.g. needs a GPU); other skips fail unless {ALLOW_ENV}=1")
    config.addinivalue_line("markers", "exclusive: runs with no other test beside it under pytest-xdist")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and not hasattr(rep, "wasxfail") and not _allowed(_reason(rep.longrepr))
            and item.get_closest_marker("allow_skip") is None):
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
#   venv, a vLLM engine) starts once. (``--dist loadgroup`` would allow finer units, but its
#   ``xdist_group`` marks do not group under pytest 9 with pytest-xdist 3.8: tried, they spread.)
# * Order: modules with an ``exclusive`` test first, then modules with a slow test, then the rest (each
#   in collection order, a module's tests together), so that the long units start early and the two
#   workers finish together.
# * ``@pytest.mark.exclusive``: a test whose assertions depend on the machine's speed (a fit to a
#   real engine's step times) runs with no other test beside it. A file lock shared by the workers
#   of one run: an exclusive test holds it alone, every other test holds it shared; a waiting
#   exclusive test stops new tests from starting (the gate) until the running ones are done.
#   Without xdist nothing is locked.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[str, tuple[bool, bool, int]] = {}
    for i, it in enumerate(items):
        m = it.nodeid.split("::")[0]
        ex, slow = it.get_closest_marker("exclusive") is None, it.get_closest_marker("slow") is None
        r = rank.get(m, (True, True, i))
        rank[m] = (r[0] and ex, r[1] and slow, r[2])
    items.sort(key=lambda it: rank[it.nodeid.split("::")[0]])


def _lock_files() -> tuple[Path, Path] | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return None
    base = Path(tempfile.gettempdir()) / f"asrsched-tests-{run}"
    return base.with_suffix(".gate"), base.with_suffix(".room")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    paths = _lock_files()
    if paths is None:
        yield
        return
    exclusive = item.get_closest_marker("exclusive") is not None
    with open(paths[0], "a") as gate, open(paths[1], "a") as room:
        if exclusive:
            fcntl.flock(gate, fcntl.LOCK_EX)  # no new test starts ...
            fcntl.flock(room, fcntl.LOCK_EX)  # ... and the running ones finish
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(room, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
