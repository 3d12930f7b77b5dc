"""One size estimate: a ServiceModel subclass that redefines ``est_service`` changes it on every path.

The estimate is formed in one place (:meth:`asrsched.core.service.ServiceModel.est_service`); the
Python and compiled engines, the fleet (both engines) and the routers that read estimated work
all take it from there, so a subclass's estimate is what every one of them records and decides by.
"""

import numpy as np
import pytest

from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate
from asrsched.sim.fleet import simulate_fleet


class ShortClipsPadded(ServiceModel):
    """The default model, but clips under 5 s look 10 s longer than they are (not monotone in the duration)."""

    def est_service(self, duration_s, language="en", **kw):
        base = super().est_service(duration_s, language, **kw)
        return base + 10.0 * (np.asarray(duration_s, float) < 5.0)


def _subclass() -> ShortClipsPadded:
    base = default_service_model()
    return ShortClipsPadded(**{f: getattr(base, f) for f in base.__dataclass_fields__})


@pytest.fixture(scope="module")
def trace():
    return make_trace("librispeech", rate=13.0, n=1500, seed=4)


def test_every_engine_records_the_subclass_estimate_and_orders_by_it(trace):
    svc, base = _subclass(), default_service_model()
    want = np.broadcast_to(svc.est_service(trace.duration, trace.language), (len(trace),))
    assert (want != np.broadcast_to(base.est_service(trace.duration, trace.language), (len(trace),))).any()
    runs = {
        engine: simulate(trace, "sjf", svc, engine=engine, max_num_seqs=8, warn_overload=False)
        for engine in ("python", "numba")
    }
    for engine, res in runs.items():
        np.testing.assert_array_equal(res.records["est_service"].to_numpy(), want, err_msg=engine)
    np.testing.assert_array_equal(runs["python"].records["admit"], runs["numba"].records["admit"])
    plain = simulate(trace, "sjf", base, max_num_seqs=8, warn_overload=False).records
    assert not np.array_equal(plain["admit"].to_numpy(), runs["numba"].records["admit"].to_numpy())  # SJF used it


@pytest.mark.parametrize("router", ["least_work", "pod2_work"])
def test_the_fleet_and_its_work_routers_read_the_subclass_estimate(trace, router):
    svc = _subclass()
    want = np.broadcast_to(svc.est_service(trace.duration, trace.language), (len(trace),))
    a = simulate_fleet(trace, n_replicas=3, router=router, policy="sjf", service=svc, seed=1, engine="python")
    b = simulate_fleet(trace, n_replicas=3, router=router, policy="sjf", service=svc, seed=1, engine="numba")
    np.testing.assert_array_equal(b.records["est_service"].to_numpy(), want)
    np.testing.assert_array_equal(a.records["replica"].to_numpy(), b.records["replica"].to_numpy())
    np.testing.assert_array_equal(a.records["finish"].to_numpy(), b.records["finish"].to_numpy())
    # and the cached per-trace inputs are the subclass's, not the base model's cached before
    simulate_fleet(trace, n_replicas=3, router=router, policy="sjf", service=default_service_model(), seed=1)
    c = simulate_fleet(trace, n_replicas=3, router=router, policy="sjf", service=svc, seed=1)
    np.testing.assert_array_equal(c.records["est_service"].to_numpy(), want)


def test_a_copy_with_another_kappa_stays_the_subclass():
    svc = _subclass().with_kappa(5.0)
    assert type(svc) is ShortClipsPadded and svc.kappa_for("en") == 5.0
    assert svc.est_service(2.0) == pytest.approx(default_service_model().with_kappa(5.0).est_service(2.0) + 10.0)
