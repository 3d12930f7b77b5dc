"""ServiceModel: the size estimate, the service-time formula, the JSON profile format and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from asrsched.core.service import REQUIRED_FIELDS, SCHEMA, ServiceModel, check_kappa, default_service_model


def _model(**kw) -> ServiceModel:
    base = dict(
        encode_s_per_window=0.5,
        decode_s_per_token=0.01,
        overhead_s=0.05,
        kappa={"en": 4.1, "de": 5.1},
        decode_batch_slope=0.1,
    )
    base.update(kw)
    return ServiceModel(**base)


def test_windows_follow_whisper_30s_padding():
    m = _model()
    d = np.array([0.0, 0.5, 29.9, 30.0, 30.001, 59.99, 60.0, 61.0])
    np.testing.assert_array_equal(m.windows(d), [1, 1, 1, 1, 2, 2, 2, 3])
    assert m.windows(12.0) == 1 and isinstance(m.windows(12.0), int)


def test_estimated_tokens_are_kappa_times_duration_per_language():
    m = _model()
    assert m.est_tokens(10.0, "en") == pytest.approx(41.0)
    np.testing.assert_allclose(m.est_tokens(np.array([1.0, 2.0]), "de"), [5.1, 10.2])
    with pytest.raises(ValueError, match="no kappa for language 'fr'; known: de, en"):
        m.est_tokens(1.0, "fr")


def test_service_time_formula():
    m = _model()
    d = np.array([3.0, 45.0])
    for b in (1, 4):
        step = 0.01 * (1 + 0.1 * (b - 1))
        expect = np.array([1, 2]) * 0.5 + 4.1 * d * step + 0.05
        np.testing.assert_allclose(m.service_time(d, "en", batch=b), expect, rtol=1e-12)
    # measured tokens override the kappa estimate
    assert m.service_time(3.0, tokens=7) == pytest.approx(0.5 + 7 * 0.01 + 0.05)
    assert m.step_s(1) == pytest.approx(0.01) and m.step_s(0) == pytest.approx(0.01)  # batch clipped at 1
    np.testing.assert_allclose(m.step_s(np.array([1, 2, 11])), 0.01 * np.array([1.0, 1.1, 2.0]))


def test_json_round_trip(tmp_path):
    m = _model(name="tiny.en/cpu", source="profile run", kappa_ci={"en": (4.0, 4.2)}, fit={"r2": 0.98, "n": 120})
    path = m.to_json(tmp_path / "sub" / "profile.json")
    d = json.loads(path.read_text())
    assert d["schema"] == SCHEMA and d["kappa_ci"]["en"] == [4.0, 4.2]
    back = ServiceModel.from_json(path)
    assert back == m
    assert back.service_time(7.0, "de", batch=3) == m.service_time(7.0, "de", batch=3)


def test_profile_with_extra_fields_still_loads():
    d = {
        "schema": SCHEMA,
        "encode_s_per_window": 0.1,
        "decode_s_per_token": 0.02,
        "overhead_s": 0.0,
        "kappa": {"en": 3.0},
        "produced_by": "notebook 01",
        "per_language_r2": {"en": 0.9},
    }
    m = ServiceModel.from_dict(d)
    assert m.kappa_for("en") == 3.0 and m.decode_batch_slope == 0.0 and m.window_s == 30.0


@pytest.mark.parametrize("missing", REQUIRED_FIELDS)
def test_profile_missing_a_field_names_it(tmp_path, missing):
    d = _model().to_dict()
    del d[missing]
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        ServiceModel.from_json(p)
    msg = str(e.value)
    assert f"missing required field(s) {missing}" in msg
    for f in REQUIRED_FIELDS:  # and says what a profile needs
        assert f in msg


def test_profile_bad_files(tmp_path):
    p = tmp_path / "p.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ServiceModel.from_json(p)
    with pytest.raises(FileNotFoundError, match="profile not found"):
        ServiceModel.from_json(tmp_path / "absent.json")
    d = _model().to_dict()
    d["schema"] = "asrsched.service_model/99"
    with pytest.raises(ValueError, match="expected 'asrsched.service_model/1'"):
        ServiceModel.from_dict(d)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_kappa_must_be_positive(bad):
    with pytest.raises(ValueError, match=r"kappa\['en'\] must be a positive number"):
        _model(kappa={"en": bad})
    with pytest.raises(ValueError, match="kappa must be a positive number"):
        check_kappa(bad)
    with pytest.raises(ValueError, match="kappa must be a positive number"):
        _model().with_kappa(bad)


@pytest.mark.parametrize("field", ["encode_s_per_window", "decode_s_per_token", "overhead_s", "decode_batch_slope"])
def test_coefficients_must_be_finite_non_negative(field):
    with pytest.raises(ValueError, match=f"ServiceModel.{field} must be a finite number >= 0"):
        _model(**{field: -0.1})
    with pytest.raises(ValueError, match=f"ServiceModel.{field}"):
        _model(**{field: math.inf})


def test_empty_kappa_and_bad_window():
    with pytest.raises(ValueError, match="at least one language"):
        _model(kappa={})
    with pytest.raises(ValueError, match="window_s must be > 0"):
        _model(window_s=0)


def test_with_kappa():
    m = _model()
    one = m.with_kappa(3.0)
    assert dict(one.kappa) == {"en": 3.0, "de": 3.0}
    per = m.with_kappa({"en": 2.0})
    assert dict(per.kappa) == {"en": 2.0}
    assert m.kappa["en"] == 4.1  # the original is unchanged
    assert one.service_time(10.0) < m.service_time(10.0)


def test_default_model_documents_its_assumptions():
    m = default_service_model()
    assert "a100" in m.name.lower()
    # the written-down assumptions state the coefficients actually used
    a = m.assumptions
    assert f"encoder {1e3 * m.encode_s_per_window:.0f} ms" in a
    assert f"decode {1e3 * m.decode_s_per_token:.0f} ms" in a
    assert f"+{100 * m.decode_batch_slope:.0f} %" in a
    assert f"{1e3 * m.overhead_s:.0f} ms overhead" in a
    assert f"kappa en {m.kappa_for('en'):g}" in a
    # a typical 7.4 s LibriSpeech utterance alone on the engine: ~0.5 s (encoder + ~25 tokens)
    t = m.service_time(7.425, "en")
    assert 0.3 < t < 0.8
    assert m.kappa_for("es") > m.kappa_for("en")


def test_as_service_model_takes_a_model_its_dict_or_its_json_and_replaces_kappa(tmp_path):
    from asrsched.core.service import as_service_model

    base = default_service_model()
    assert as_service_model() == base and as_service_model(base) is base
    assert as_service_model(base.to_dict()) == base
    assert as_service_model(str(base.to_json(tmp_path / "m.json"))) == base
    k = as_service_model(base, kappa=2.5)
    assert set(k.kappa.values()) == {2.5} and k.encode_s_per_window == base.encode_s_per_window
    with pytest.raises(ValueError, match="kappa"):
        as_service_model(base, kappa=-1.0)
