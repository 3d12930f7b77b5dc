"""Result caches are keyed by the code that computed them: no stale cache is ever read back.

* :func:`asrsched.sim.cache.code_key` follows the imports: a module's key covers every
  ``asrsched`` module it imports, and nothing else;
* on a real copy of the package (in ``tmp_path``, imported in a subprocess) an unchanged copy
  has the same key and an edit to ``core/policies.py`` changes it;
* end to end: the sweep cache, the A/B study cache and the ASR fleet cache hit when the code
  is unchanged and miss when the source of a module in their closure changes (the source
  bytes are changed through :func:`asrsched.sim.cache.source_bytes`, never on disk).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from asrsched.sim import cache
from asrsched.sim.parallel import run_study

ROOT = Path(__file__).resolve().parents[2]


class Recomputed(Exception):
    """Raised by a stand-in for a task function: the cache missed."""


@pytest.fixture(autouse=True)
def _fresh_memo():
    cache.clear_memo()
    yield
    cache.clear_memo()  # never leave digests of edited bytes behind for other tests


class Sources:
    """The package's source as :func:`asrsched.sim.cache.code_key` reads it, frozen and editable in memory.

    Each file is read once and kept (so a file saved on disk during the test, e.g. by a concurrent
    editor, does not change the keys: the running code is what was imported); :meth:`edit` makes one
    file read as if edited, :meth:`reset` drops the edits. Nothing on disk changes.
    """

    def __init__(self, monkeypatch):
        self._real = cache.source_bytes
        self._snap: dict[Path, bytes] = {}
        self._edits: dict[Path, bytes] = {}
        monkeypatch.setattr(cache, "source_bytes", self._read)
        cache.clear_memo()

    def _read(self, path) -> bytes:
        p = Path(path).resolve()
        if p not in self._snap:
            self._snap[p] = self._real(p)
        return self._snap[p] + self._edits.get(p, b"")

    def edit(self, relpath: str, extra: bytes = b"\n# an edit: the result may differ now\n") -> None:
        target = (ROOT / "asrsched" / relpath).resolve()
        assert target.is_file()
        self._edits = {target: extra}  # one edit at a time
        cache.clear_memo()

    def reset(self) -> None:
        self._edits = {}
        cache.clear_memo()


@pytest.fixture
def sources(monkeypatch):
    return Sources(monkeypatch)


# ----------------------------------------------------------------------------- code_key itself


def test_closure_follows_imports_and_only_them():
    sweep = cache.module_closure("asrsched.sim.sweep")
    for m in (
        "asrsched.sim.engine",
        "asrsched.sim.kernel",
        "asrsched.core.rulebook",
        "asrsched.core.policies",
        "asrsched.core.service",
        "asrsched.core.workloads",
        "asrsched",
        "asrsched.sim",
    ):
        assert m in sweep, m
    assert not any(m.startswith(("asrsched.figures", "asrsched.abtest", "asrsched.app")) for m in sweep)
    study = cache.module_closure("asrsched.abtest.study")
    assert "asrsched.abtest.model" in study and "asrsched.core.policies" not in study
    fleet = cache.module_closure("asrsched.abtest.asr_fleet")
    assert {"asrsched.core.policies", "asrsched.sim.fleet", "asrsched.abtest.estimators"} <= set(fleet)
    assert "asrsched.abtest.study" not in fleet  # the other study's code is not in this one's key


def test_code_key_changes_with_the_source_and_only_with_relevant_sources(sources):
    keys = {m: cache.code_key(m) for m in ("asrsched.sim.sweep", "asrsched.abtest.study", "asrsched.abtest.asr_fleet")}
    assert cache.code_key("asrsched.sim.sweep") == keys["asrsched.sim.sweep"]  # deterministic
    sources.edit("core/policies.py")
    assert cache.code_key("asrsched.sim.sweep") != keys["asrsched.sim.sweep"]
    assert cache.code_key("asrsched.abtest.asr_fleet") != keys["asrsched.abtest.asr_fleet"]
    assert cache.code_key("asrsched.abtest.study") == keys["asrsched.abtest.study"]  # does not run policies
    sources.reset()
    assert cache.code_key("asrsched.sim.sweep") == keys["asrsched.sim.sweep"]  # edit undone, key back


def test_cache_key_combines_code_params_and_seed():
    k = cache.cache_key({"rate": 4.0, "seed": 1}, code="c1")
    assert k == cache.cache_key({"seed": 1, "rate": 4.0}, code="c1")
    assert k != cache.cache_key({"rate": 4.0, "seed": 2}, code="c1")
    assert k != cache.cache_key({"rate": 4.0, "seed": 1}, code="c2")
    assert cache.cache_key({"x": 1}, modules=["asrsched.sim.sweep"]) == cache.cache_key(
        {"x": 1}, code=cache.code_key("asrsched.sim.sweep")
    )


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="no Python source file for module 'asrsched.nope'"):
        cache.code_key("asrsched.nope")
    with pytest.raises(ValueError, match="at least one module"):
        cache.code_key()
    with pytest.raises(ValueError, match="code= .* or modules="):
        cache.cache_key({"x": 1})
    with pytest.raises(TypeError, match="module objects or dotted module names"):
        cache.code_key(3)


_KEY_SCRIPT = """
import json, sys
import asrsched.sim.cache as c
assert c.__file__.startswith(sys.argv[1]), c.__file__
print(json.dumps({m: c.code_key(m) for m in ("asrsched.sim.sweep", "asrsched.abtest.study")}))
"""


def _keys_of_copy(pkg_parent: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(pkg_parent), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run(
        [sys.executable, "-c", _KEY_SCRIPT, str(pkg_parent)],
        env=env,
        cwd=pkg_parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_copy_of_the_package_has_the_same_keys_until_a_policy_changes(tmp_path):
    """Keys depend on contents, not on where the package lives; editing a policy's code on disk changes them."""
    dst = tmp_path / "asrsched"
    shutil.copytree(ROOT / "asrsched", dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.ipynb"))
    here = {m: cache.code_key(m) for m in ("asrsched.sim.sweep", "asrsched.abtest.study")}
    assert _keys_of_copy(tmp_path) == here
    pol = dst / "core" / "policies.py"
    src = pol.read_text()
    old = '        return ("hrrn" if ratio > self.ratio_cap else "sjf"), b'
    assert old in src
    pol.write_text(
        src.replace(old, '        return ("hrrn" if ratio >= self.ratio_cap else "sjf"), b')
    )  # the adaptive rule
    edited = _keys_of_copy(tmp_path)
    assert edited["asrsched.sim.sweep"] != here["asrsched.sim.sweep"]
    assert edited["asrsched.abtest.study"] == here["asrsched.abtest.study"]


# ----------------------------------------------------------------------------- the three caches, end to end


def test_sweep_cache_hits_on_same_code_and_misses_after_a_policy_edit(tmp_path, monkeypatch, sources):
    from asrsched.sim import sweep

    computed = []
    real = sweep.run_point

    def counting(**task):
        computed.append(task["policy"])
        return real(**task)

    monkeypatch.setattr(sweep, "run_point", counting)
    kw = dict(
        rates=[3.0],
        policies=["fcfs", "hrrn"],
        workloads=["uniform"],
        seeds=[0, 1],
        n_requests=150,
        cache_dir=tmp_path,
        workers=1,
        progress=False,
    )
    a = sweep.run_sweep(**kw)
    assert len(computed) == 4 and len(list(tmp_path.glob("*.parquet"))) == 4
    b = sweep.run_sweep(**kw)  # same code, same parameters: every point from the cache
    assert len(computed) == 4
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    sources.edit("core/policies.py")
    sweep.run_sweep(**kw)  # the policy code changed: every point recomputed, under new keys
    assert len(computed) == 8 and len(list(tmp_path.glob("*.parquet"))) == 8
    sources.edit("figures/sim.py")  # the real policies.py again; an edit to a module the sweep does not import
    sweep.run_sweep(**kw)
    assert len(computed) == 8  # hits the first run's files again


def _tiny_study():
    from asrsched.abtest.model import SystemConfig
    from asrsched.abtest.study import StudyConfig

    base = SystemConfig(
        n_servers=6, lam=0.8, control="random", treatment="pod2", n_requests=20_000, warmup_requests=2_000
    )
    return StudyConfig(
        base=base,
        scenarios=("homogeneous",),
        reps=2,
        L_factors=(1.0,),
        alpha_batches=20,
        sb_blocks=(20.0,),
        block_len=40.0,
        burn_in=10.0,
        truth_requests=20_000,
        truth_seeds=1,
        slope_h=0.1,
        seed=3,
    )


def _stand_in(name: str):
    def fn(**task):
        raise Recomputed(name)

    fn.__name__ = name  # the study names cache files after the task function
    return fn


def test_ab_study_cache_hits_on_same_code_and_misses_after_a_model_edit(tmp_path, monkeypatch, sources):
    from asrsched.abtest import study as S

    sc = _tiny_study()
    a = run_study(sc, workers=1, progress=False, cache_dir=tmp_path)
    n_files = len(list(tmp_path.glob("*.json")))
    assert n_files == 2 + 4  # 2 replications + 4 truth runs
    monkeypatch.setattr(S, "run_truth", _stand_in("run_truth"))
    monkeypatch.setattr(S, "run_replication", _stand_in("run_replication"))
    b = run_study(sc, workers=1, progress=False, cache_dir=tmp_path)  # all hits: the stand-ins never run
    pd.testing.assert_frame_equal(a.estimates, b.estimates)
    sources.edit("core/policies.py")  # not imported by the study: still hits
    run_study(sc, workers=1, progress=False, cache_dir=tmp_path)
    sources.edit("abtest/model.py")  # the queueing model the study simulates: misses
    with pytest.raises(Recomputed):
        run_study(sc, workers=1, progress=False, cache_dir=tmp_path)


def test_asr_fleet_cache_hits_on_same_code_and_misses_after_a_policy_edit(tmp_path, monkeypatch, sources):
    from study_params import TINY_ASR_STUDY

    from asrsched.abtest import asr_fleet as A

    cfg = A.ASRStudyConfig(
        **dict(TINY_ASR_STUDY, reps=2, scheduling_designs=("replica",), routing_designs=("bernoulli",))
    )
    a = run_study(cfg, workers=1, progress=False, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) > 0
    monkeypatch.setattr(A, "_dispatch", lambda **k: (_ for _ in ()).throw(Recomputed("fleet")))
    b = run_study(cfg, workers=1, progress=False, cache_dir=tmp_path)  # all hits
    pd.testing.assert_frame_equal(a.estimates, b.estimates)
    sources.edit("core/policies.py")  # the replicas' scheduling policies: misses
    with pytest.raises(Recomputed):
        run_study(cfg, workers=1, progress=False, cache_dir=tmp_path)


# ----------------------------------------------------------------------------- numba's on-disk cache

TOY_A = "from numba import njit\n\n\n@njit(inline='always')\ndef f():\n    return {value}\n"
TOY_B = """import hashlib, os, pathlib
from numba import njit
from toy.a import f
from asrsched.sim.cache import guard_numba_cache


@njit(cache=True)
def g():
    return f()


if os.environ.get("GUARD") == "1":  # keyed by the inlined module's source, as the kernels are by code_key
    guard_numba_cache(g, key=hashlib.sha256(pathlib.Path(__file__).with_name("a.py").read_bytes()).hexdigest())
print(g())
"""


def test_a_cached_kernel_follows_a_change_of_the_module_it_inlines_only_when_guarded(tmp_path):
    """numba keys a cached function by its own bytecode: an inlined helper edited in another module leaves
    the cached machine code stale (the first pair of runs shows it); the guard recompiles it."""
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "b.py").write_text(TOY_B)

    def run(value, guard):
        (pkg / "a.py").write_text(TOY_A.format(value=value))
        env = os.environ | {
            "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
            "GUARD": guard,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        }
        r = subprocess.run([sys.executable, "-c", "import toy.b"], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return int(r.stdout.strip().splitlines()[-1])

    assert run(1, "0") == 1
    assert run(2, "0") == 1  # stale: numba loaded the machine code compiled with f() == 1
    assert run(3, "1") == 3  # guarded: a new key, the index flushed, compiled afresh
    assert run(3, "1") == 3


def test_the_compiled_engine_is_keyed_by_the_code_it_is_compiled_from():
    from asrsched.sim import kernel
    from asrsched.sim.cache import code_key, guard_numba_cache, module_closure

    stamp = Path(kernel.run._cache.cache_path) / "kernel.run.code-key"
    assert stamp.read_text().strip() == code_key("asrsched.sim.kernel")
    assert "asrsched.core.rulebook" in module_closure("asrsched.sim.kernel")  # what it inlines is in the key
    assert guard_numba_cache(kernel.run) == []  # same code: nothing flushed
