"""The Whisper-large-v3 model fitted to published GPU measurements.

The committed profile is what the fit gives today (one command regenerates it); every fitted point lies within
10 % of the published mean latency; the closed-loop formula the fit uses agrees with the simulator where both
apply (no encoder stall: ``c`` requests decoding together); each source row carries its URL, hardware and quote.
"""

import numpy as np
import pytest

from asrsched.core.service import default_service_model
from asrsched.core.workloads import Trace
from asrsched.profiling.published import (
    LITTLE_CHECK,
    closed_loop_latency,
    fit_published,
    published_rows,
    published_service_model,
)
from asrsched.sim.engine import simulate


def test_committed_profile_is_the_fit():
    fresh, saved = fit_published(), published_service_model()
    for f in ("encode_s_per_window", "decode_s_per_token", "overhead_s", "decode_batch_slope"):
        assert getattr(saved, f) == pytest.approx(getattr(fresh, f), abs=1e-6), f
    assert saved.fit["error_pct"] == fresh.fit["error_pct"]
    assert "fitted to published" in saved.name and saved.kappa == default_service_model().kappa


def test_fit_residuals_and_checks():
    f = published_service_model().fit
    assert len(f["concurrency"]) == 6 and f["max_abs_error_pct"] <= 10.0
    # the same form fits another GPU's table (RTX 4090) as well
    assert f["form_check_rtx4090"]["max_abs_error_pct"] <= 10.0
    # Little's law (c / throughput) against the mean latency the 4090 table publishes: within 3 %
    assert max(abs(e) for e in f[LITTLE_CHECK]["error_pct"]) <= 3.0
    # the A100 engineering model is slower than TensorRT-LLM's published A100 RTFx: a disagreement on record
    chk = f["rtfx_check_a100_trtllm"]
    assert chk["engineering_a100_model_rtfx"] < chk["published_rtfx"] < chk["fitted_h200_model_rtfx"]


def test_rows_carry_their_sources():
    rows = published_rows()
    assert len(rows) >= 10
    for r in rows:
        assert r["source_url"].startswith("https://github.com/") and r["hardware"] and r["quote"], r["id"]
    h200 = published_rows("sglo-cookbook-h200-sync")
    assert sorted(r["concurrency"] for r in h200) == [1, 2, 4, 8, 16, 32]


@pytest.mark.parametrize("c", [1, 4, 16])
def test_closed_loop_formula_matches_the_simulator_without_encoder(c):
    sm = published_service_model()
    assert sm.encode_s_per_window == 0.0
    tr = Trace(np.zeros(c), np.full(c, 5.0), np.full(c, "en", dtype=object), np.full(c, 17))
    r = simulate(tr, "fcfs", sm, max_num_seqs=32, warn_overload=False).records
    np.testing.assert_allclose(r.e2el.to_numpy(), closed_loop_latency(sm, c, 17)[0], rtol=1e-12)


def test_closed_loop_encoder_stall_grows_with_concurrency():
    sm = default_service_model()
    lat = closed_loop_latency(sm, [1, 2, 8], 17)
    assert lat[0] == pytest.approx(sm.overhead_s + sm.encode_s_per_window + 17 * sm.decode_s_per_token)
    no_stall = sm.overhead_s + sm.encode_s_per_window + 17 * np.asarray(sm.step_s(np.array([2, 8])))
    assert (lat[1:] > no_stall).all()
