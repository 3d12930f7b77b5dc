"""The plug-in's sizing of long uploads' chunks (engine-free): the simulator's rule, from vLLM's request ids or a
client's chunk index, and a logged fallback (never a refused request) for a reused upload id or an index outside
the upload."""

import logging

import pytest

from asrsched.core.service import default_service_model
from asrsched.core.uploads import sized_duration
from asrsched.vllm_plugin.config import PluginConfig
from asrsched.vllm_plugin.middleware import rewrite_multipart
from asrsched.vllm_plugin.size_estimate import SizeEstimator, chunk_index_from_id

SM = default_service_model()
UP = {"audio_duration_s": 600.0}  # what vLLM's chunks of a 10-minute upload all carry


def vllm_id(i):
    return f"transcription-0a1b2c3d-{i}-9f8e7d6c"


def test_chunk_index_from_vllm_request_ids():
    assert chunk_index_from_id(vllm_id(7)) == 7
    assert chunk_index_from_id("transcription-0a1b2c3d-9f8e7d6c") is None
    assert chunk_index_from_id(None) is None


@pytest.mark.parametrize("sizing", ["chunk", "upload", "remaining"])
def test_each_chunk_is_sized_by_the_rule(sizing):
    est = SizeEstimator(upload_sizing=sizing)
    for i in (0, 5, 19):
        got, info = est.estimate_from(UP, 448, vllm_id(i))
        d = sized_duration(600.0, i, sizing)
        assert got == pytest.approx(SM.est_service(d, "en", max_tokens=448 * max(1, -(-d // 30))))
        assert info["sizing"] == sizing and info["chunk_index"] == i and info["upload_s"] == 600.0
    # vLLM's energy split can leave one more chunk than ceil(d / 30): sized as the last one
    assert est.estimate_from(UP, 448, vllm_id(20))[0] == est.estimate_from(UP, 448, vllm_id(19))[0]
    # vLLM's language detection of an upload (max_tokens 1) stays the smallest job
    lang, info = est.estimate_from({**UP, "upload_duration_s": 600.0}, 1, "transcription-0a1b-lang_detect-9f8e7d6c")
    assert "sizing" not in info and lang == pytest.approx(SM.est_service(30.0, "en", max_tokens=1))
    # a request of one window is never an upload
    assert est.estimate_from({"audio_duration_s": 12.0}, 448, vllm_id(3))[0] == SM.est_service(
        12.0, "en", max_tokens=448
    )


def test_upload_sizing_puts_an_uploads_chunks_behind_short_requests():
    by_chunk = SizeEstimator(upload_sizing="chunk").estimate_from(UP, 448, vllm_id(2))[0]
    by_upload = SizeEstimator(upload_sizing="upload").estimate_from(UP, 448, vllm_id(2))[0]
    window = SizeEstimator().estimate_from({"audio_duration_s": 30.0}, 448)[0]
    assert by_chunk == pytest.approx(window) and by_upload > 15 * window


def test_bad_upload_input_is_logged_and_the_chunk_sized_by_its_window(caplog):
    est = SizeEstimator(upload_sizing="upload")
    window = est.estimate_from({"audio_duration_s": 30.0}, 448)[0]
    a = {"audio_duration_s": 90.0, "upload_id": "u1", "upload_duration_s": 90.0}
    assert est.estimate_from(a, 448, "r-0")[0] == SM.est_service(90.0, "en", max_tokens=3 * 448)
    with caplog.at_level(logging.WARNING, logger="asrsched.vllm_plugin.scheduler"):
        got, info = est.estimate_from({**a, "upload_duration_s": 120.0}, 448, "r-1")
    assert got == window and info["sizing"] == "chunk"
    assert "upload id 'u1' was seen with 90 s of audio, now with 120 s" in caplog.text
    est2 = SizeEstimator(upload_sizing="remaining")
    got, info = est2.estimate_from({"upload_duration_s": 90.0, "chunk_index": 7}, 448)
    assert got == window and "chunk_index 7 is not a chunk of an upload of 90 s" in info["fallback"]


def test_config_key_and_environment():
    assert PluginConfig.from_sources(None, env={}).upload_sizing == "upload"
    assert PluginConfig.from_sources(None, env={"ASRSCHED_UPLOAD_SIZING": "chunk"}).upload_sizing == "chunk"
    assert PluginConfig.from_sources({"upload_sizing": "Remaining"}, env={}).upload_sizing == "remaining"
    with pytest.raises(
        ValueError, match="asrsched upload_sizing: unknown sizing 'whole'; allowed values: chunk, upload"
    ):
        PluginConfig.from_sources({"upload_sizing": "whole"}, env={})


def test_the_middleware_marks_a_long_upload():
    import io

    import numpy as np
    from extras import need

    sf = need("soundfile")

    def body(seconds):
        b = io.BytesIO()
        sf.write(b, np.zeros(int(16000 * seconds), np.int16), 16000, format="WAV", subtype="PCM_16")
        parts = [
            b'--XX\r\nContent-Disposition: form-data; name="model"\r\n\r\nw\r\n',
            b'--XX\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n' + b.getvalue() + b"\r\n",
            b"--XX--\r\n",
        ]
        return b"".join(parts)

    _, xa = rewrite_multipart(body(75.0), "multipart/form-data; boundary=XX")
    assert xa["upload_duration_s"] == 75.0 and len(xa["upload_id"]) == 32
    _, xa = rewrite_multipart(body(20.0), "multipart/form-data; boundary=XX")
    assert "upload_id" not in xa and "upload_duration_s" not in xa
