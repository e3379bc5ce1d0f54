"""The decoupled-model benchmark (inference/benchmarks/decoupled.py): its calibration measures against
their definitions, the models it builds, and its quick path end to end on a tiny problem (one method,
a few hundred rows, a half-second budget) writing its JSON summary. float64 (conftest)."""
import json

import numpy as np
import pytest

from inference.benchmarks import decoupled
from ppl_sparsegp import OrthogonallyDecoupledGP, SparseGP
from ppl_sparsegp.datasets import data_dir


def _has_kin8nm():
    try:
        return (data_dir() / "uci" / "kin8nm").is_dir()
    except FileNotFoundError:
        return False


def test_calibration_of_exact_predictives():
    """z-scores of draws from the predictive itself: sd 1 and 90 % coverage (to Monte Carlo error), and a
    predictive twice too wide: sd 1/2 and the coverage of |z| <= 2·1.645."""
    rng = np.random.default_rng(0)
    mean, var = rng.normal(size=200_000), rng.uniform(0.5, 2.0, 200_000)
    y = mean + np.sqrt(var) * rng.normal(size=mean.size)
    sd, cover = decoupled.calibration(mean, var, y)
    assert abs(sd - 1) < 0.01 and abs(cover - 0.9) < 0.005
    sd, cover = decoupled.calibration(mean, 4 * var, y)
    assert abs(sd - 0.5) < 0.01 and abs(cover - 0.9990) < 0.001


def test_methods_build_their_models():
    X = np.random.default_rng(1).normal(size=(50, 3))
    args = type("A", (), {"max_features": 30, "num_orthogonal": 8, "num_inducing": 12})()
    dec, basis, svgp = (decoupled.build(m, X, args) for m in decoupled.METHODS)
    assert isinstance(dec, OrthogonallyDecoupledGP) and dec.orthogonal.num_features == 8
    assert isinstance(basis, OrthogonallyDecoupledGP) and basis.orthogonal is None
    assert basis.basis.num_features == dec.basis.num_features <= 30
    assert isinstance(svgp, SparseGP) and svgp.feature.num_features == 12


@pytest.mark.skipif(not _has_kin8nm(), reason="no uci/kin8nm in the data directory")
def test_quick_path_writes_its_summary(tmp_path):
    out = tmp_path / "decoupled.jsonl"
    rows = decoupled.main(["--quick", "--parts", "u", "--methods", "basis", "--max-train", "300",
                           "--max-features", "10", "--budget", "0.5", "--probe-steps", "2", "--batch", "64",
                           "--out", str(out)])
    (row,) = rows
    assert row["dataset"] == "kin8nm" and row["method"] == "basis" and row["steps"] >= 1
    assert np.isfinite(row["nlpd"]) and 0 <= row["coverage90"] <= 1 and row["z_sd"] > 0
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["rows"][0]["nlpd"] == row["nlpd"] and summary["settings"]["max_train"] == 300
