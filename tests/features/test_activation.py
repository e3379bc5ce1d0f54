r"""Activation features on the sphere (issue 52, item 2), each against an independent computation:

* the activations' Funk–Hecke coefficients against SciPy quadrature in t (adaptive ``quad`` on [0, 1] for
  ReLU^q, whose kink sits at t = 0; Gauss–Gegenbauer ``roots_gegenbauer`` for erf), d = 3, 4, 5;
* the identity :math:`a_n(\kappa_q) = \hat\sigma_n^2(\mathrm{ReLU}^q)/\mathbb E[\sigma(u_1)^2]` against the
  library's arc-cosine coefficients (computed from Cho & Saul's closed forms, not from the activation);
* the decay exponents the convergence rule declares, measured from the computed coefficients;
* Kuf and Kuu against a dense computation in SciPy's real spherical harmonics on S² (the harmonic
  coefficients of σ(w·) and of k(x̂, ·) by product quadrature on the sphere, a_n by adaptive quadrature): the
  RKHS inner products ⟨k(x̂, ·), φ⟩ and ⟨φ_m, φ_m'⟩ summed densely;
* Kuu symmetric PSD, Kff − Qff PSD up to the declared truncation; the collapsed bound and SVGP at its
  analytic optimum rising to the exact GP as M grows (nested directions), and erf(st)'s odd-only span
  stalling; learnable directions (gradient against finite differences, one SVI run);
* refusal of every divergent pair named by the rule, and of a declared degree short of the tolerance.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.collapsed import collapsed_elbo, exact_log_marginal_likelihood, optimal_whitened_q
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features import ActivationFeatures
from ppl_sparsegp.features.activation import activation_coefficients
from ppl_sparsegp.features.spherical_harmonics import funk_hecke_coefficients, num_harmonics
from ppl_sparsegp.kernels import ArcCosine, ChordalMatern
from ppl_sparsegp.likelihoods import Gaussian


def c_d(d):
    return math.exp(math.lgamma(d / 2) - math.lgamma((d - 1) / 2)) / math.sqrt(math.pi)


def sigma(activation, t, scale=1.0, shift=0.0):
    q = {"step": 0, "relu": 1, "relu2": 2}.get(activation)
    if q is None:
        return scipy.special.erf(scale * t + shift)
    return np.where(t > 0, np.maximum(t, 0.0) ** q, 0.0)


def fh_reference(activation, d, n, scale=1.0, shift=0.0):
    """σ̂_n by SciPy: adaptive quadrature in t (ReLU^q on [0, 1]) or a 120-node Gauss–Gegenbauer rule (erf)."""
    alpha = 0.5 * (d - 2)
    at_one = scipy.special.eval_gegenbauer(n, alpha, 1.0)
    if activation == "erf":
        t, w = scipy.special.roots_gegenbauer(120, alpha)
        integral = np.sum(w * sigma("erf", t, scale, shift) * scipy.special.eval_gegenbauer(n, alpha, t))
    else:
        f = lambda t: sigma(activation, t) * scipy.special.eval_gegenbauer(n, alpha, t) * (1 - t * t) ** (alpha - 0.5)  # noqa: E731
        integral = scipy.integrate.quad(f, 0.0, 1.0, limit=200, epsabs=1e-13, epsrel=1e-11)[0]
    return c_d(d) / at_one * integral


@pytest.mark.parametrize("d", [3, 4, 5])
@pytest.mark.parametrize("activation, scale, shift", [("step", 1.0, 0.0), ("relu", 1.0, 0.0), ("relu2", 1.0, 0.0),
                                                      ("erf", 2.0, 0.0), ("erf", 1.5, 0.4)])
def test_activation_coefficients_against_scipy_quadrature(d, activation, scale, shift):
    L = 12
    got = activation_coefficients(activation, d, L, scale, shift)
    ref = np.array([fh_reference(activation, d, n, scale, shift) for n in range(L + 1)])
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12 * np.max(np.abs(ref)))
    # the structural zeros are exact, and no other coefficient is 0
    zeros = got == 0
    assert np.all(np.abs(ref[zeros]) < 1e-12) and np.all(np.abs(ref[~zeros]) > 1e-9), (got, ref)


@pytest.mark.parametrize("d", [3, 5, 9])
@pytest.mark.parametrize("q", [0, 1, 2])
def test_relu_coefficients_squared_are_the_arc_cosine_spectrum(d, q):
    r"""κ_q(x·y) ∝ E_u[σ(u·x)σ(u·y)] (u uniform) gives a_n(κ_q) = σ̂_n²/E[σ(u_1)²] exactly; E by SciPy."""
    L = 10
    alpha = 0.5 * (d - 2)
    second = c_d(d) * scipy.integrate.quad(lambda t: t ** (2 * q) * (1 - t * t) ** (alpha - 0.5), 0, 1)[0]
    s = activation_coefficients({0: "step", 1: "relu", 2: "relu2"}[q], d, L)
    a = np.asarray(funk_hecke_coefficients(ArcCosine(q), d, L))
    np.testing.assert_allclose(s**2 / second, a, rtol=1e-8, atol=1e-14)


@pytest.mark.slow
def test_declared_decay_exponents_match_the_computed_coefficients():
    """σ̂_n² ~ n^-(d+2q) (ReLU^q) and a_n ~ n^-(2ν+d-1) (chordal Matérn): slopes between n = 100 and 200."""
    d = 3
    for q, name in ((0, "step"), (1, "relu"), (2, "relu2")):
        s = activation_coefficients(name, d, 201)
        n = (101, 201) if q != 1 else (100, 200)
        slope = np.log(s[n[1]] ** 2 / s[n[0]] ** 2) / np.log(n[1] / n[0])
        assert abs(slope + (d + 2 * q)) < 0.1, (q, slope)
    for nu in (0.5, 1.5):
        a = np.asarray(funk_hecke_coefficients(ChordalMatern(nu, 1.0, 1.0, 1.0, 0.5), d, 200))
        slope = np.log(a[200] / a[100]) / np.log(2.0)
        assert abs(slope + (2 * nu + d - 1)) < 0.1, (nu, slope)


# --- Kuf and Kuu against dense spherical harmonics on S² --------------------------------------------------
def real_harmonics(n, U):
    """SciPy's real spherical harmonics of degree n at unit vectors U (K, 3), orthonormal under the uniform
    probability measure: (2n + 1, K)."""
    theta, phi = np.arccos(np.clip(U[:, 2], -1, 1)), np.arctan2(U[:, 1], U[:, 0])
    rows = []
    for m in range(-n, n + 1):
        Z = scipy.special.sph_harm_y(n, abs(m), theta, phi) * np.sqrt(4 * np.pi)
        rows.append(Z.real if m == 0 else np.sqrt(2) * (Z.imag if m < 0 else Z.real))
    return np.array(rows)


def s2_rule(k):
    """Product rule on S² (weights sum to 1): Gauss–Legendre in cos θ × 2k equispaced azimuths."""
    u, wu = np.polynomial.legendre.leggauss(k)
    phi = 2 * np.pi * np.arange(2 * k) / (2 * k)
    s = np.sqrt(1 - u**2)
    P = np.stack([np.outer(s, np.cos(phi)).ravel(), np.outer(s, np.sin(phi)).ravel(), np.repeat(u, 2 * k)], 1)
    return P, np.repeat(wu / 2, 2 * k) / (2 * k)


S2_KERNEL = ChordalMatern(2.5, 1.3, [0.8, 1.2], 0.9, 1.0)
S2_FEATURE = dict(activation="erf", scale=2.0, shift=0.3)


def matern52_chordal(t, ell=1.0):
    """κ of ``S2_KERNEL`` written out: the Matérn-5/2 profile of the chordal distance √(2 − 2t)/ℓ."""
    tau = np.sqrt(np.maximum(2.0 - 2.0 * np.clip(t, -1, 1), 0.0)) * np.sqrt(5.0) / ell
    return (1.0 + tau + tau**2 / 3.0) * np.exp(-tau)


def dense_pieces(W, Xhat, degree):
    """Per degree n ≤ degree: φ_{n,j}(w) = ∫σ(w·y)Y_{n,j}(y)dμ(y) and k_{n,j}(x̂) = ∫κ(x̂·y)Y_{n,j}(y)dμ(y) by
    quadrature on S², and a_n = ½∫κ(t)P_n(t)dt by adaptive quadrature."""
    P, w = s2_rule(80)
    Ys = [real_harmonics(n, P) for n in range(degree + 1)]
    act = sigma("erf", W @ P.T, S2_FEATURE["scale"], S2_FEATURE["shift"])              # (M, K)
    kap = matern52_chordal(Xhat @ P.T)                                                 # (N, K)
    phi = [act @ (w * Y).T for Y in Ys]                                                # (M, 2n+1)
    kx = [kap @ (w * Y).T for Y in Ys]                                                 # (N, 2n+1)
    a = [0.5 * scipy.integrate.quad(lambda t: matern52_chordal(t) * scipy.special.eval_legendre(n, t), -1, 1,
                                    limit=200, epsabs=1e-14)[0] for n in range(degree + 1)]
    return phi, kx, np.array(a)


def test_kuf_and_kuu_equal_the_dense_rkhs_inner_products_on_s2():
    r""":math:`K_{uf} = \langle k(\hat{\mathbf x},\cdot), \phi_m\rangle_{\mathcal H} = \sum_{n,j}
    k_{n,j}(\hat{\mathbf x})\phi_{m,n,j}/a_n` and :math:`K_{uu} = \sum_{n,j}\phi_{m,n,j}\phi_{m',n,j}/(\sigma^2a_n)`
    summed to degree 24 in SciPy's harmonics (erf(2t + 0.3): σ̂_24² / a_24 is below 1e-13 of the first term)."""
    rng = np.random.default_rng(0)
    V = rng.normal(size=(6, 3))
    W = V / np.linalg.norm(V, axis=1, keepdims=True)
    X = rng.uniform(-1.5, 1.5, (7, 2))
    feature = ActivationFeatures(V, max_degree=30, tolerance=1e-12, jitter=0.0, **S2_FEATURE)
    r, Xhat = (np.asarray(v) for v in S2_KERNEL.to_sphere(jnp.asarray(X)))
    phi, kx, a = dense_pieces(W, Xhat, 24)
    kuf_dense = sum(p @ k.T / an for p, k, an in zip(phi, kx, a))
    kuu_dense = sum(p @ p.T / an for p, an in zip(phi, a)) / float(S2_KERNEL.variance)
    Kuf = np.asarray(psg.Kuf(feature, S2_KERNEL, jnp.asarray(X)))
    Kuu = np.asarray(psg.Kuu(feature, S2_KERNEL).to_dense())
    np.testing.assert_allclose(Kuf, kuf_dense, atol=2e-7)  # the kernel's kink at y = x̂ limits the sphere rule
    np.testing.assert_allclose(Kuf, sigma("erf", W @ Xhat.T, 2.0, 0.3), atol=1e-14)  # exact, Eq. (2)
    scale = np.max(np.abs(kuu_dense))
    np.testing.assert_allclose(Kuu, kuu_dense, atol=1e-7 * scale)


def test_kuu_is_symmetric_psd_and_its_diagonal_is_the_series():
    rng = np.random.default_rng(1)
    kernel = ChordalMatern(0.5, 1.0, 1.0, 1.0, 0.7)
    feature = ActivationFeatures(rng.normal(size=(40, 4)), "relu2", 60, tolerance=1e-2, jitter=0.0)
    K = np.asarray(psg.Kuu(feature, kernel).to_dense())
    np.testing.assert_array_equal(K, K.T)
    ev = np.linalg.eigvalsh(K)
    assert ev[0] > -1e-12 * ev[-1], ev[:3]
    d, L = 4, 60
    s = activation_coefficients("relu2", d, L)
    a = np.asarray(funk_hecke_coefficients(kernel, d, L))
    N = np.array([num_harmonics(d, n) for n in range(L + 1)])
    np.testing.assert_allclose(np.diag(K), np.sum(N * s**2 / a), rtol=1e-11)


# --- the approximations with the family ----------------------------------------------------------------------
def regression_data(n=60, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n)
    return jnp.asarray(X), jnp.asarray(y)


NOISE = 0.01
GP_KERNEL = ChordalMatern(1.5, 1.0, 1.0, 1.0, 0.8)


def test_svgp_on_activation_features_approaches_the_exact_gp_as_m_grows():
    """Nested direction sets (the first M of 160): the collapsed bound rises towards log p(y), SVGP at its
    analytic optimum equals it, and SVGP's predictions approach the exact GP's."""
    X, y = regression_data()
    V = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (160, 3)))
    exact = float(exact_log_marginal_likelihood(GP_KERNEL, X, y, NOISE))
    Xs = jnp.asarray(np.random.default_rng(9).uniform(-1.5, 1.5, (25, 2)))
    Kxs = GP_KERNEL(X, Xs)
    A = GP_KERNEL(X) + NOISE * jnp.eye(len(y))
    mean_exact = Kxs.T @ jnp.linalg.solve(A, y)
    bounds, errors = [], []
    for M in (10, 40, 160):
        f = ActivationFeatures(V[:M], "erf", 24, scale=3.0, shift=0.5, tolerance=1e-8)
        bound = float(collapsed_elbo(f, GP_KERNEL, X, y, NOISE))
        gp = psg.SparseGP(f, GP_KERNEL, Gaussian(NOISE))
        m_v, S_v = optimal_whitened_q(psg.Kuu(f, GP_KERNEL), SufficientStatistics.from_kuf(psg.Kuf(f, GP_KERNEL, X), y),
                                      NOISE)
        params = {"f_v_loc": m_v, "f_v_scale_tril": jnp.linalg.cholesky(S_v.to_dense())}
        np.testing.assert_allclose(float(gp.elbo(params, X, y)), bound, rtol=1e-8)
        pred = gp.predict(Xs, params=params)
        bounds.append(bound)
        errors.append(float(jnp.max(jnp.abs(pred["f_mean"] - mean_exact))))
    assert all(b <= exact + 1e-8 for b in bounds) and bounds[0] < bounds[1] < bounds[2], (bounds, exact)
    assert exact - bounds[2] < 0.1 * (exact - bounds[0]), (bounds, exact)
    assert errors[2] < 0.2 * errors[0] and errors[2] < 0.05, errors
    # completeness: erf(3t) (odd: no even degree in the span) rises far less on the same directions
    odd = [float(collapsed_elbo(ActivationFeatures(V[:M], "erf", 24, scale=3.0, tolerance=1e-8), GP_KERNEL, X, y,
                                NOISE)) for M in (10, 160)]
    assert odd[1] - odd[0] < 0.5 * (bounds[2] - bounds[0]), (odd, bounds)


def test_learnable_directions_gradient_and_svi():
    """The bound's gradient in the unnormalised directions against central differences; SVI moves them."""
    X, y = regression_data(30)
    V0 = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (8, 3)))
    bound = jax.jit(lambda V: collapsed_elbo(ActivationFeatures(V, "erf", 20, scale=2.0, shift=0.3, tolerance=1e-8),
                                             GP_KERNEL, X, y, NOISE))
    g = np.asarray(jax.grad(bound)(jnp.asarray(V0)))
    h = 1e-5
    for i, j in ((0, 0), (3, 2), (7, 1)):
        E = np.zeros_like(V0)
        E[i, j] = h
        fd = (float(bound(jnp.asarray(V0 + E))) - float(bound(jnp.asarray(V0 - E)))) / (2 * h)
        np.testing.assert_allclose(g[i, j], fd, rtol=1e-5, atol=1e-7)
    # radial moves leave the features unchanged: the gradient is orthogonal to each direction
    np.testing.assert_allclose(np.sum(g * V0, axis=1), 0.0, atol=1e-8 * np.max(np.abs(g)))
    feature = ActivationFeatures(psg.Param(V0), "erf", 20, scale=2.0, shift=0.3, tolerance=1e-8)
    gp = psg.CollapsedGP(feature, GP_KERNEL, Gaussian(NOISE))
    result, _ = psg.engines.fit_svi(gp, X, y, num_steps=60, lr=0.05, rng_key=jax.random.PRNGKey(0))
    V1 = np.asarray(result.params["feature_directions"])
    assert np.max(np.abs(V1 - V0)) > 1e-3
    assert float(bound(jnp.asarray(V1))) > float(bound(jnp.asarray(V0)))


# --- the convergence rule: refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("activation, kernel, D, words", [
    ("relu", ArcCosine(1), 2, "diverges"),             # the arc-cosine kernel of the activation's own order
    ("step", ArcCosine(0), 2, "diverges"),
    ("relu", ChordalMatern(0.5), 2, "diverges"),       # k = 1: the harmonic series
    ("relu2", ChordalMatern(0.5), 4, "diverges"),      # S⁴: q = 2 is not > ν + α = 2
    ("relu2", ChordalMatern(1.5), 2, "diverges"),
    ("relu2", ArcCosine(0), 2, "not in the kernel's RKHS"),  # σ̂_2 ≠ 0 where a_2 = 0
    ("erf", ArcCosine(1), 2, "not in the kernel's RKHS"),    # σ̂_3 ≠ 0 where a_3 = 0
])
def test_divergent_pairs_are_refused_naming_the_pair_and_the_fix(activation, kernel, D, words):
    feature = ActivationFeatures(np.ones((3, D + 1)), activation, 10)
    name = type(kernel).__name__
    for call in (lambda: psg.Kuu(feature, kernel), lambda: psg.Kuf(feature, kernel, jnp.ones((2, D))),
                 lambda: ActivationFeatures.from_kernel(kernel, D, 3, activation=activation)):
        with pytest.raises(ValueError, match=words) as info:
            call()
        message = str(info.value)
        assert activation in message and name in message and "Pairs that converge here" in message, message


def test_declared_degree_short_of_the_tolerance_is_refused_and_from_kernel_picks_the_smallest():
    kernel = ChordalMatern(0.5, 1.0, 1.0, 1.0, 1.0)
    f = ActivationFeatures.from_kernel(kernel, 2, 5, activation="relu2", tolerance=1e-3, learnable=False)
    L = f.max_degree
    assert f.tail(kernel)[0] <= 1e-3
    short = f.replace(max_degree=L - 2)  # the previous kept degree (relu2 skips the even ones above 2)
    assert short.tail(kernel)[0] > 1e-3
    with pytest.raises(ValueError, match=f"max_degree = {L - 2} leaves .* use max_degree = {L}"):
        psg.Kuu(short, kernel)
    # the estimated tail is an estimate of the true one: against the series summed far beyond L
    top = 300
    s = activation_coefficients("relu2", 3, top)
    a = np.asarray(funk_hecke_coefficients(kernel, 3, top))
    t = np.where(s != 0, np.array([num_harmonics(3, n) for n in range(top + 1)]) * s**2 / np.where(s != 0, a, 1), 0)
    last = np.nonzero(t)[0][-1]
    true_tail = np.sum(t[L + 1:]) + t[last] * last / 4  # + the rest past 300 (k = 3, every other degree)
    estimate = f.tail(kernel)[0] * np.sum(t[:L + 1])
    assert 0.5 < estimate / true_tail < 2.0, (estimate, true_tail)


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="directions"):
        ActivationFeatures(np.ones((3, 2)))
    with pytest.raises(ValueError, match="length 0"):
        ActivationFeatures(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="scale and shift are for 'erf'"):
        ActivationFeatures(np.ones((3, 3)), "relu", scale=2.0)
    with pytest.raises(ValueError, match="activation"):
        ActivationFeatures(np.ones((3, 3)), "tanh")
    f = ActivationFeatures(np.ones((3, 3)), "erf", 10)
    with pytest.raises(ValueError, match="input columns"):
        psg.Kuf(f, ChordalMatern(1.5), jnp.ones((4, 3)))
    with pytest.raises(NotImplementedError, match="Zonal"):  # the dispatcher names the registered kernels
        psg.Kuu(f, psg.Matern32(1.0, 0.5))


@pytest.mark.parametrize("activation, kernel, options", [
    ("erf", ChordalMatern(1.5, 1.0, 1.0, 1.0, 1.0), dict(scale=2.0, shift=0.3, tolerance=1e-8)),
    ("relu2", ChordalMatern(0.5, 1.0, 1.0, 1.0, 1.0), dict(tolerance=1e-4)),
])
def test_kff_minus_qff_is_psd_up_to_the_truncation(activation, kernel, options):
    """The truncated Kuu is below the exact one by a PSD matrix whose trace is ≤ M × tolerance × its diagonal, so
    Kff − Qff may dip below 0 by at most about that: checked at 50 inputs with 20 directions."""
    f = ActivationFeatures.from_kernel(kernel, 2, 20, activation=activation, learnable=False, **options)
    X = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (50, 2)))
    Kuf = psg.Kuf(f, kernel, X)
    R = np.asarray(kernel(X) - Kuf.T @ psg.Kuu(f, kernel).solve(Kuf))
    ev = np.linalg.eigvalsh(0.5 * (R + R.T))
    assert ev[0] > -20 * options["tolerance"] * np.max(np.diag(np.asarray(kernel(X)))), ev[:3]
