"""Nudge and Nudge-M (Grosof et al. 2021; Charlet & Van Houdt 2024): the push-count key against the
papers' insertion rule written out as a list, the compiled engine against the Python reference
(single server, fleet, policy switches), and the M/G/1 check that Nudge is no worse than FCFS at any
percentile on a light-tailed workload."""

import numpy as np
import pytest

from asrsched.core.nudge import nudge_name, nudge_threshold, register_nudge
from asrsched.core.policies import POLICIES, Job, make_queue
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate
from asrsched.sim.fleet import run_fleet

SVC = ServiceModel(encode_s_per_window=0.05, decode_s_per_token=0.02, overhead_s=0.1, kappa={"en": 3.3})


@pytest.fixture
def nudge():
    added = []

    def add(threshold, m=1):
        name = register_nudge(threshold, m)
        added.append(name)
        return name

    yield add
    for name in added:
        POLICIES.pop(name, None)


class ListNudgeM:
    """Nudge-M as the paper states it, on a list in service order: an arriving short job passes every
    long job still waiting that arrived as one of the last M jobs before it (never a short job)."""

    def __init__(self, threshold, m):
        self.thr, self.m, self.q, self.n = threshold, m, [], 0  # q: (place in arrival order, job)

    def push(self, job):
        place, self.n = self.n, self.n + 1
        i = len(self.q)
        if job.est_service <= self.thr:
            while i > 0 and self.q[i - 1][1].est_service > self.thr and self.q[i - 1][0] >= place - self.m:
                i -= 1
        self.q.insert(i, (place, job))

    def pop(self):
        return self.q.pop(0)[1]


@pytest.mark.parametrize("m", [1, 2, 5])
def test_push_count_key_is_the_papers_insertion_rule(nudge, m):
    rng = np.random.default_rng(m)
    name = nudge(1.0, m)
    q, ref = make_queue(name), ListNudgeM(1.0, m)
    popped, expected = [], []
    for i in range(4000):
        if rng.random() < 0.55 or not ref.q:
            job = Job(rid=i, arrival=float(i), est_service=float(rng.choice([0.4, 1.0, 1.7, 3.0])))
            q.push(job)
            ref.push(job)
        else:
            popped.append(q.pop(now=float(i)).rid)
            expected.append(ref.pop().rid)
    assert popped == expected and len(popped) > 1000
    assert len(set(popped)) == len(popped)


def test_limits_and_names(nudge):
    """A threshold below every estimate leaves no short job: FCFS exactly; with every job short, too."""
    tr = make_trace("librispeech", rate=1.4, n=1200, seed=3)
    fcfs = simulate(tr, "fcfs", SVC, max_num_seqs=1, warn_overload=False).records
    for thr in (1e-6, 1e6):
        rec = simulate(tr, nudge(thr, 3), SVC, max_num_seqs=1, warn_overload=False).records
        assert rec[["rid", "admit", "finish"]].equals(fcfs[["rid", "admit", "finish"]])
    assert nudge_name(0.8) == "nudge_0.8" and nudge_name(0.8, 4) == "nudge_m4_0.8"
    with pytest.raises(ValueError, match="m: Nudge-M's M must be an integer >= 1"):
        register_nudge(0.8, 0)
    with pytest.raises(ValueError, match="threshold: .* must be a finite estimate > 0"):
        register_nudge(-1.0)
    with pytest.raises(ValueError, match=r"policy 'nudge_m2_fast': write nudge_<threshold s>"):
        make_queue("nudge_m2_fast")
    assert nudge_threshold([1.0, 2.0, 3.0], 0.5) == 2.0
    with pytest.raises(ValueError, match="quantile"):
        nudge_threshold([1.0], 1.5)


def test_compiled_equals_python_single_fleet_and_switches(nudge):
    tr = make_trace("uniform", rate=9.0, n=1500, seed=2)
    thr = nudge_threshold(SVC.est_service(tr.duration, tr.language), 0.5)
    name = nudge(thr, 4)
    a = simulate(tr, name, SVC, max_num_seqs=8, engine="python", warn_overload=False)
    b = simulate(tr, name, SVC, max_num_seqs=8, warn_overload=False)
    assert b.params["engine"] == "numba" and a.records.equals(b.records)
    fcfs = simulate(tr, "fcfs", SVC, max_num_seqs=8, warn_overload=False).records
    assert not a.records["admit"].equals(fcfs["admit"])  # the order changed
    # a fleet of 3 behind least-work routing, switching FCFS -> Nudge-M -> SJF -> Nudge-M
    tr3 = make_trace("librispeech", rate=12.0, n=2500, seed=5)
    t = tr3.arrival
    sw = [(600, float(t[600]), name), (1200, float(t[1200]), "sjf", 1), (1800, float(t[1800]), name)]
    kw = dict(switches=sw, service=SVC, max_num_seqs=4)
    py, _, e1 = run_fleet(tr3, ["fcfs"] * 3, [("least_work", 7)], engine="python", **kw)
    nb, _, e2 = run_fleet(tr3, ["fcfs"] * 3, [("least_work", 7)], engine="numba", **kw)
    assert (e1, e2) == ("python", "numba") and py.equals(nb)


def test_a_name_registers_the_policy_on_first_use():
    import subprocess
    import sys

    code = (
        "from asrsched.core.policies import make_queue, validate_policies\n"
        "assert validate_policies(['NUDGE_M3_0.5', 'nudge_0.5']) == ['nudge_m3_0.5', 'nudge_0.5']\n"
        "q = make_queue('nudge_m3_0.5')\n"
        "assert q.name == 'nudge_m3_0.5' and q.count_clock\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_nudge_is_no_worse_than_fcfs_at_every_percentile_on_one_slot(nudge):
    """M/G/1 (one slot), light-tailed sizes (uniform 5-30 s audio), load 0.9 of the slot's capacity:
    Nudge's response-time percentiles (P10 ... P99.9) are at most FCFS's, beyond the
    paired-bootstrap noise of each difference (Grosof et al. 2021, Theorem 1: stochastic improvement)."""
    tr = make_trace("uniform", rate=1.0, n=40_000, seed=11)
    est = SVC.est_service(tr.duration, tr.language)
    rate = 0.9 / float(np.mean(est))
    tr = make_trace("uniform", rate=rate, n=40_000, seed=11)
    name = nudge(nudge_threshold(est, 0.5), 1)
    e = {
        p: simulate(tr, p, SVC, max_num_seqs=1, warn_overload=False).records["e2el"].to_numpy() for p in ("fcfs", name)
    }
    qs = np.array([10, 25, 50, 75, 90, 95, 99, 99.9])
    diff = np.percentile(e[name], qs) - np.percentile(e["fcfs"], qs)
    # the difference's noise: percentiles of blocks of 2,000 consecutive requests (the queue's memory is short)
    blocks = np.array(
        [
            np.percentile(e[name][i : i + 2000], qs) - np.percentile(e["fcfs"][i : i + 2000], qs)
            for i in range(0, 40_000, 2000)
        ]
    )
    half = 1.96 * blocks.std(axis=0, ddof=1) / np.sqrt(len(blocks))
    assert np.all(diff <= half), dict(zip(qs, zip(diff, half)))
    assert diff[qs == 50][0] < 0  # and it helps where it should


def test_the_servers_take_a_family_name_in_a_fresh_process():
    """The CPU server's and the vLLM plug-in's configs register a family's name when they check it (a server
    started with --policy nudge_m4_1.35 or gamma_boost_0.07_real), and name a bad parameter."""
    import subprocess
    import sys

    from extras import need

    need("httpx")
    code = (
        "from asrsched.serving.config import ServerConfig\n"
        "from asrsched.vllm_plugin.config import PluginConfig\n"
        "c = ServerConfig(policy='NUDGE_M4_1.35', warmup=False); c.validate(); assert c.policy == 'nudge_m4_1.35'\n"
        "assert PluginConfig(policy='gamma_boost_0.07_real').policy == 'gamma_boost_0.07_real'\n"
        "for bad, msg in (('nudge_m0_1', \"M must be an integer >= 1\"), ('fifo', 'or a member of a family: gamma_boost_')):\n"
        "    try:\n"
        "        PluginConfig(policy=bad)\n"
        "    except ValueError as e:\n"
        "        assert msg in str(e), e\n"
        "    else:\n"
        "        raise AssertionError(bad)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
