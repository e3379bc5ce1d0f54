"""``python -m inference fit uci_ssgp``: M-SRFR through SteinVI and SSGP through SVI, end to end.

The saved particles are checked against an independent computation: each particle's sparse-spectrum
kernel written out as a dense N × N matrix, its exact GP predictive, mixed with equal weights."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from inference.__main__ import main
from models import uci_ssgp
from ppl_sparsegp import diagnostics


def dense_mixture_metrics(spec, W, ell, noise):
    """Mixture RMSE (original units) and per-point NLPD from dense SSGP kernels, one per particle."""
    X, y, Xs, ys = (np.asarray(a) for a in (spec.X, spec.y, spec.X_test, spec.y_test))
    logp, means = [], []
    for w in W:  # k(x, x') = (1/R) Σ_r cos(ω_r·(x − x')/ℓ), signal variance 1
        def k(A, B):
            return np.cos((A / ell) @ w.T) @ np.cos((B / ell) @ w.T).T / len(w) + \
                np.sin((A / ell) @ w.T) @ np.sin((B / ell) @ w.T).T / len(w)
        L = np.linalg.cholesky(k(X, X) + noise * np.eye(len(X)))
        Ks = k(Xs, X)
        mu = Ks @ np.linalg.solve(L.T, np.linalg.solve(L, y))
        V = np.linalg.solve(L, Ks.T)
        var = 1.0 - np.sum(V ** 2, 0) + noise  # k(x, x) = 1
        means.append(mu)
        logp.append(stats.norm.logpdf(ys, mu, np.sqrt(var)))
    mix = np.mean(means, 0)
    rmse = spec.extra["y_scale"] * np.sqrt(np.mean((ys - mix) ** 2))
    nlpd = -np.mean(logsumexp(np.array(logp), 0) - np.log(len(W)))
    return rmse, nlpd


# 27 s and 15 s end to end through the runner: slow (M-SRFR and its InferenceData are in test_stein,
# SSGP under SVI in test_spectrum), run with the benchmarks
@pytest.mark.slow
@pytest.mark.parametrize("method", ["stein", "svi"])
def test_fit_uci_ssgp(method, tmp_path):
    out = tmp_path / method
    main(["fit", "uci_ssgp", "--dataset", "energy", "--method", method, "--num-steps", "25", "--out", str(out),
          "--no-progress"])
    for name in ("idata.nc", "summary.txt", "metrics.json", "fit.png"):
        assert (out / name).is_file(), name
    idata = diagnostics.load(out / "idata.nc")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "uci_ssgp" and metrics["method"] == method
    spec = uci_ssgp.build(SimpleNamespace(dataset="energy", split=0))
    cfg = uci_ssgp.DATASETS["energy"]
    R, D = cfg["R"], spec.X.shape[1]
    post = idata.posterior
    if method == "stein":  # the particle posterior: one SSGP per particle, lengthscales shared
        assert post["feature_frequencies"].dims == ("chain", "draw", "particle", "frequency", "input_dim")
        W = post["feature_frequencies"].values[0, 0]
        assert W.shape == (cfg["M"], R, D)
        assert len(np.unique(W[:, 0, 0])) == cfg["M"]  # distinct particles
        assert idata.sample_stats["stein_force"].sizes["step"] == 25
        ell = post["kernel_lengthscale"].values[0, 0]
    else:  # a point estimate: the MAP frequencies (Delta guide) and the maximum-likelihood lengthscales
        W = idata.svi["feature_frequencies_map"].values[None]
        ell = idata.svi["kernel_lengthscale"].values
        np.testing.assert_array_equal(post["feature_frequencies"].values[0, -1], W[0])
    rmse, nlpd = dense_mixture_metrics(spec, W, ell, cfg["noise"])
    np.testing.assert_allclose(metrics["rmse"], rmse, rtol=1e-6)
    np.testing.assert_allclose(metrics["nlpd_point"], nlpd, rtol=1e-6)
