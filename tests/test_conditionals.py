r"""The one q(u) → q(f) conditional (:mod:`ppl_sparsegp.conditionals`) against dense computations.

* the default against dense matrices (the Matérn-3/2 kernel evaluated here with NumPy):
  mean :math:`K_{fu}K_{uu}^{-1}\mathbf m`, variance :math:`k_{nn} - [K_{fu}K_{uu}^{-1}K_{uf}]_{nn} +
  [A^\top SA]_{nn}` with :math:`A = K_{uu}^{-1}K_{uf}`; with ``q_cov=None`` the conditional p(f | u);
* whitened = centred: q(v) = N(m, S) gives the marginals of q(u) = N(Rm, RSRᵀ), for a square R (inducing
  points) and a non-square one (VFF, R = [D^½, B]);
* the Kronecker override on a Grid equals the default on the grid's points.
"""
import jax
import numpy as np
import pytest

import ppl_sparsegp as psg
from ppl_sparsegp.conditionals import conditional
from ppl_sparsegp.features import FourierFeatures, InducingPoints, KroneckerFeatures
from ppl_sparsegp.grid import Grid
from ppl_sparsegp.linalg import Dense

RNG = np.random.default_rng(0)
VARIANCE, LENGTHSCALE = 1.3, 0.4
KERNEL = psg.Matern32(VARIANCE, LENGTHSCALE)
X = np.sort(RNG.uniform(0.0, 1.0, 12))[:, None]
Z = np.linspace(0.05, 0.95, 5)[:, None]
XZ = np.vstack([X, Z])  # the inputs of every call below (one compilation per feature type)


def matern32(A, B):
    """σ²(1 + √3 r/ℓ) exp(−√3 r/ℓ), written out here."""
    r = np.sqrt(3.0) * np.abs(A[:, None, 0] - B[None, :, 0]) / LENGTHSCALE
    return VARIANCE * (1 + r) * np.exp(-r)


def random_q(n):
    L = np.tril(RNG.normal(size=(n, n))) * 0.3
    L[np.diag_indices(n)] = np.abs(L[np.diag_indices(n)]) + 0.2
    return RNG.normal(size=n), L @ L.T


@jax.jit
def _whitened_and_centred(feature, X, m, S, kernel=KERNEL):
    """q(v) = N(m, S) whitened and q(u) = N(Rm, RSRᵀ) centred, with q_cov and without, in one compilation
    per feature type; also R."""
    R = psg.Kuu(feature, kernel).sqrt()
    u, S_u = R @ m, R @ S @ R.T
    return {"white": conditional(feature, kernel, X, m, Dense(S), whiten=True),
            "white_no_q": conditional(feature, kernel, X, m, whiten=True),
            "centred": conditional(feature, kernel, X, u, Dense(S_u), whiten=False),
            "centred_no_q": conditional(feature, kernel, X, u, whiten=False), "R": R}


def test_default_equals_dense_computation():
    """Inducing points, centred, at 12 inputs and at the 5 inducing inputs. The jitter εσ² (ε = 1e-10)
    added to Kuu is added here too; tolerance 1e-9 absolute on O(1) values (Kuu's condition number is 34)."""
    m_v, S_v = random_q(5)
    out = _whitened_and_centred(InducingPoints(Z), XZ, m_v, S_v)
    R = np.asarray(out["R"])
    m, S = R @ m_v, R @ S_v @ R.T  # q(u) = N(m, S)
    Kuu = matern32(Z, Z) + 1e-10 * VARIANCE * np.eye(5)
    Kuf = matern32(Z, X)
    A = np.linalg.solve(Kuu, Kuf)
    (mean, var), (mean0, var0) = [(a[:12], b[:12]) for a, b in (out["centred"], out["centred_no_q"])]
    np.testing.assert_allclose(mean, Kuf.T @ np.linalg.solve(Kuu, m), atol=1e-9)
    np.testing.assert_allclose(var, VARIANCE - np.sum(Kuf * A, 0) + np.sum(A * (S @ A), 0), atol=1e-9)
    # q_cov=None: p(f | u = m), the Gaussian conditional of the joint prior of (u, f)
    np.testing.assert_allclose(mean0, mean, atol=1e-12)
    np.testing.assert_allclose(var0, np.diag(matern32(X, X) - Kuf.T @ A), atol=1e-9)
    # at the inducing inputs themselves f = u: the mean is m, the variance that of q(u), and 0 given u
    np.testing.assert_allclose(out["centred"][0][12:], m, atol=1e-8)
    np.testing.assert_allclose(out["centred"][1][12:], np.diag(S), atol=1e-8)
    np.testing.assert_allclose(out["centred_no_q"][1][12:], 0.0, atol=1e-8)


@pytest.mark.parametrize("feature, kernel", [(InducingPoints(Z), KERNEL), (FourierFeatures(-0.5, 1.5, 4), KERNEL),
                                             (FourierFeatures(-0.5, 1.5, 4), psg.Matern52(VARIANCE, LENGTHSCALE))],
                         ids=["points", "vff", "vff-wide"])
def test_whitened_equals_centred(feature, kernel):
    """u = R v with R Rᵀ = Kuu (VFF with Matérn-3/2: R = D^½(I + GGᵀ)^½, 7 × 7; with Matérn-5/2 R is
    7 × 10, so v has more coordinates than u): conditional(v ~ N(m, S), whiten=True) =
    conditional(u ~ N(Rm, RSRᵀ), whiten=False), with q_cov and without. Relative 1e-9: both sides
    solve with the same Kuu (condition number 34 and 18)."""
    m, S = random_q(psg.Kuu(feature, kernel).sqrt_cols)
    out = _whitened_and_centred(feature, XZ, m, S, kernel)
    assert out["R"].shape == (feature.num_features, feature.num_features + (3 if kernel.nu == 2.5 else 0))
    for a, b in [(out["white"], out["centred"]), (out["white_no_q"], out["centred_no_q"])]:
        np.testing.assert_allclose(a[0], b[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12)


def test_kronecker_override_on_a_grid_equals_the_default():
    """KroneckerFeatures registers its own conditional for Grid inputs (per-axis projections, no
    (M × N) Kuf); on the grid's points it must agree with the default, whitened and centred (axes of
    different lengths: the override's q_cov term used to pair the axes' columns and fail)."""
    feature = KroneckerFeatures([FourierFeatures(-1.0, 2.0, 2), FourierFeatures(-1.0, 2.0, 2)])
    kernel = psg.Product([psg.Matern12(1.3, 0.5), psg.Matern52(0.8, 0.3)])
    grid = Grid([np.linspace(0.0, 1.0, 4), np.linspace(0.1, 0.9, 3)])
    assert conditional.dispatch(feature) is not conditional.default
    Kmm = psg.Kuu(feature, kernel)
    sizes = {True: Kmm.sqrt_cols, False: Kmm.size}  # whitened 3 · 6 (Matérn-5/2's R = [D^½, B]), centred 3 · 3
    assert sizes == {True: 18, False: 9}
    qs = {w: random_q(n) for w, n in sizes.items()}

    @jax.jit
    def both(grid, points):
        return [(conditional(feature, kernel, grid, m, Dense(S), whiten=w),
                 conditional.default(feature, kernel, points, m, Dense(S), whiten=w)) for w, (m, S) in qs.items()]

    for override, default in both(grid, grid.points()):
        np.testing.assert_allclose(override[0], default[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(override[1], default[1], rtol=1e-10, atol=1e-12)
