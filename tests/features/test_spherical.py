r"""Spherical harmonic features and the zonal kernels (issue 31), each against an independent computation:

* the Gegenbauer recurrence against SciPy's ``eval_gegenbauer`` to degree 60, N(d, n) against the count of
  harmonic polynomials, :math:`(n+\alpha)/\alpha\,C_n^\alpha(1) = N(d, n)`;
* orthonormality of the harmonics by exact product quadrature on S² and S³ and by Monte Carlo on S⁸ (d = 9,
  tolerance from the sample's own standard errors), the addition theorem per degree for d = 3…9, and on S²
  the span of SciPy's real spherical harmonics (an independent basis: ours is an orthogonal transform of it);
* Funk–Hecke coefficients: the arc-cosine closed values (d = 3, order 1: 3/8, 1/6, 3/128, 0), the vanishing
  degrees for d = 3…9, the chordal Matérn against adaptive quadrature (``scipy.integrate.quad`` in t), the
  Mercer series :math:`\sum_n a_n\frac{n+\alpha}{\alpha}C_n^\alpha(t) = \kappa(t)` and
  :math:`\sum_n N(d,n)a_n = \kappa(1)`;
* the kernels: Cho & Saul's :math:`J_p` written independently, derivatives by finite differences;
* :math:`K_{fu}K_{uu}^{-1}K_{uf} \to K_{ff}` with its rate, Kff − Qff PSD with the constant residual, the
  collapsed bound below the exact log marginal likelihood and rising with the degree, whitened = unwhitened,
  float32 against float64, the one-pass statistics against the dense ones, the size rule, the warnings and
  errors; then each approximation with the family, unchanged.
"""
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.integrate
import scipy.special
from numpyro.infer import MCMC, NUTS, SVI, Trace_ELBO, TraceMeanField_ELBO

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import collapsed_elbo, exact_log_marginal_likelihood
from ppl_sparsegp.features import OutsideDomainWarning, SphericalHarmonicFeatures
from ppl_sparsegp.features.spherical import spherical_statistics
from ppl_sparsegp.features.spherical_harmonics import (
    MAX_HARMONICS_PER_DEGREE,
    _quadrature,
    fundamental_system,
    funk_hecke_coefficients,
    gegenbauer,
    num_harmonics,
)
from ppl_sparsegp.kernels import ArcCosine, ChordalMatern
from ppl_sparsegp.likelihoods import Bernoulli, Gaussian


def harmonics(d, L, U):
    """[Y_0; …; Y_L] at unit vectors U (K, d) through the feature class, split per degree."""
    Y = np.asarray(SphericalHarmonicFeatures(d - 1, L).harmonics(jnp.asarray(U)))
    return np.split(Y, np.cumsum([num_harmonics(d, n) for n in range(L)]))


def sphere_rule(d, k):
    """Product Gauss rule on S^{d-1} (weights sum to 1), exact for polynomials of degree ≤ 2k − 1:
    x = (u, √(1−u²) w), u Gauss–Jacobi for the weight (1 − u²)^{(d−3)/2}, w the rule on S^{d−2};
    on the circle 2k equispaced angles."""
    if d == 2:
        phi = 2 * np.pi * np.arange(2 * k) / (2 * k)
        return np.stack([np.cos(phi), np.sin(phi)], 1), np.full(2 * k, 1 / (2 * k))
    u, wu = scipy.special.roots_jacobi(k, (d - 3) / 2, (d - 3) / 2)
    W, ww = sphere_rule(d - 1, k)
    pts = np.concatenate([np.repeat(u, len(W))[:, None],
                          np.sqrt(1 - u**2).repeat(len(W))[:, None] * np.tile(W, (k, 1))], 1)
    w = np.outer(wu / wu.sum(), ww).ravel()
    return pts, w


def random_sphere(rng, n, d):
    U = rng.standard_normal((n, d))
    return U / np.linalg.norm(U, axis=1, keepdims=True)


# --- Gegenbauer polynomials and counts --------------------------------------------------------------------
@pytest.mark.parametrize("d", [3, 4, 5, 9])
def test_gegenbauer_recurrence_matches_scipy_and_counts(d):
    alpha = (d - 2) / 2
    t = np.linspace(-1, 1, 101)
    for n in (0, 1, 2, 7, 30, 60):
        ref = scipy.special.eval_gegenbauer(n, alpha, t)
        np.testing.assert_allclose(gegenbauer(n, alpha, t), ref, rtol=0, atol=1e-12 * np.max(np.abs(ref)))
        # N(d, n) = dim of homogeneous harmonic polynomials = C(n+d−1, d−1) − C(n+d−3, d−1)
        assert num_harmonics(d, n) == math.comb(n + d - 1, d - 1) - (math.comb(n + d - 3, d - 1) if n >= 2 else 0)
        assert math.isclose((n + alpha) / alpha * scipy.special.eval_gegenbauer(n, alpha, 1.0), num_harmonics(d, n),
                            rel_tol=1e-12)
    assert [num_harmonics(9, n) for n in range(7)] == [1, 9, 44, 156, 450, 1122, 2508]


# --- the harmonics ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d,L", [(3, 10), (4, 5)])
def test_harmonics_are_orthonormal_by_exact_quadrature(d, L):
    """∫ Y_{n,j} Y_{n',j'} dσ = δ on S² and S³: the product rule is exact for the degree-2L products."""
    U, w = sphere_rule(d, L + 1)
    Y = np.asarray(SphericalHarmonicFeatures(d - 1, L).harmonics(jnp.asarray(U)))
    G = (Y * w) @ Y.T
    np.testing.assert_allclose(G, np.eye(len(G)), atol=1e-11)


def test_harmonics_are_orthonormal_by_monte_carlo_at_d9():
    """d = 9, degrees 0–2 (54 harmonics): the sample Gram within 5 of its own standard errors of I."""
    rng = np.random.default_rng(0)
    N = 50_000
    U = random_sphere(rng, N, 9)
    Y = np.asarray(SphericalHarmonicFeatures(8, 2).harmonics(jnp.asarray(U)))
    G = Y @ Y.T / N
    se = np.sqrt(np.maximum((Y**2) @ (Y**2).T / N - G**2, 0) / N)  # standard errors of the sample means
    np.testing.assert_allclose(Y[0], 1.0, rtol=1e-14)  # Y_0 = 1: no sampling error
    z = np.abs(G - np.eye(len(G)))[1:, 1:] / se[1:, 1:]
    assert np.max(z) < 5.0, np.max(z)  # 1431 distinct entries: P(max |z| > 5) ≈ 1e-3 for Gaussian errors


@pytest.mark.parametrize("d", [3, 4, 5, 6, 7, 8, 9])
def test_addition_theorem_per_degree(d):
    rng = np.random.default_rng(d)
    X, Y = random_sphere(rng, 40, d), random_sphere(rng, 40, d)
    alpha = (d - 2) / 2
    L = 4 if d <= 6 else 3
    HX, HY = harmonics(d, L, X), harmonics(d, L, Y)
    for n in range(L + 1):
        lhs = HX[n].T @ HY[n]
        rhs = (n + alpha) / alpha * scipy.special.eval_gegenbauer(n, alpha, X @ Y.T)
        np.testing.assert_allclose(lhs, rhs, atol=1e-10 * num_harmonics(d, n))


def test_high_degree_on_s2_spans_scipy_real_spherical_harmonics():
    """Degree 40 on S² (the monomial expansion has lost every digit there): ours = O · SciPy's real
    harmonics (normalised to the uniform probability measure) with O orthogonal."""
    n = 40
    rng = np.random.default_rng(1)
    U = random_sphere(rng, 400, 3)
    theta, phi = np.arccos(U[:, 2]), np.arctan2(U[:, 1], U[:, 0])
    rows = []
    for m in range(-n, n + 1):
        Z = scipy.special.sph_harm_y(n, abs(m), theta, phi) * np.sqrt(4 * np.pi)
        rows.append(Z.real if m == 0 else np.sqrt(2) * (Z.imag if m < 0 else Z.real) * (-1) ** m)
    S = np.array(rows)  # (2n + 1, K), orthonormal
    Y = np.asarray(SphericalHarmonicFeatures(2, n, degrees=(n,)).harmonics(jnp.asarray(U)))
    O, *_ = np.linalg.lstsq(S.T, Y.T, rcond=None)
    np.testing.assert_allclose(S.T @ O, Y.T, atol=1e-9)
    np.testing.assert_allclose(O.T @ O, np.eye(2 * n + 1), atol=1e-9)


def test_fundamental_systems_are_deterministic_unit_vectors():
    V1, L1 = fundamental_system(5, 3)
    fundamental_system.cache_clear()
    V2, L2 = fundamental_system(5, 3)
    np.testing.assert_array_equal(V1, V2)
    np.testing.assert_array_equal(L1, L2)
    np.testing.assert_allclose(np.linalg.norm(V1, axis=1), 1.0, atol=1e-14)
    assert V1.shape == (30, 5)


# --- Funk–Hecke coefficients ---------------------------------------------------------------------------------
def test_arccos_coefficients_closed_values():
    a = np.asarray(funk_hecke_coefficients(ArcCosine(1), 3, 5))
    np.testing.assert_allclose(a[:4], [3 / 8, 1 / 6, 3 / 128, 0.0], rtol=1e-13, atol=0)
    # the other closed values (half-integer moments of arccos polynomials on S², d = 3)
    np.testing.assert_allclose(np.asarray(funk_hecke_coefficients(ArcCosine(0), 3, 5)),
                               [1 / 2, 1 / 8, 0, 1 / 128, 0, 1 / 512], rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(np.asarray(funk_hecke_coefficients(ArcCosine(2), 3, 2)), [5 / 18, 5 / 32, 2 / 45],
                               rtol=1e-13)


@pytest.mark.parametrize("d", [3, 4, 5, 6, 7, 8, 9])
def test_arccos_vanishing_degrees_are_exactly_those_declared(d):
    """The raw quadrature (not masked) is 0 to rounding exactly at the declared degrees, > 0 elsewhere."""
    t, P = _quadrature(d, 9, 2 * 9 + 200)
    for order in (0, 1, 2):
        k = ArcCosine(order)
        raw = P @ np.asarray(k.kappa(jnp.asarray(t)))
        zero = np.array([k.vanishing_degree(n, d) for n in range(10)])
        assert np.all(np.abs(raw[zero]) < 1e-15 * raw[0]), (order, raw)
        assert np.all(raw[~zero] > 1e-9 * raw[0]), (order, raw)


@pytest.mark.parametrize("d", [3, 5, 9])
@pytest.mark.parametrize("nu,ell", [(0.5, 0.5), (1.5, 0.3), (2.5, 1.0)])
def test_chordal_matern_coefficients_against_adaptive_quadrature(d, nu, ell):
    k = ChordalMatern(nu, chordal_lengthscale=ell)
    alpha = (d - 2) / 2
    c_d = math.gamma(d / 2) / (math.sqrt(math.pi) * math.gamma((d - 1) / 2))
    a = np.asarray(funk_hecke_coefficients(k, d, 8))
    poly = {0.5: lambda z: 1.0, 1.5: lambda z: 1 + z, 2.5: lambda z: 1 + z + z * z / 3}[nu]

    def kappa(t):  # the Matérn profile at the chordal distance, written out
        z = math.sqrt(2 * nu) * math.sqrt(max(2 - 2 * t, 0.0)) / ell
        return poly(z) * math.exp(-z)

    for n in range(9):
        ref, _ = scipy.integrate.quad(lambda t: kappa(t) * scipy.special.eval_gegenbauer(n, alpha, t)
                                      * (1 - t * t) ** (alpha - 0.5), -1, 1, limit=400, epsabs=1e-15, epsrel=1e-13)
        ref *= c_d / scipy.special.eval_gegenbauer(n, alpha, 1.0)
        assert abs(a[n] - ref) <= 1e-10 * a[0], (n, a[n], ref)
    assert np.all(a > 0)


@pytest.mark.parametrize("d", [3, 5, 9])
def test_mercer_series_and_sum_of_coefficients(d):
    """Σ_n a_n (n+α)/α C_n(t) = κ(t) in the interior and Σ N(d,n) a_n = κ(1) = 1 (the tail bounds the gap)."""
    alpha = (d - 2) / 2
    t = np.linspace(-0.95, 0.95, 21)
    L = 80
    for k in (ArcCosine(1), ArcCosine(2), ChordalMatern(2.5, chordal_lengthscale=0.8)):
        a = np.asarray(funk_hecke_coefficients(k, d, L))
        series = sum(a[n] * (n + alpha) / alpha * scipy.special.eval_gegenbauer(n, alpha, t) for n in range(L + 1))
        np.testing.assert_allclose(series, np.asarray(k.kappa(jnp.asarray(t))), atol=2e-6)
        total = sum(num_harmonics(d, n) * a[n] for n in range(L + 1))
        assert 0 < 1 - total < 1e-4, (type(k).__name__, 1 - total)


# --- the kernels ---------------------------------------------------------------------------------------------
def test_arccos_kernel_is_cho_saul_on_the_augmented_inputs():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(7, 3))
    s, b, var = np.array([0.5, 1.5, 2.0]), 0.7, 1.8
    Xt = np.concatenate([X / s, np.full((7, 1), b)], 1)
    nrm = np.linalg.norm(Xt, axis=1)
    theta = np.arccos(np.clip(Xt @ Xt.T / np.outer(nrm, nrm), -1, 1))
    J = {0: np.pi - theta, 1: np.sin(theta) + (np.pi - theta) * np.cos(theta),
         2: 3 * np.sin(theta) * np.cos(theta) + (np.pi - theta) * (1 + 2 * np.cos(theta) ** 2)}
    for p in (0, 1, 2):
        ref = var * np.outer(nrm, nrm) ** p * J[p] / {0: np.pi, 1: np.pi, 2: 3 * np.pi}[p]
        # order 0 has an infinite slope at t = 1: the rounding of x̂·x̂ (ε) moves θ by √(2ε) ≈ 2e-8 on the
        # diagonal, in both computations; orders 1 and 2 flatten it to ε^{3/2}
        np.testing.assert_allclose(np.asarray(ArcCosine(p, var, s, b)(X)), ref, rtol=3e-8 if p == 0 else 1e-12)
        np.testing.assert_allclose(np.asarray(ArcCosine(p, var, s, b).diag(X)), var * nrm ** (2 * p), rtol=1e-12)


def test_kernel_derivatives_are_finite_and_match_finite_differences():
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.normal(size=(6, 2)))
    for make in (lambda s: ArcCosine(0, 1.2, s, 0.8), lambda s: ArcCosine(2, 1.2, s, 0.8),
                 lambda s: ChordalMatern(0.5, 1.2, s, 0.8, 0.6)):
        # off the diagonal (where t ≡ 1 analytically but rounding makes a finite difference of κ₀ noisy)
        weights = jnp.arange(36.0).reshape(6, 6) * (1 - jnp.eye(6))
        f = jax.jit(lambda s: jnp.sum(make(s)(X) * weights))  # noqa: E731
        s0 = jnp.asarray([0.9, 1.4])
        g = jax.grad(f)(s0)
        h = 1e-6
        fd = np.array([(f(s0.at[i].add(h)) - f(s0.at[i].add(-h))) / (2 * h) for i in range(2)])
        assert np.all(np.isfinite(np.asarray(g)))
        np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-5)
    t = jnp.linspace(-0.99, 0.99, 9)
    for p in (0, 1, 2):  # κ_p' against finite differences (κ₁' = κ₀, κ₂' = 4κ₁/3)
        d_ad = jax.vmap(jax.grad(ArcCosine(p).kappa))(t)
        d_fd = (ArcCosine(p).kappa(t + 1e-6) - ArcCosine(p).kappa(t - 1e-6)) / 2e-6
        np.testing.assert_allclose(np.asarray(d_ad), np.asarray(d_fd), rtol=1e-6)


def test_kuf_derivatives_equal_those_of_a_dense_block_diagonal_product():
    """Kuf's gradient, JVP and Hessian in the map (s, b) (the inverse factors' custom derivative rule) equal
    autodiff of an independent dense computation: Gegenbauer values of the fundamental systems times
    SciPy's block_diag(L_n⁻¹), with r^p."""
    import scipy.linalg

    d, L, p = 4, 4, 1
    X = jnp.asarray(np.random.default_rng(5).normal(size=(7, d - 1)))
    f = SphericalHarmonicFeatures(d - 1, L, kernel=ArcCosine(p))  # the odd degrees above 1 vanish: dropped
    W = jnp.asarray(np.random.default_rng(6).normal(size=(f.num_features, 7)))
    systems = [fundamental_system(d, n) for n in f.degrees]
    Bdense = jnp.asarray(scipy.linalg.block_diag(*[Linv for _, Linv in systems]))

    def library(theta):
        k = ArcCosine(p, 1.3, theta[:3], theta[3])
        return jnp.sum(jnp.sin(psg.Kuf(f, k, X)) * W)

    def dense(theta):
        r, U = ArcCosine(p, 1.3, theta[:3], theta[3]).to_sphere(X)
        C = jnp.concatenate([gegenbauer(n, 0.5 * (d - 2), jnp.clip(jnp.asarray(V) @ U.T, -1, 1))
                             for n, (V, _) in zip(f.degrees, systems)])
        return jnp.sum(jnp.sin(Bdense @ C * r[None, :] ** p) * W)

    theta, v = jnp.asarray([0.7, 1.2, 0.9, 0.8]), jnp.asarray([0.3, -0.2, 0.5, 1.0])
    np.testing.assert_allclose(library(theta), dense(theta), rtol=1e-12)
    np.testing.assert_allclose(jax.grad(library)(theta), jax.grad(dense)(theta), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(library, (theta,), (v,))[1], jax.jvp(dense, (theta,), (v,))[1], rtol=1e-10)
    np.testing.assert_allclose(jax.hessian(library)(theta), jax.hessian(dense)(theta), rtol=1e-9, atol=1e-11)


# --- Kuu, Kuf and Qff ----------------------------------------------------------------------------------------
def qff_error(kernel, X, L):
    f = SphericalHarmonicFeatures(X.shape[1], L, kernel=kernel)
    Kmn = psg.Kuf(f, kernel, X)
    Q = Kmn.T @ psg.Kuu(f, kernel).solve(Kmn)
    K = kernel(X)
    return float(jnp.linalg.norm(Q - K) / jnp.linalg.norm(K)), f, Q, K


@pytest.mark.parametrize("kernel,degrees,rate", [
    (ArcCosine(1, 1.3, [0.7, 1.2], 0.8), (5, 10, 20), -2.5),
    (ChordalMatern(1.5, 1.3, [0.7, 1.2], 0.8, 0.7), (5, 10, 20), -2.5),
])
def test_qff_converges_to_the_dense_kernel_with_a_rate(kernel, degrees, rate):
    """Relative Frobenius error falls like L^-3 for κ with a (1 − t)^{3/2} branch point (measured slopes:
    −3.2 arc-cosine order 1, −2.9 chordal Matérn-3/2); the target 1e-3 at L = 5 (arc-cosine) and 20 (Matérn)."""
    X = jnp.asarray(np.random.default_rng(0).normal(size=(60, 2)))
    errs = [qff_error(kernel, X, L)[0] for L in degrees]
    slope = np.polyfit(np.log(degrees), np.log(errs), 1)[0]
    assert slope < rate, (errs, slope)
    assert errs[0 if isinstance(kernel, ArcCosine) else 2] < 1e-3, errs


def test_qff_target_at_d5_both_kernels():
    X = jnp.asarray(np.random.default_rng(1).normal(size=(60, 4)))
    assert qff_error(ArcCosine(1, 1.0, 1.0, 1.0), X, 6)[0] < 1e-3
    assert qff_error(ChordalMatern(2.5, 1.0, 1.0, 1.0, 1.0), X, 8)[0] < 1e-3


def test_residual_is_constant_on_the_sphere_and_kff_minus_qff_is_psd():
    kernel = ArcCosine(2, 1.7, [0.5, 2.0], 1.3)
    X = jnp.asarray(np.random.default_rng(4).normal(size=(40, 2)))
    _, f, Q, K = qff_error(kernel, X, 4)
    r, _ = kernel.to_sphere(X)
    np.testing.assert_allclose(np.diag(K - Q), 1.7 * r**4 * float(f.unresolved(kernel)), rtol=1e-9)
    assert np.min(np.linalg.eigvalsh(np.asarray(K - Q))) > -1e-10 * np.max(np.diag(K))


def test_arccos_features_drop_vanishing_degrees():
    f = SphericalHarmonicFeatures(2, 7, kernel=ArcCosine(1))
    assert f.degrees == (0, 1, 2, 4, 6) and f.num_features == 1 + 3 + 5 + 9 + 13
    assert SphericalHarmonicFeatures(8, 4).num_features == 660
    kuu = psg.Kuu(f, ArcCosine(1, 2.0))
    assert isinstance(kuu, psg.linalg.Diagonal)
    a = np.asarray(funk_hecke_coefficients(ArcCosine(1), 3, 7))
    np.testing.assert_allclose(np.asarray(kuu.diagonal()), 1 / (2.0 * np.repeat(a[[0, 1, 2, 4, 6]], [1, 3, 5, 9, 13])))


# --- the collapsed bound, whitening, float32 -----------------------------------------------------------------
def regression_data(n=80, D=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, D))
    y = np.sin(X.sum(1)) + 0.3 * X[:, 0] + 0.1 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


def test_collapsed_bound_below_exact_and_rising_with_the_degree():
    X, y = regression_data()
    for kernel in (ArcCosine(1, 1.0, 1.5, 1.0), ChordalMatern(1.5, 1.0, 1.5, 1.0, 0.5)):
        exact = float(exact_log_marginal_likelihood(kernel, X, y, 0.01))
        bound = jax.jit(lambda f, X, y: collapsed_elbo(f, kernel, X, y, 0.01), static_argnums=0)
        bounds = [float(bound(SphericalHarmonicFeatures(2, L, kernel=kernel), X, y)) for L in (2, 5, 10)]
        assert all(b <= exact + 1e-8 for b in bounds), (bounds, exact)
        assert all(b2 > b1 for b1, b2 in zip(bounds, bounds[1:])), bounds
        # the gap is mostly tr(Kff − Qff)/2σ² = N σ_f² E[r^2p] (1 − Σ N a_n)/2σ²: it closes with the degree
        assert exact - bounds[-1] < 0.05 * (exact - bounds[0]), (bounds, exact)


def test_whitened_equals_unwhitened():
    X, _ = regression_data(30)
    kernel = ChordalMatern(2.5, 1.4, [0.8, 1.1], 0.9, 0.6)
    f = SphericalHarmonicFeatures(2, 5)
    M = f.num_features
    rng = np.random.default_rng(5)
    m_v = jnp.asarray(rng.normal(size=M))
    A = rng.normal(size=(M, M)) / M
    S_v = psg.linalg.Dense(jnp.asarray(A @ A.T + 0.1 * np.eye(M)))
    Kmm = psg.Kuu(f, kernel)
    R = jnp.diag(jnp.sqrt(Kmm.diagonal()))
    mean_w, var_w = psg.conditional(f, kernel, X, m_v, S_v, whiten=True)
    mean_u, var_u = psg.conditional(f, kernel, X, R @ m_v, psg.linalg.Dense(R @ S_v.to_dense() @ R.T), whiten=False)
    np.testing.assert_allclose(np.asarray(mean_w), np.asarray(mean_u), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(var_w), np.asarray(var_u), rtol=1e-9, atol=1e-12)


def test_float32_against_float64():
    """Kuf, Kuu and the bound in float32 against float64 on the same rounded inputs (d = 5, M = 50):
    Kuf to 2e-5 of its scale (Y through L_n⁻¹, cond(A_n) ≤ 350 here), the bound to 1e-4 relative."""
    X, y = regression_data(100, 4)
    X32, y32 = X.astype(jnp.float32), y.astype(jnp.float32)
    X64, y64 = X32.astype(jnp.float64), y32.astype(jnp.float64)
    k64 = ChordalMatern(1.5, 1.0, 1.5, 1.0, 0.8)
    k32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), k64)
    f = SphericalHarmonicFeatures(4, 3)
    K32, K64 = psg.Kuf(f, k32, X32), psg.Kuf(f, k64, X64)
    assert K32.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(K32 - K64))) < 2e-5 * float(jnp.max(jnp.abs(K64)))
    np.testing.assert_allclose(np.asarray(psg.Kuu(f, k32).diagonal()), np.asarray(psg.Kuu(f, k64).diagonal()),
                               rtol=1e-5)
    b32 = jax.jit(lambda X, y: collapsed_elbo(f, k32, X, y, jnp.float32(0.01)))(X32, y32)
    b64 = jax.jit(lambda X, y: collapsed_elbo(f, k64, X, y, 0.01))(X64, y64)
    assert b32.dtype == jnp.float32 and abs(float(b32) - float(b64)) < 1e-4 * abs(float(b64))


# --- one-pass statistics, size rule, warnings, errors --------------------------------------------------------
def test_one_pass_statistics_equal_the_dense_ones_and_give_the_same_bound():
    X, y = regression_data(1000, 3)
    kernel = ChordalMatern(1.5, dist.LogNormal(0, 1), 1.5, 1.0, dist.LogNormal(0, 1))  # map fixed, rest free
    f = SphericalHarmonicFeatures(3, 3)
    stats = psg.sufficient_statistics(f, kernel, np.asarray(X), np.asarray(y), chunk_size=300)  # pads the last
    concrete = ChordalMatern(1.5, 1.0, 1.5, 1.0, 1.0)
    ref = psg.SufficientStatistics.from_kuf(psg.Kuf(f, concrete, X), y)
    for got, want in zip(stats[:6], ref[:6]):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-9)
    # order p = 1 (Kuf scaled by r^p) and a dropped degree (ArcCosine(1) has a_3 = 0): the per-degree L_n⁻¹ is
    # applied to the chunk sums, not per row, so the degrees' bookkeeping is checked here too
    arc = ArcCosine(1, dist.LogNormal(0, 1), 1.5, 1.0)
    f_arc = SphericalHarmonicFeatures(3, 4, kernel=arc)
    got = spherical_statistics(f_arc, arc, np.asarray(X), np.asarray(y), chunk_size=300)
    ref = psg.SufficientStatistics.from_kuf(psg.Kuf(f_arc, ArcCosine(1, 1.0, 1.5, 1.0), X), y)
    for g, w in zip(got[:6], ref[:6]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-9)
    gp = psg.CollapsedGP(f, ChordalMatern(1.5, 0.7, 1.5, 1.0, 0.6), Gaussian(0.05), statistics=stats)
    from numpyro.infer.util import log_density
    via_stats = log_density(gp.model, (), {}, {})[0]
    direct = collapsed_elbo(f, ChordalMatern(1.5, 0.7, 1.5, 1.0, 0.6), X, y, 0.05)
    np.testing.assert_allclose(float(via_stats), float(direct), rtol=1e-9)
    with pytest.raises(ValueError, match="bias"):
        spherical_statistics(f, ChordalMatern(1.5, 1.0, 1.5, dist.LogNormal(0, 1)), np.asarray(X), np.asarray(y))
    # statistics computed for one mapping cannot serve a model that samples the mapping
    for free in ({"lengthscale": dist.LogNormal(0, 1)}, {"bias": dist.LogNormal(0, 1)}):
        with pytest.raises(ValueError, match=f"kernel's {next(iter(free))} fixed"):
            psg.CollapsedGP(f, ChordalMatern(1.5, **{"lengthscale": 1.5, "bias": 1.0, **free}), Gaussian(0.05),
                            statistics=stats)


def test_from_data_is_the_fewest_degrees_within_the_tolerance():
    X, _ = regression_data(50, 4)
    for kernel, tol in ((ArcCosine(1), 1e-3), (ChordalMatern(1.5, chordal_lengthscale=1.0), 0.01),
                        (ChordalMatern(1.5, chordal_lengthscale=dist.LogNormal(0.0, 0.3)), 0.01)):
        f = SphericalHarmonicFeatures.from_data(X, kernel, tolerance=tol)
        probe = kernel if not isinstance(kernel.chordal_lengthscale if isinstance(kernel, ChordalMatern) else 0,
                                         dist.Distribution) else \
            ChordalMatern(1.5, chordal_lengthscale=float(np.exp(-1.6448536269514722 * 0.3)))
        assert float(f.unresolved(probe)) <= tol
        smaller = SphericalHarmonicFeatures(4, f.max_degree - 1, kernel=kernel)
        assert float(smaller.unresolved(probe)) > tol
    with pytest.raises(ValueError, match="max_features"):
        SphericalHarmonicFeatures.from_data(X, ArcCosine(1), tolerance=1e-4, max_features=100)
    with pytest.raises(ValueError, match="supported degree 18"):
        SphericalHarmonicFeatures.from_data(X, ArcCosine(1), tolerance=1e-6)


def test_far_inputs_warn_and_inside_inputs_do_not():
    X, _ = regression_data(60, 2)
    f = SphericalHarmonicFeatures.from_data(X, ArcCosine(1), tolerance=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideDomainWarning)
        f.warn_outside(np.asarray(X) * 1.05)  # within 10 % of the range
    with pytest.warns(OutsideDomainWarning, match="r\\^p"):
        f.warn_outside(np.asarray([[40.0, 0.0]]))


@pytest.mark.slow
def test_far_predictions_grow_like_r_to_the_p():
    """f = r^p g(x̂): along a ray the posterior mean of the order-1 kernel doubles when r doubles far out."""
    X, y = regression_data(60, 2)
    kernel = ArcCosine(1, 1.0, 1.0, 1.0)
    f = SphericalHarmonicFeatures.from_data(X, kernel, tolerance=1e-3)
    gp = psg.CollapsedGP(f, kernel, Gaussian(0.01)).with_data(X, y)
    with pytest.warns(OutsideDomainWarning):
        far = gp.predict(jnp.asarray([[1000.0, 300.0], [2000.0, 600.0]]), params={})
    ratio = float(far["f_mean"][1] / far["f_mean"][0])
    assert abs(ratio - 2.0) < 0.01, ratio


def test_bad_input_gets_a_clear_error_naming_the_argument():
    with pytest.raises(ValueError, match="input_dim"):
        SphericalHarmonicFeatures(1, 3)
    with pytest.raises(ValueError, match="max_degree <= 6"):
        SphericalHarmonicFeatures(8, 7)
    with pytest.raises(ValueError, match="max_degree"):
        SphericalHarmonicFeatures(2, -1)
    with pytest.raises(ValueError, match="given together"):
        SphericalHarmonicFeatures(2, 3, lower=(0.0, 0.0))
    with pytest.raises(ValueError, match="input_dim = 2 values, got 3 and 2"):
        SphericalHarmonicFeatures(2, 3, lower=(0.0, 0.0, 0.0), upper=(1.0, 1.0))
    with pytest.raises(ValueError, match="lower <= upper in every column"):
        SphericalHarmonicFeatures(2, 3, lower=(0.0, 2.0), upper=(1.0, 1.0))
    f = SphericalHarmonicFeatures(2, 3)
    with pytest.raises(ValueError, match="input_dim = 2"):
        psg.Kuf(f, ChordalMatern(), jnp.ones((4, 3)))
    with pytest.raises(ValueError, match="kernel=kernel"):
        psg.Kuu(f, ArcCosine(1))  # degree 3 vanishes for order 1
    with pytest.raises(ValueError, match="lengthscale"):
        psg.Kuu(f, ChordalMatern(1.5, lengthscale=[1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="order"):
        ArcCosine(3)
    with pytest.raises(ValueError, match="bias"):
        ArcCosine(1, bias=-1.0)
    with pytest.raises(ValueError, match="chordal_lengthscale"):
        ChordalMatern(1.5, chordal_lengthscale=0.0)
    with pytest.raises(ValueError, match="nu"):
        ChordalMatern(2.0)
    with pytest.raises(NotImplementedError, match="Zonal"):
        psg.Kuu(f, psg.Matern32())
    assert MAX_HARMONICS_PER_DEGREE >= num_harmonics(9, 6)


# --- every approximation with the family, unchanged ----------------------------------------------------------
@pytest.mark.slow
def test_collapsed_gp_svi_fits_the_noise():
    X, y = regression_data(150, 2)
    kernel = ChordalMatern(1.5, dist.LogNormal(0, 1), 1.5, 1.0, dist.LogNormal(0, 1))
    gp = psg.CollapsedGP(SphericalHarmonicFeatures(2, 10), kernel, Gaussian(dist.LogNormal(-3, 1)))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), Trace_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 300, X, y, progress_bar=False)
    noise = float(gp.point_values(res.params)["likelihood_variance"])
    assert 0.004 < noise < 0.03, noise  # data noise 0.01


@pytest.mark.slow
def test_sparse_gp_svgp_with_minibatches_matches_collapsed_prediction():
    X, y = regression_data(300, 2)
    kernel = ArcCosine(1, 1.0, 1.5, 1.0)
    f = SphericalHarmonicFeatures(2, 6, kernel=kernel)
    gp = psg.SparseGP(f, kernel, Gaussian(0.01))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.02), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 1500, X, y, batch_size=100, progress_bar=False)
    pred = gp.predict(X[:50], params=res.params)
    ref = psg.CollapsedGP(f, kernel, Gaussian(0.01)).with_data(X, y).predict(X[:50], params={})
    err = np.abs(np.asarray(pred["f_mean"]) - np.asarray(ref["f_mean"]))
    assert np.median(err) < 0.05, np.median(err)


@pytest.mark.slow
def test_bernoulli_classification():
    rng = np.random.default_rng(6)
    X = rng.uniform(-2, 2, (200, 2))
    labels = (X[:, 0] * X[:, 1] > 0).astype(float)
    kernel = ChordalMatern(1.5, 4.0, 1.0, 1.0, 0.5)
    gp = psg.SparseGP(SphericalHarmonicFeatures(2, 8), kernel, Bernoulli())
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 600, jnp.asarray(X), jnp.asarray(labels), progress_bar=False)
    p = np.asarray(gp.predict(jnp.asarray(X), params=res.params)["y_mean"])
    assert np.mean((p > 0.5) == labels) > 0.85


@pytest.mark.slow
def test_nuts_over_the_map_and_kernel_hyperparameters_and_spectral_gp_and_adequacy():
    """A user's own model with spectral_gp: NUTS samples the scales, bias and variance (the map lives in
    the kernel template); the adequacy check reads the draws."""
    X, y = regression_data(60, 2)
    kernel = ArcCosine(1, dist.LogNormal(0, 0.5), dist.LogNormal(0, 0.5), dist.LogNormal(0, 0.5))
    feature = SphericalHarmonicFeatures(2, 6, kernel=kernel)

    def model(X, y=None):
        f = psg.spectral_gp("f", feature, kernel, X)
        numpyro.sample("y", dist.Normal(f, 0.1), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=100, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    s = mcmc.get_samples()
    assert {"f_kernel_lengthscale", "f_kernel_bias", "f_kernel_variance"} <= set(s)
    assert np.all(np.isfinite(np.asarray(s["f_kernel_bias"])))
    assert np.std(np.asarray(s["f_kernel_lengthscale"])) > 0
    check = psg.diagnostics.adequacy(feature, s, X, kernel=kernel)
    # the residual is (1 − Σ N a_n) of the variance whatever the draw: 3e-5 for order 1 at L = 6
    np.testing.assert_allclose(np.asarray(check["residual_fraction"]),
                               float(feature.unresolved(ArcCosine(1))), rtol=1e-6, atol=1e-9)
    assert check["ok"]


@pytest.mark.slow
def test_save_and_load_fit(tmp_path):
    from ppl_sparsegp.saving import load_fit, save_fit
    X, y = regression_data(80, 2)
    kernel = ChordalMatern(1.5, 1.0, 1.5, 1.0, 0.5)
    gp = psg.SparseGP(SphericalHarmonicFeatures(2, 5), kernel, Gaussian(0.01))
    svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 50, X, y, progress_bar=False)
    save_fit(tmp_path / "fit.npz", gp, res.params)
    back, params = load_fit(tmp_path / "fit.npz")
    assert back.feature.degrees == gp.feature.degrees and back.kernel.nu == 1.5
    a, b = gp.predict(X, params=res.params), back.predict(X, params=params)
    np.testing.assert_array_equal(np.asarray(a["f_mean"]), np.asarray(b["f_mean"]))


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("L", [1, 2, 3])
def test_refined_arccos_features_built_with_the_kernel_skip_exactly_its_vanishing_degrees(order, L):
    """Features of max_degree ≤ 3 built with kernel= know the kernel's vanishing degrees (no gap in their
    degrees says so yet): refined once and twice, they hold exactly the degrees whose raw (unmasked)
    Funk–Hecke quadrature is non-zero, up to at least twice the old highest degree, and Kuu is finite and
    positive definite: 1/(σ² a_n) against those raw coefficients. Without kernel= the parity is still read
    from the degrees (today's rule), so refining every degree and Kuu refusing the vanishing ones."""
    d, kernel = 3, ArcCosine(order, 1.7)
    t, P = _quadrature(d, 24, 2 * 24 + 200)
    raw = P @ np.asarray(kernel.kappa(jnp.asarray(t)))  # not masked by vanishing_degree: independent of it
    f = SphericalHarmonicFeatures(2, L, kernel=ArcCosine(order))
    for _ in range(2):
        old, f = f.max_degree, f.refined()
        assert f.max_degree > old
        kept = tuple(n for n in range(max(f.max_degree, 2 * old) + 1) if abs(raw[n]) > 1e-9 * raw[0])
        assert f.degrees == kept, (f.degrees, kept)  # every non-vanishing degree to 2·old (or the next one)
        kuu = np.asarray(psg.Kuu(f, kernel).to_dense())
        assert np.all(np.isfinite(kuu)) and np.min(np.linalg.eigvalsh(kuu)) > 0
        expected = 1 / (1.7 * np.repeat(raw[list(f.degrees)], [num_harmonics(d, n) for n in f.degrees]))
        np.testing.assert_allclose(np.diag(kuu), expected, rtol=1e-9)
    plain = SphericalHarmonicFeatures(2, L).refined()  # without kernel= (no gap yet): today's parity rule
    if any(abs(raw[n]) <= 1e-9 * raw[0] for n in plain.degrees):  # a vanishing degree came back: Kuu names
        with pytest.raises(ValueError, match="kernel=kernel"):  # the fix
            psg.Kuu(plain, kernel)


def test_save_and_load_fit_keeps_the_vanishing_rule_of_arccos_features(tmp_path):
    """The features' vanishing-degree rule (a class and its static fields) survives save_fit/load_fit: the
    loaded features refine as the saved ones do (skipping degree 3 of ArcCosine(1))."""
    from ppl_sparsegp.saving import load_fit, save_fit
    X, y = regression_data(20, 2)
    gp = psg.SparseGP(SphericalHarmonicFeatures(2, 2, kernel=ArcCosine(1)), ArcCosine(1), Gaussian(0.01))
    res = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), Trace_ELBO()).run(jax.random.PRNGKey(0), 2, X, y,
                                                                             progress_bar=False)
    save_fit(tmp_path / "fit.npz", gp, res.params)
    back, _ = load_fit(tmp_path / "fit.npz")
    assert back.feature.vanishing == gp.feature.vanishing == (ArcCosine, (1,))
    assert back.feature.refined().degrees == gp.feature.refined().degrees == (0, 1, 2, 4)
    with pytest.raises(ValueError, match="vanishing must be .*pass the kernel as kernel="):
        SphericalHarmonicFeatures(2, 2, vanishing=(ArcCosine, ()))  # ArcCosine has one static field (order)

