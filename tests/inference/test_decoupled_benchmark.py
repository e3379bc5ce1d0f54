"""The decoupled-model benchmark (inference/benchmarks/decoupled.py): its calibration measures against
their definitions, the models it builds, and its quick path end to end on a tiny problem (one method,
a few hundred rows, a half-second budget) writing its JSON summary. float64 (conftest)."""
import json

import numpy as np
import pytest

from inference.benchmarks import decoupled
from ppl_sparsegp import ActivationFeatures, OrthogonallyDecoupledGP, RobustMax, SparseGP, SphericalHarmonicFeatures
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
    args = type("A", (), {"max_features": 30, "num_orthogonal": 8, "num_inducing": 12, "basis": "spherical",
                          "activation_features": 5})()
    dec, basis, svgp = (decoupled.build(m, X, args) for m in decoupled.METHODS)
    assert isinstance(dec, OrthogonallyDecoupledGP) and dec.orthogonal.num_features == 8
    assert isinstance(basis, OrthogonallyDecoupledGP) and basis.orthogonal is None
    assert basis.basis.num_features == dec.basis.num_features <= 30
    assert isinstance(dec.basis, SphericalHarmonicFeatures)
    assert isinstance(svgp, SparseGP) and svgp.feature.num_features == 12
    args.basis = "activation"
    dec = decoupled.build("decoupled", X, args, likelihood=RobustMax(3))
    assert isinstance(dec.basis, ActivationFeatures) and dec.basis.num_features == 5 and dec.num_latent_gps == 3


def test_digits_split_is_standardised_with_training_statistics():
    X, y, Xs, ys = decoupled.digits_split()
    assert X.shape == (1200, 64) and Xs.shape == (597, 64) and set(np.unique(y)) == set(range(10))
    live = X.std(0) > 0
    assert np.allclose(X.mean(0), 0, atol=1e-12) and np.allclose(X.std(0)[live], 1)
    assert np.isfinite(Xs).all() and not np.allclose(Xs.mean(0), 0, atol=1e-3)


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


@pytest.mark.slow  # 20-30 s of compilation and fitting; the fast tests above cover build() and the split
def test_classification_quick_path_scores_a_better_than_chance_fit(tmp_path):
    """Part (c) end to end at a tiny size: the U-only model (spherical degree <= 1, 10 latent GPs, RobustMax)
    for 4 seconds; its test error is below the 0.9 of guessing (at this budget 0.2-0.8: the NLPD of a
    RobustMax fit this short can exceed the uniform predictive's log 10), read back from the JSON."""
    out = tmp_path / "decoupled.jsonl"
    (row,) = decoupled.main(["--quick", "--parts", "c", "--methods", "basis", "--budget", "4", "--probe-steps", "2",
                             "--out", str(out)])
    assert row["dataset"] == "digits" and row["M"] == "66" and row["steps"] >= 1
    assert 0 <= row["error"] < 0.9 and 0 < row["nlpd"] < np.inf
    assert json.loads(out.with_suffix(".json").read_text())["rows"][0]["error"] == row["error"]
