r"""The collapsed (Titsias) bound on ill-conditioned problems, for every feature family (issue 17, item 1).

The bound used to form :math:`WW^\top = R^\top K_{uu}^{-1}(K_{uf}K_{fu})K_{uu}^{-1}R`, squaring the
condition number of Kuu: with dense inducing grids or long lengthscales it was NaN, or *above* the exact
log marginal likelihood (the issue's reproducer: +0.39 nats at M = 10, NaN at M = 20 and 40). It is now
evaluated from a square root of A (see the :mod:`ppl_sparsegp.approximations.collapsed` docstring). Checked here on
ill-conditioned inputs (lengthscales long relative to the data range, dense grids or many features,
noise variance 1e-2 down to 1e-4):

* float64: the bound is finite and ≤ :func:`exact_log_marginal_likelihood` (dense Cholesky) up to
  rounding; where the features span the data it is tight, and for VFF it equals an independent dense
  evaluation of the Titsias formula (so the large VFF gaps at long lengthscales are the bound's true
  value, not a numerical loss);
* float32 (noise 1e-2): the float32 bound is finite, float32, and ≤ the float64 exact value up to
  float32 rounding, also in the cases that used to fail (B formed in float32, Rotation's dtype);
* precomputed statistics (``fourier_statistics`` → ``with_root``) give the bound of the raw data;
* ``CollapsedGP`` under SVI on the reproducer has finite losses (it had 300/300 NaN);
* on small, well-conditioned data the bound equals the exact log marginal likelihood when Z = X, equals
  the dense Titsias formula, stays below exact for subsets; ``CollapsedGP`` under SVI and NUTS recovers
  the noise variance.

Random Fourier features are the exception: their Kuu, Kuf are not covariances of the GP prior
(:math:`\operatorname{diag}(K_{ff} - Q_{ff}) = 0` but :math:`K_{ff} \ne Q_{ff}`, so
:math:`K_{ff} - Q_{ff}` is indefinite), and the "bound" is the sparse-spectrum marginal likelihood, which
may exceed the exact value; it is checked against a dense evaluation of that likelihood instead.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from numpyro.infer import MCMC, NUTS, SVI, Trace_ELBO, TraceMeanField_ELBO
from numpyro.infer.util import log_density
from regression import KERNEL, NOISE, data

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import (
    collapsed_elbo,
    collapsed_elbo_from_stats,
    exact_log_marginal_likelihood,
)
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features import (
    AdditiveFeatures,
    FourierFeatures,
    HarmonicFeatures,
    HermiteFeatures,
    InducingPoints,
    KroneckerFeatures,
    RandomFourierFeatures,
    TrigonometricFeatures,
)
from ppl_sparsegp.features.fourier_statistics import fourier_statistics
from ppl_sparsegp.groups import Negation, Rotation
from ppl_sparsegp.kernels import constant_kernel_diagonal
from ppl_sparsegp.likelihoods import Gaussian

F32 = jnp.float32
# float64 allowance for "bound ≤ exact". Both are sums of O(N) terms whose largest, yᵀy/(2σ²), reaches
# ~3e3·|exact| at σ² = 1e-4 here, evaluated through backward-stable Cholesky factors and reductions: a
# few hundred ε₆₄·3e3 ≈ 1e-10·|exact| at most in practice. Where the bound is tight (Hermite) the
# measured bound − exact is +1.7e-12·|exact|. 1e-8 leaves a wide margin and is still 6000 times below the
# old overshoot on the reproducer (+6.1e-5·|exact| at M = 10).
RTOL64 = 1e-8
# float32 (ε = 2⁻²³ ≈ 1.2e-7): at σ² = 1e-2 the terms of the bound are up to ~100·|exact| in these cases
# and reductions over N ≤ 1000 and factorisations add a factor ~10: 1.2e-7·100·10 ≈ 1e-4·|exact|.
# Measured: the float32 bound of the jitter-free families (VFF, Hermite, trigonometric) is within
# 1.2e-5·|bound| of the float64 one. For the jittered families (inducing points, harmonic) the float32
# rounding is larger, up to 8e-3·|exact| (B = I + GGᵀ/σ² is formed explicitly; see the known failures
# below), but in the cases tested their float32 jitter (1e-5·σ_f² instead of 1e-10·σ_f²) lowers the bound
# at least 40 times more than their rounding, so they stay robustly below exact.
RTOL32 = 1e-4
# The float32 cases use σ² = 1e-2, so that N σ_f²/σ² ≤ 1e5 stays far below 1/ε₃₂ ≈ 8e6: at σ² = 1e-4 the
# unit diagonal of B = I + GGᵀ/σ² is at the rounding level of GGᵀ/σ² and B's Cholesky can fail
# (measured: NaN for additive-vff at σ² = 1e-4, depending on how XLA fuses the products).
NOISE32 = 1e-2

_bound = jax.jit(collapsed_elbo)
_exact = jax.jit(exact_log_marginal_likelihood)
_bound_from_stats = jax.jit(lambda feature, kernel, stats, sum_kff, noise:
                            collapsed_elbo_from_stats(psg.Kuu(feature, kernel), stats, sum_kff, noise))
_kuu_kuf = jax.jit(lambda feature, kernel, X: (psg.Kuu(feature, kernel).to_dense(), psg.Kuf(feature, kernel, X)))


# --- data (fixed seeds) -------------------------------------------------------------------------------
def line(n, seed=0):
    """The issue's data: x = sort(U(0, 1)), y = sin(12 x)."""
    x = np.sort(np.random.default_rng(seed).uniform(0.0, 1.0, n))
    return x[:, None], np.sin(12 * x)


def plane(n, seed=1):
    X = np.random.default_rng(seed).uniform(0.0, 1.0, (n, 2))
    return X, np.sin(6 * X[:, 0]) + X[:, 1] ** 2


def normal1(n, seed=2):
    x = np.random.default_rng(seed).normal(size=n)
    return x[:, None], np.sin(2 * x)


def normal2(n, seed=3):
    X = np.random.default_rng(seed).normal(size=(n, 2))
    return X, np.cos(X[:, 0]) + X[:, 1]


def grid(M):
    return np.linspace(0.0, 1.0, M)[:, None]


Z2 = np.random.default_rng(4).normal(size=(30, 2))  # inducing inputs of the harmonic cases (T·30 features)
SE, M12, M32, M52 = psg.SquaredExponential, psg.Matern12, psg.Matern32, psg.Matern52


def to_float32(tree):
    """Every floating leaf of a feature/kernel pytree as float32 (static fields are untouched)."""
    return jax.tree.map(lambda a: jnp.asarray(a, F32) if jnp.issubdtype(jnp.result_type(a), jnp.floating)
                        else a, tree)


# --- ill-conditioned cases: name -> builder of (feature, kernel, X, y); noise variance in NOISE64 -------
CASES = {
    # the issue's reproducer: N = 1000, SE(1, 0.5), Z a grid of M points on [0, 1]
    "ip-issue-M10": lambda: (InducingPoints(grid(10)), SE(1.0, 0.5), *line(1000)),
    "ip-issue-M20": lambda: (InducingPoints(grid(20)), SE(1.0, 0.5), *line(1000)),
    "ip-issue-M40": lambda: (InducingPoints(grid(40)), SE(1.0, 0.5), *line(1000)),
    # lengthscale 5 and 2 times the data range, 100 and 50 grid points (old code: NaN)
    "ip-se-long": lambda: (InducingPoints(grid(100)), SE(1.0, 5.0), *line(500)),
    "ip-matern52-long": lambda: (InducingPoints(grid(50)), M52(1.0, 2.0), *line(500)),
    # VFF: 99 features, lengthscale 5 on the box [-0.5, 1.5]: Kuu's diagonal spans 5, 10 and 15 decades
    "vff-matern12": lambda: (FourierFeatures(-0.5, 1.5, 50), M12(1.0, 5.0), *line(500)),
    "vff-matern32": lambda: (FourierFeatures(-0.5, 1.5, 50), M32(1.0, 5.0), *line(500)),
    "vff-matern52": lambda: (FourierFeatures(-0.5, 1.5, 50), M52(1.0, 5.0), *line(500)),
    "additive-vff": lambda: (AdditiveFeatures([FourierFeatures(-0.5, 1.5, 30)] * 2),
                             psg.Additive([M32(1.0, 5.0), M52(0.5, 5.0)]), *plane(400)),
    "kronecker-vff": lambda: (KroneckerFeatures([FourierFeatures(-0.5, 1.5, 7)] * 2),  # 169 features
                              psg.Product([M32(1.0, 5.0), M52(1.0, 5.0)]), *plane(400)),
    "additive-ip": lambda: (AdditiveFeatures([InducingPoints(grid(25))] * 2),
                            psg.Additive([SE(1.0, 5.0), SE(0.5, 5.0)]), *plane(400)),
    # orthogonal features (Kuu = I): long lengthscale, many features
    "hermite": lambda: (HermiteFeatures(30, input_scale=1.0), SE(1.0, 5.0), *normal1(500)),
    "trig-se": lambda: (TrigonometricFeatures(31, band=3.0), SE(1.0, 5.0), *normal1(500)),
    "trig-matern32": lambda: (TrigonometricFeatures(61, band=6.0), M32(1.0, 1.0), *normal1(500)),
    # harmonic features: 30 inducing inputs per sub-kernel, lengthscale 5 (old code: NaN)
    "harmonic-negation": lambda: (HarmonicFeatures(Negation(), Z2), SE(1.0, 5.0), *normal2(400)),
    "harmonic-rotation": lambda: (HarmonicFeatures(Rotation(4), Z2), SE(1.0, 5.0), *normal2(400)),
}
NOISE64 = {name: 1e-2 if name.startswith("ip-issue") else 1e-4 for name in CASES}
VFF = ["vff-matern12", "vff-matern32", "vff-matern52", "additive-vff", "kronecker-vff"]
JITTER_FREE = VFF + ["hermite", "trig-se", "trig-matern32"]  # no jitter: float32 ≈ float64

# float32 at σ² = NOISE32, sizes restricted where float32 rounding would decide the outcome:
# * inducing points with lengthscale 5 (ip-se-long): the float32 jitter lowers the bound by only
#   ~1e-4·|exact|, the same size as the rounding (6e-5), so SE(1, 2) with 50 points is used instead;
# * harmonic: lengthscale 1 (at lengthscale 5 the bound overshoots, see the known failures; Rotation's
#   orbit is promoted to float64, ditto);
# * additive inducing points are left out: their float32 rounding is 6e-4..8e-3·|exact| upwards, so
#   whether they stay below exact depends on the jitter's offset (8e-4..1e-2·|exact|).
FLOAT32_CASES = {name: CASES[name] for name in CASES
                 if not name.startswith(("harmonic", "additive-ip", "ip-se-long"))}
FLOAT32_CASES["ip-se-long"] = lambda: (InducingPoints(grid(50)), SE(1.0, 2.0), *line(500))
FLOAT32_CASES["harmonic-negation-short"] = lambda: (HarmonicFeatures(Negation(), Z2), SE(1.0, 1.0),
                                                     *normal2(400))


def _float32_bound(feature, kernel, X, y, noise):
    return _bound(to_float32(feature), to_float32(kernel), jnp.asarray(X, F32), jnp.asarray(y, F32),
                  F32(noise))


@pytest.mark.parametrize("name", list(CASES))
def test_float64_bound_is_finite_and_below_exact(name):
    feature, kernel, X, y = CASES[name]()
    noise = NOISE64[name]
    bound, exact = float(_bound(feature, kernel, X, y, noise)), float(_exact(kernel, X, y, noise))
    assert np.isfinite(exact)
    assert np.isfinite(bound), (name, bound)
    assert bound <= exact + RTOL64 * abs(exact), (name, bound, exact, (bound - exact) / abs(exact))


def test_issue_reproducer_is_nearly_tight():
    """On the reproducer the bound is within 0.05 nats of exact (measured gaps 7.3e-3, 2.5e-3 and
    1.2e-3 for M = 10, 20, 40): a constant, or a bound losing the data fit, fails."""
    X, y = line(1000)
    kernel = SE(1.0, 0.5)
    exact = float(_exact(kernel, X, y, 1e-2))
    gaps = [exact - float(_bound(InducingPoints(grid(M)), kernel, X, y, 1e-2)) for M in (10, 20, 40)]
    assert all(-RTOL64 * abs(exact) <= g < 0.05 for g in gaps), gaps


# Features that span the data: the bound is tight. With every input an inducing input, Kuf is Kuu without
# its jitter j = 1e-10·σ_f², so Q = Σ_b K_b(K_b + jI)⁻¹K_b ⪰ K − c·jI over the c ≤ 2 blocks (additive,
# harmonic sub-kernels), and exact − bound ≤ c(N j/σ² + |y|² j/(2σ⁴)) ≤ 2e-4 here (N ≤ 300, |y|² ≤ 181,
# σ² = 1e-2). For the Kronecker product of jittered factors the perturbation is j(K₁⊗I + I⊗K₂) + j²I,
# whose effect is smaller still (measured gap 9e-7). For the expansions the truncation residual remains
# (measured: Hermite 9e-10, trigonometric 2e-5, VFF ≤ 5e-5). 1e-3 covers both; a bound off by a
# constant fails (|exact| is 80 to 3000 here).
def _kronecker_grid_case():
    axes = [np.linspace(0.0, 1.0, 12), np.linspace(0.0, 1.0, 10)]
    X = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2)
    return (KroneckerFeatures([InducingPoints(a[:, None]) for a in axes]),
            psg.Product([SE(1.0, 0.5), M52(1.0, 0.5)]), X, np.sin(6 * X[:, 0]) + X[:, 1] ** 2, 1e-2)


def _additive_case():
    X, y = plane(150)
    return (AdditiveFeatures([InducingPoints(X[:, :1]), InducingPoints(X[:, 1:])]),
            psg.Additive([SE(1.0, 0.5), SE(0.5, 0.5)]), X, y, 1e-2)


TIGHT = {
    # Kuu = k(X, X) of 300 sorted points in [0, 1]: singular to machine precision (old code: NaN)
    "ip-Z=X": lambda: (InducingPoints(line(300)[0]), SE(1.0, 0.5), *line(300), 1e-2),
    "additive-ip-Z=X": _additive_case,
    "kronecker-ip-grid": _kronecker_grid_case,
    "harmonic-Z=X": lambda: (HarmonicFeatures(Negation(), normal2(100)[0]), SE(1.0, 2.0), *normal2(100), 1e-2),
    "hermite-M60": lambda: (HermiteFeatures(60, input_scale=1.0), SE(1.0, 1.0), *normal1(500), 1e-4),
    "trig-M101": lambda: (TrigonometricFeatures(101, band=12.0), SE(1.0, 0.5), *normal1(500), 1e-3),
    "vff-matern52-M200": lambda: (FourierFeatures(-1.5, 2.5, 200), M52(1.0, 0.2), *line(100), 1e-2),
}


@pytest.mark.parametrize("name", list(TIGHT))
def test_bound_is_tight_when_the_features_span_the_data(name):
    feature, kernel, X, y, noise = TIGHT[name]()
    bound, exact = float(_bound(feature, kernel, X, y, noise)), float(_exact(kernel, X, y, noise))
    gap = exact - bound
    assert -RTOL64 * abs(exact) <= gap < 1e-3, (name, gap, exact)


def _dense_titsias(feature, kernel, X, y, noise):
    """log N(y | 0, Q + σ²I) − tr(K − Q)/(2σ²) by dense N × N linear algebra, independent of the bound's
    whitening: Q = Φ̃ᵀ C⁻¹ Φ̃ with the Jacobi-scaled C = S⁻¹ Kuu S⁻¹, Φ̃ = S⁻¹ Kuf, S = diag(Kuu)^½.
    For VFF, Kuu = D + BBᵀ with a small-rank B, so cond(C) < 2 (measured) although cond(Kuu) ~ 1e10."""
    Kd, Kuf = (np.asarray(a) for a in _kuu_kuf(feature, kernel, X))
    s = np.sqrt(np.diag(Kd))
    C, P = Kd / np.outer(s, s), Kuf / s[:, None]
    assert np.linalg.cond(C) < 10
    Q = P.T @ np.linalg.solve(C, P)
    Cn = Q + noise * np.eye(len(y))
    fit = -0.5 * (y @ np.linalg.solve(Cn, y) + np.linalg.slogdet(Cn)[1] + len(y) * math.log(2 * math.pi))
    return fit - 0.5 * (np.sum(np.asarray(kernel.diag(X))) - np.trace(Q)) / noise


@pytest.mark.parametrize("name", VFF)
def test_vff_bound_equals_dense_titsias_formula_when_ill_conditioned(name):
    """At lengthscale 5 on a box of width 2 the VFF bound is far below exact (the periodic basis misses
    the nearly linear, non-periodic functions of the RKHS): that is its true value, as an independent
    dense evaluation shows (measured agreement ≤ 4e-12 relative; float64 with cond(C) < 10 and
    cond(Q + σ²I) ≤ N σ_f²/σ² ≈ 1e7 supports 1e-9)."""
    feature, kernel, X, y = CASES[name]()
    noise = NOISE64[name]
    bound = float(_bound(feature, kernel, X, y, noise))
    np.testing.assert_allclose(bound, _dense_titsias(feature, kernel, X, y, noise), rtol=1e-9)


# --- float32 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(FLOAT32_CASES))
def test_float32_bound_is_finite_and_below_exact(name):
    feature, kernel, X, y = FLOAT32_CASES[name]()
    bound32 = _float32_bound(feature, kernel, X, y, NOISE32)
    assert bound32.dtype == F32  # computed in float32, not promoted
    exact = float(_exact(kernel, X, y, NOISE32))  # float64 reference
    assert np.isfinite(float(bound32)), (name, bound32)
    assert float(bound32) <= exact + RTOL32 * abs(exact), (name, float(bound32), exact,
                                                           (float(bound32) - exact) / abs(exact))
    if name in JITTER_FREE:  # the same bound as float64 up to float32 rounding (measured ≤ 1.2e-5)
        bound64 = float(_bound(feature, kernel, X, y, NOISE32))
        np.testing.assert_allclose(float(bound32), bound64, rtol=RTOL32)


# Former float32 failures (σ² = 1e-2), each now checked: forming B = I + GGᵀ/σ² in float32 lifted the
# bound above exact by 1.2e-2 and 5.4e-3 of |exact| (200 dense points with lengthscale 1; 30 points per
# sub-kernel with lengthscale 5), and Rotation.power promoted float32 inputs to float64 (Cholesky NaN).
# Now L_B comes from the QR factor of [Gᵀ/σ; I], W y is formed as G y, and Rotation keeps float32:
# measured −2.3e-3, −2.4e-2 and −1.9e-2 of |exact|, the float64 values with the float32 jitter.
FLOAT32_HARD = {
    "ip-matern52-dense": lambda: (InducingPoints(grid(200)), M52(1.0, 1.0), *line(1000)),
    "harmonic-negation-long": CASES["harmonic-negation"],
    "harmonic-rotation": CASES["harmonic-rotation"],
}


@pytest.mark.filterwarnings("ignore::ppl_sparsegp.features.base.Float32Warning")  # M = 200: past the limit on purpose
@pytest.mark.parametrize("name", list(FLOAT32_HARD))
def test_float32_hard_cases_are_finite_and_below_exact(name):
    feature, kernel, X, y = FLOAT32_HARD[name]()
    bound32 = _float32_bound(feature, kernel, X, y, NOISE32)
    exact = float(_exact(kernel, X, y, NOISE32))
    assert bound32.dtype == F32 and np.isfinite(float(bound32))
    assert float(bound32) <= exact + RTOL32 * abs(exact)


# --- random Fourier features: the sparse-spectrum marginal likelihood -----------------------------------
@pytest.mark.parametrize("lengthscale, R, noise", [(5.0, 100, 1e-4), (1.0, 300, 1e-3), (0.3, 300, 1e-2)])
def test_random_fourier_bound_is_the_sparse_spectrum_likelihood(lengthscale, R, noise):
    """Long lengthscales make the 2R features nearly collinear (ΦᵀΦ numerically rank-deficient): the bound
    is finite and equals log N(y | 0, σ_f²ΦᵀΦ + σ²I) evaluated densely (in the last case it is 3.1 nats
    above the exact GP value: RFF are not a lower bound). float32 at σ² = 1e-2 matches float64."""
    X, y = plane(400)
    W = np.random.default_rng(5).normal(size=(R, 2))
    feature, kernel = RandomFourierFeatures(W), SE(0.8, lengthscale)
    bound = float(_bound(feature, kernel, X, y, noise))
    proj = W @ (X / lengthscale).T
    Phi = np.concatenate([np.cos(proj), np.sin(proj)]) / math.sqrt(R)
    C = 0.8 * Phi.T @ Phi + noise * np.eye(len(y))
    ref = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + len(y) * math.log(2 * math.pi))
    assert np.isfinite(bound)
    np.testing.assert_allclose(bound, ref, rtol=1e-9)  # cond(C) ≤ 1 + N σ_f²/σ² ≈ 3e6: float64 is ample
    if noise == NOISE32:
        bound32 = _float32_bound(feature, kernel, X, y, noise)
        assert bound32.dtype == F32
        np.testing.assert_allclose(float(bound32), bound, rtol=RTOL32)


# --- precomputed statistics ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vff-matern52", "additive-vff"])
def test_precomputed_statistics_give_the_bound_of_the_data(name):
    """fourier_statistics → with_root (A = root rootᵀ) → the bound equals collapsed_elbo on the raw data,
    both directly and through CollapsedGP(statistics=...), in the ill-conditioned VFF cases (A itself is
    numerically singular: many high frequencies over a data range half the box)."""
    feature, kernel, X, y = CASES[name]()
    noise = NOISE64[name]
    stats = fourier_statistics(feature, X, y)
    assert stats.root is None
    rooted = stats.with_root()
    A, root = np.asarray(stats.A), np.asarray(rooted.root)
    assert root.shape == (feature.num_features, feature.num_features)
    # eigh is backward stable: ‖U Λ Uᵀ − A‖ ~ M ε ‖A‖ ≈ 2e-14 ‖A‖; clipping the negative eigenvalues
    # (≥ −1e-15 ‖A‖ measured) changes less. Measured 2e-15.
    assert np.max(np.abs(root @ root.T - A)) <= 1e-12 * np.max(np.abs(A))
    assert rooted.with_root() is rooted  # a root is computed once
    on_data = float(_bound(feature, kernel, X, y, noise))
    sum_kff = len(y) * constant_kernel_diagonal(kernel)
    from_stats = float(_bound_from_stats(feature, kernel, rooted, sum_kff, noise))
    # same quantity from A's root instead of Kuf: measured agreement ≤ 2e-13 relative
    np.testing.assert_allclose(from_stats, on_data, rtol=1e-8)
    gp = psg.CollapsedGP(feature, kernel, Gaussian(noise), statistics=stats)
    assert gp.precomputed.root is not None  # with_root once, at construction
    model_value = float(jax.jit(lambda: log_density(gp.model, (), {}, {})[0])())
    np.testing.assert_allclose(model_value, on_data, rtol=1e-8)
    assert np.isfinite(on_data) and on_data <= float(_exact(kernel, X, y, noise))


def test_keep_root_statistics_equal_product_statistics():
    """SufficientStatistics.from_kuf(keep_root=True) keeps Kuf as the root and skips A; with A (keep_root=False)
    the root comes from with_root: root rootᵀ = A either way, and the other statistics agree exactly."""
    feature, kernel, X, y = CASES["vff-matern32"]()
    Kmn = psg.Kuf(feature, kernel, X)
    kept, product = SufficientStatistics.from_kuf(Kmn, y, keep_root=True), SufficientStatistics.from_kuf(Kmn, y)
    assert isinstance(kept, SufficientStatistics) and kept.A is None and product.root is None
    assert kept.num_features == product.num_features == feature.num_features
    A = np.asarray(product.A)
    np.testing.assert_allclose(np.asarray(kept.root) @ np.asarray(kept.root).T, A, rtol=0, atol=1e-12 * A.max())
    rooted = np.asarray(product.with_root().root)
    np.testing.assert_allclose(rooted @ rooted.T, A, rtol=0, atol=1e-12 * A.max())
    for field in ("c", "yy", "n", "f1", "ysum"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(product, field))


# --- SVI --------------------------------------------------------------------------------------------------
def test_collapsed_gp_svi_on_the_issue_reproducer_is_finite():
    """CollapsedGP with point-estimated hyperparameters under SVI (Adam) on the reproducer: every loss is
    finite (with the old bound every loss was NaN), the first one is −bound at the initial values, and
    the loss decreases."""
    X, y = line(1000)
    positive = constraints.positive
    gp = psg.CollapsedGP(InducingPoints(grid(20)), SE(psg.Param(1.0, positive), psg.Param(0.5, positive)),
                         Gaussian(psg.Param(1e-2, positive)))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 30, jnp.asarray(X), jnp.asarray(y), progress_bar=False)
    losses = np.asarray(result.losses)
    assert np.all(np.isfinite(losses)), f"{np.sum(~np.isfinite(losses))} of {losses.size} losses not finite"
    assert all(np.isfinite(float(v)) for v in result.params.values())
    initial = float(_bound(InducingPoints(grid(20)), SE(1.0, 0.5), X, y, 1e-2))
    np.testing.assert_allclose(losses[0], -initial, rtol=1e-10)  # unconstrained round trip of the inits
    assert losses[-1] < losses[0]


# --- the bound and CollapsedGP against the exact GP on small, well-conditioned data ----------------------


def test_collapsed_equals_exact_when_z_is_x():
    X, y = data()
    exact = psg.exact_log_marginal_likelihood(KERNEL, X, y, NOISE)
    bound = psg.collapsed_elbo(psg.InducingPoints(X), KERNEL, X, y, NOISE)
    # jitter εσ² (ε = 1e-10) lowers the bound by about Nεσ²/(2σn²) ≈ 4e-8 ≪ 1e-6
    np.testing.assert_allclose(bound, exact, atol=1e-6)
    # independent dense reference for the exact value
    K = np.asarray(KERNEL(X)) + NOISE * np.eye(len(X))
    sign, logdet = np.linalg.slogdet(K)
    ref = -0.5 * (y @ np.linalg.solve(K, y) + logdet + len(X) * np.log(2 * np.pi))
    np.testing.assert_allclose(exact, ref, rtol=1e-12)


def test_collapsed_below_exact_for_subsets():
    X, y = data()
    exact = psg.exact_log_marginal_likelihood(KERNEL, X, y, NOISE)
    rng = np.random.default_rng(1)
    previous = -np.inf
    bound_at = jax.jit(lambda Z: psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE))  # one program
    for m in (3, 8, 15, 29):
        Z = X[np.sort(rng.choice(len(X), m, replace=False))]
        bound = bound_at(Z)
        assert bound < exact
        previous = bound
    assert exact - previous < 1.0  # 29 of 30 points: nearly tight


def test_collapsed_matches_titsias_dense_formula():
    """Independent dense evaluation: log N(y|0, Qff+σ²I) − tr(Kff−Qff)/(2σ²)."""
    X, y = data()
    Z = X[::4]
    Kzz = np.asarray(KERNEL(Z)) + 1e-10 * 1.2 * np.eye(len(Z))
    Kzx = np.asarray(KERNEL(Z, X))
    Q = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    C = Q + NOISE * np.eye(len(X))
    ref = (-0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + len(X) * np.log(2 * np.pi))
           - 0.5 * np.trace(np.asarray(KERNEL(X)) - Q) / NOISE)
    np.testing.assert_allclose(psg.collapsed_elbo(psg.InducingPoints(Z), KERNEL, X, y, NOISE), ref,
                               rtol=1e-9)


@pytest.mark.slow  # 13 s; the bound itself is tested against the exact GP in the fast tests
def test_collapsed_gp_under_nuts_and_svi_recovers_noise():
    rng = np.random.default_rng(4)
    X = jnp.asarray(np.sort(rng.uniform(0, 1, 60))[:, None])
    y = jnp.asarray(np.sin(6 * X[:, 0]) + 0.3 * rng.normal(size=60))
    gp = psg.CollapsedGP(psg.InducingPoints(X[::4]),
                         psg.Matern52(variance=dist.LogNormal(0, 1), lengthscale=dist.LogNormal(-1, 1)),
                         Gaussian(variance=dist.LogNormal(-2, 1)))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 1500, X, y, progress_bar=False)
    noise = res.params["likelihood_variance_map"]
    assert 0.05 < noise < 0.15  # true 0.09
    mcmc = MCMC(NUTS(gp.model), num_warmup=300, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), X, y)
    s = mcmc.get_samples()
    assert 0.05 < float(jnp.median(s["likelihood_variance"])) < 0.15
    pred = gp.with_data(X, y).predict(X, samples=s)
    assert float(jnp.mean((pred["f_mean"] - jnp.sin(6 * X[:, 0])) ** 2)) < 0.02


def test_common_mistakes_get_a_clear_error_naming_the_argument_and_the_fix():
    """The 'common mistakes' of the reliability probe (issue 17, item 5): each raises ValueError with
    the argument and the fix, not a JAX internal error or a silent result."""
    from numpyro import handlers

    X, y = np.linspace(0, 1, 20)[:, None], np.sin(np.linspace(0, 6, 20))
    f, template = psg.FourierFeatures(-0.5, 1.5, 8), psg.Matern32(lengthscale=dist.LogNormal(0.0, 1.0))
    gp = psg.SparseGP(f, psg.Matern32(), psg.Gaussian(0.1))
    cases = [
        (lambda: psg.collapsed_elbo(f, template, X, y, 0.1), "collapsed_elbo takes a concrete kernel.*lengthscale"),
        (lambda: psg.exact_log_marginal_likelihood(template, X, y, 0.1), "takes a concrete kernel"),
        (lambda: psg.spectral_gp("f", f, template, X), "inside a NumPyro model"),
        (lambda: psg.collapsed_elbo(f, psg.Matern32(), X, y + 1j, 0.1), "y is complex"),
        (lambda: handlers.seed(gp.model, 0)(X, y + 1j), "y is complex"),
        (lambda: psg.collapsed_elbo(f, psg.Matern32(), X[:0], y[:0], 0.1), "X has no rows"),
        (lambda: handlers.seed(gp.model, 0)(X[:0], y[:0]), "X has no rows"),
        (lambda: psg.InducingPoints(np.ones((0, 1))), "Z has no rows"),
        (lambda: psg.collapsed_elbo(psg.InducingPoints(np.ones((3, 2))), psg.Matern32(), X, y, 0.1),
         r"X has 1 input dimensions but the inducing inputs Z have 2: give Z of shape \(M, 1\)"),
        (lambda: psg.FourierFeatures(0, 1, None), "num_frequencies must be a positive integer, got None"),
        (lambda: psg.FourierFeatures(0, 1, True), "num_frequencies must be a positive integer, got True"),
        (lambda: psg.Kuf(psg.HermiteFeatures(5), psg.SquaredExponential(1.0, np.array([0.3, 0.4])), X),
         "lengthscale must be a scalar.*AdditiveOrthogonal"),
        (lambda: handlers.seed(psg.SparseGP(f, psg.Matern32(), psg.Poisson(exposure=np.ones(7))).model, 0)(
            X, np.ones(20)), r"exposure has shape \(7,\) but y has \(20,\)"),
    ]
    for fn, match in cases:
        with pytest.raises(ValueError, match=match):
            fn()


def test_a_bound_too_large_for_memory_is_refused_naming_the_size(monkeypatch):
    """M' × M' matrices that cannot fit are refused before anything is allocated (the probe's VFF with
    M = 20 000 was killed by the OS): on a machine reporting 1 GB, 9 999 features (2.4 GB) are refused."""
    from ppl_sparsegp.linalg import woodbury

    monkeypatch.setattr(woodbury.os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**18}[name])
    X, y = np.linspace(0, 1, 20)[:, None], np.sin(np.linspace(0, 6, 20))
    with pytest.raises(ValueError, match=r"M' = 9999 features needs .* about 2.4 GB, but this machine has 1.1 GB"):
        psg.collapsed_elbo(psg.FourierFeatures(-0.5, 1.5, 5000), psg.Matern32(), X, y, 0.1)
    assert np.isfinite(psg.collapsed_elbo(psg.FourierFeatures(-0.5, 1.5, 100), psg.Matern32(), X, y, 0.1))
