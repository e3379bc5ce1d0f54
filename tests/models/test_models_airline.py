"""models/airline.py on a CSV it has never seen, through the runner; predictions checked against the
generic CollapsedGP on the raw training data."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference.runner import main
from models import airline
from ppl_sparsegp import CollapsedGP


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory):
    rng = np.random.default_rng(7)
    n = 600
    u, v, w = rng.uniform(-5, 5, n), rng.exponential(3.0, n), rng.integers(0, 12, n)
    z = np.sin(0.6 * u) + 0.1 * v + 0.3 * np.cos(w / 2) + 0.3 * rng.normal(size=n)
    path = tmp_path_factory.mktemp("csv") / "random.csv"
    lines = ["zeta,alpha,unused,beta,gamma"] + [f"{a},{b},1,{c},{d}" for a, b, c, d in zip(z, u, v, w)]
    lines.insert(5, "NA,1.0,1,2.0,3")  # a missing target: the row is dropped
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow  # two fits through the CLI (map and svi); the pieces: test_map_estimate, test_collapsed
def test_fit_unseen_csv_through_runner(csv_path, tmp_path):
    out = tmp_path / "run"
    result = main(["fit", "airline", "--csv", str(csv_path), "--target", "zeta", "--covariates",
                   "alpha,beta,gamma", "--num-frequencies", "8", "--method", "svi", "--num-steps", "40", "--lr",
                   "0.05", "--samples", "2", "--out", str(out), "--no-progress"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert {p.name for p in result["plots"]} >= {"fit.png", "loss.png"}
    assert (out / "idata.nc").exists()
    assert metrics["num_train"] == 400 and metrics["num_test"] == 200  # 600 complete rows, 2/3 : 1/3
    assert metrics["num_features"] == 3 * 15
    # signal variance ≈ 0.55 of the total: any sensible fit beats the training mean (MSE 1)
    assert metrics["test_mse"] < 0.5
    assert np.isfinite(metrics["test_nlpd"])
    # the default for this collapsed model is L-BFGS MAP: its negative log joint is at most SVI's last
    # loss (the point guide's negative ELBO is the negative log joint) and it predicts as well
    main(["fit", "airline", "--csv", str(csv_path), "--target", "zeta", "--covariates", "alpha,beta,gamma",
          "--num-frequencies", "8", "--samples", "2", "--out", str(tmp_path / "map"), "--no-progress"])
    fitted = json.loads((tmp_path / "map" / "metrics.json").read_text())
    assert fitted["method"] == "map" and fitted["success"]
    assert fitted["neg_log_joint"] <= metrics["final_loss"] + 1e-6
    assert fitted["test_mse"] <= metrics["test_mse"] * 1.05


def test_model_predictions_equal_generic_collapsed_gp(csv_path):
    """The spec's streamed test predictions from precomputed statistics equal CollapsedGP.predict on the
    raw training rows (an independent dense computation), at the prior medians."""
    class Args:
        csv, target, covariates, synthetic = str(csv_path), "zeta", "alpha,beta,gamma", None
        num_frequencies, stats_method, split_seed, diagnostic_rows = 8, "nufft", 0, 100

    spec = airline.build(Args())
    assert len(spec.y) == 100  # the runner's subsample; the statistics hold all 400 rows
    assert float(spec.gp.precomputed.n) == 400
    gp = spec.gp
    values = {k: jnp.median(p.sample(jax.random.PRNGKey(0), (101,))) for k, p in gp.hyperparameter_sites().items()}
    m, v, noise = airline.predictive(gp, values, spec.extra["X_test_all"])
    X, y = airline.read_csv(csv_path, "zeta", ["alpha", "beta", "gamma"])
    data = airline.prepare(X, y, seed=0)
    raw = airline.make_gp(gp.feature)  # no statistics: from (X, y)
    params = {k + "_map": val for k, val in values.items()}
    ref = jax.jit(lambda Xs, X, y: raw.with_data(X, y).predict(Xs, params=params))(
        jnp.asarray(data["X_test"]), jnp.asarray(data["X"]), jnp.asarray(data["y"]))
    # NUFFT statistics and projections at eps = 1e-12: agreement far inside 1e-8
    np.testing.assert_allclose(m, ref["f_mean"], atol=1e-8)
    np.testing.assert_allclose(v, ref["f_var"], atol=1e-8)
    np.testing.assert_allclose(v + noise, ref["y_var"], atol=1e-8)


def test_spherical_features_through_runner(tmp_path):
    """``--features spherical`` at tiny size (600 synthetic rows, degrees 0…2: M = 1 + 9 + 44 = 54 for 8 covariates):
    the runner's MAP on the one-pass statistics of all 400 training rows predicts as CollapsedGP on the
    raw rows (the data path: Kuf formed from (X, y), an independent computation) at the fitted values,
    passes its own adequacy check, and beats the training mean on the test third."""
    out = tmp_path / "sph"
    main(["fit", "airline", "--features", "spherical", "--synthetic", "600", "--max-degree", "2",
          "--subsample", "200", "--samples", "2", "--out", str(out), "--no-progress"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "map" and metrics["num_features"] == 54 and metrics["num_train"] == 400
    assert metrics["adequacy_ok"]
    # signal ≈ 25 % of the target's variance on this generator: the fit must beat the mean (MSE ≈ 1)
    assert metrics["test_mse"] < 0.95 and np.isfinite(metrics["test_nlpd"])

    class Args:
        csv, synthetic, features, max_degree, subsample, split_seed, diagnostic_rows = (
            None, 600, "spherical", 2, 200, 0, 50)

    spec = airline.build(Args())
    gp = spec.gp
    assert float(gp.precomputed.n) == 400 and len(spec.y) == 50
    values = {k: jnp.median(p.sample(jax.random.PRNGKey(0), (101,))) for k, p in gp.hyperparameter_sites().items()}
    m, v, noise = airline.predictive(gp, values, spec.extra["X_test_all"])
    X, y, _, _ = airline.synthetic(600, seed=0)
    data = airline.prepare(X, y, seed=0)
    raw = CollapsedGP(gp.feature, gp.kernel, gp.likelihood)  # the same fixed map, no statistics
    params = {k + "_map": val for k, val in values.items()}
    ref = raw.with_data(jnp.asarray(data["X"] - 0.5), jnp.asarray(data["y"])).predict(
        jnp.asarray(data["X_test"] - 0.5), params=params)
    # the statistics are sums of the same products in another order: float64 round-off
    np.testing.assert_allclose(m, ref["f_mean"], atol=1e-9)
    np.testing.assert_allclose(v + noise, ref["y_var"], atol=1e-9)
