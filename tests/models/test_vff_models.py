"""VFF inside NumPyro models: whitened vs centred targets, the pines LGCP density."""
import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density
from scipy import stats

import ppl_sparsegp as psg
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures
from ppl_sparsegp.grid import Grid
from ppl_sparsegp.likelihoods import Poisson


def _lp(model, args, values):
    return float(jax.jit(lambda v: log_density(model, args, {}, v)[0])(values))


@pytest.mark.parametrize("kind", ["1d", "1d-wide", "kronecker"])
def test_whitened_and_centred_targets_agree(kind):
    """The same posterior over u, whitened or centred. Matérn-3/2 ("1d"): R = D^½(I + GGᵀ)^½ is square,
    so log p_w(v) = log p_c(u = Rv) + log|det R|. Matérn-5/2 ("1d-wide"): R = [D^½, B] is not square and
    (v₁, v₂) ↦ (u, v₂) is a bijection with Jacobian |D|^½, so log p_w(v) = log p_c(u = Rv) + log N(v₂ |
    Bᵀ Kuu⁻¹ u, I − Bᵀ Kuu⁻¹ B) + ½ log|D|. Kronecker: the general formula below. Checked at random
    (θ, v) with every term computed densely."""
    rng = np.random.default_rng(0)
    if kind.startswith("1d"):
        feature = FourierFeatures(-1.0, 2.0, 5)
        cls = psg.Matern32 if kind == "1d" else psg.Matern52
        kernel_t = cls(variance=dist.LogNormal(0, 1), lengthscale=dist.LogNormal(-1, 1))
        X = jnp.asarray(rng.uniform(0, 1, (30, 1)))
        theta = {"kernel_variance": 1.3, "kernel_lengthscale": 0.4}
        kernel = cls(1.3, 0.4)
    else:
        feature = KroneckerFeatures([FourierFeatures(-1.0, 2.0, 3)] * 2)
        kernel_t = psg.Product([psg.Matern32(variance=dist.LogNormal(0, 1), lengthscale=0.3),
                                psg.Matern52(variance=1.0, lengthscale=dist.LogNormal(-1, 1))])
        X = Grid([jnp.linspace(0.05, 0.95, 5), jnp.linspace(0.1, 0.9, 4)])
        theta = {"kernel_0_variance": 1.3, "kernel_1_lengthscale": 0.5}
        kernel = psg.Product([psg.Matern32(1.3, 0.3), psg.Matern52(1.0, 0.5)])
    y = jnp.asarray(rng.poisson(2.0, X.shape[0]))
    gw = psg.SparseGP(feature, kernel_t, Poisson(), whiten=True)
    gc = psg.SparseGP(feature, kernel_t, Poisson(), whiten=False)
    Kmm = psg.Kuu(feature, kernel)
    R = np.asarray(Kmm.sqrt())
    K = np.asarray(Kmm.to_dense())
    M = K.shape[0]
    v = rng.normal(size=R.shape[1])
    u = R @ v
    lw = _lp(gw.model, (X, y), {**theta, "f_v": jnp.asarray(v)})
    lc = _lp(gc.model, (X, y), {**theta, "f_u": jnp.asarray(u)})
    if kind == "1d":
        assert R.shape == (M, M)
        np.testing.assert_allclose(lw - lc, np.linalg.slogdet(R)[1], rtol=1e-9, atol=1e-8)
        return
    # v = P (v₁, v₂) where the columns of R split into a square invertible part and the rest
    if kind == "1d-wide":
        D_half, Bm = R[:, :M], R[:, M:]
        v2 = v[M:]
        logdet_half = np.linalg.slogdet(D_half)[1]
    else:  # ⊗R_d: v₂ = the coordinates whose columns are not in ⊗D_d^½; use the general formula
        # p(v) = p(u, w) |J| with w = N v for N an orthonormal basis of null(R): u and w independent
        # coordinates of v up to the rotation [R; N] whose |det| = |det(R Rᵀ)|^½
        null = np.linalg.svd(R)[2][M:]
        w = null @ v
        lhs = lw - lc
        rhs = stats.norm.logpdf(w).sum() + 0.5 * np.linalg.slogdet(K)[1]
        np.testing.assert_allclose(lhs, rhs, rtol=1e-9, atol=1e-8)
        return
    C = Bm.T @ np.linalg.solve(K, Bm)
    mean_v2 = Bm.T @ np.linalg.solve(K, u)
    cond = stats.multivariate_normal(mean_v2, np.eye(len(v2)) - C).logpdf(v2)
    np.testing.assert_allclose(lw - lc, cond + logdet_half, rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("residual", ["none", "expected", "marginal"])
def test_pines_log_density_equals_dense_computation(residual):
    """The pines model's log joint on a small grid against dense matrices and scipy densities, for each
    way the residual variance s² of p(f | u) enters: none (Poisson at the projected process), expected
    (E log p, closed form) and marginal (log E p, by scipy quadrature per cell)."""
    from scipy.integrate import quad

    from models import pines

    spec = pines.build(SimpleNamespace(num_frequencies=3, grid=6))
    gp = pines.make_gp(feature=spec.gp.feature.features[0], residual=residual)
    vals = {"kernel_0_variance": 0.8, "kernel_0_lengthscale": 0.3, "kernel_1_lengthscale": 0.2, "mean": -1.0}
    kernel = psg.Product([psg.Matern32(0.8, 0.3), psg.Matern32(1.0, 0.2)])
    Kmm = psg.Kuu(gp.feature, kernel)
    rng = np.random.default_rng(1)
    v = rng.normal(size=Kmm.sqrt_cols)
    P = np.asarray(spec.X.points())
    Kuf = np.asarray(psg.Kuf(gp.feature, kernel, P))
    K = np.asarray(Kmm.to_dense())
    A = np.linalg.solve(K, Kuf)
    mu = A.T @ (np.asarray(Kmm.sqrt()) @ v) - 1.0
    s2 = 0.8 - np.sum(Kuf * A, 0)
    y = np.asarray(spec.y)
    lgy = np.array([math.lgamma(c + 1) for c in y])
    if residual == "none":
        ve = y * mu - np.exp(mu) - lgy
    elif residual == "expected":
        ve = y * mu - np.exp(mu + s2 / 2) - lgy  # Eq. in notes §1
    else:
        def integrand(f, c, lc, m, sd):  # Poisson(c | e^f) N(f | m, sd²), written out (scalar math: fast in quad)
            return math.exp(c * f - math.exp(f) - lc - 0.5 * ((f - m) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))

        ve = np.log([quad(integrand, m - 12 * math.sqrt(v), m + 12 * math.sqrt(v), args=(c, lc, m, math.sqrt(v)),
                          epsabs=0, epsrel=1e-12, limit=200)[0]
                     for c, lc, m, v in zip(y.tolist(), lgy.tolist(), mu.tolist(), s2.tolist())])
    ref = (ve.sum() + stats.norm.logpdf(v).sum() + stats.gamma(1.0).logpdf(0.8)
           + stats.gamma(0.1).logpdf(0.3) + stats.gamma(0.1).logpdf(0.2) + stats.norm(0, math.sqrt(3)).logpdf(-1.0))
    lp = _lp(gp.model, (spec.X, spec.y), {**vals, "f_v": jnp.asarray(v)})
    # marginal: the 20-point Gauss–Hermite rule against adaptive quadrature; its error is up to 6e-6 per
    # cell here (a count of 3, s² = 0.8) and falls to 1e-13 with 80 points (measured), so rtol 1e-5
    np.testing.assert_allclose(lp, ref, rtol=1e-9 if residual != "marginal" else 1e-5)
    assert y.sum() == 127  # all rows of the published file, as the paper's code
