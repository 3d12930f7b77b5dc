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

import os

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and not hasattr(rep, "wasxfail") and not _allowed(_reason(rep.longrepr))
            and item.get_closest_marker("allow_skip") is None):
        rep.outcome = "failed"
        rep.longrepr = _message(f"test {item.nodeid}", _reason(rep.longrepr))


_SKIPPED_MODULES: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module that skips as a whole (``importorskip`` at import) is recorded; the session then fails.

    Turning the collection report itself into an error would abort the whole run before any test
    ran; this way every other test still runs, and the exit status and summary name the module.
    """
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not _allowed(_reason(rep.longrepr)):
        _SKIPPED_MODULES.append(_message(f"module {collector.nodeid}", _reason(rep.longrepr)))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for line in _SKIPPED_MODULES:
        terminalreporter.write_line(f"FAILED (skip not allowed): {line}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    if _SKIPPED_MODULES and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
