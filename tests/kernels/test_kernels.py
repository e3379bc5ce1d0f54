"""Kernels against hand-written formulas, Bochner's theorem by quadrature, the samplers by Monte Carlo."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special

from ppl_sparsegp import kernels as K

KERNELS = [K.SquaredExponential, K.Matern12, K.Matern32, K.Matern52]


def dense_reference(cls, X1, X2, variance, lengthscale):
    """Textbook formulas written out element by element (independent of the library's code path)."""
    out = np.zeros((len(X1), len(X2)))
    for i, a in enumerate(X1):
        for j, b in enumerate(X2):
            r = np.sqrt(np.sum(((a - b) / lengthscale) ** 2))
            if cls is K.SquaredExponential:
                v = np.exp(-0.5 * r**2)
            elif cls is K.Matern12:
                v = np.exp(-r)
            elif cls is K.Matern32:
                v = (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
            else:
                v = (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)
            out[i, j] = variance * v
    return out


@pytest.mark.parametrize("cls", KERNELS)
@pytest.mark.parametrize("lengthscale", [0.7, np.array([0.5, 1.3, 2.0])])
def test_gram_matches_dense_formula(cls, lengthscale):
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(7, 3)) + 5.0, rng.normal(size=(5, 3)) + 5.0  # offset tests the centring
    k = cls(variance=1.7, lengthscale=lengthscale)
    np.testing.assert_allclose(k(X1, X2), dense_reference(cls, X1, X2, 1.7, lengthscale), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(jnp.diag(k(X1)), k.diag(X1), rtol=1e-7)
    G = np.asarray(k(X1))
    assert np.allclose(G, G.T) and np.linalg.eigvalsh(G).min() > -1e-10


@pytest.mark.parametrize("cls", KERNELS)
def test_gradient_finite_at_zero_distance(cls):
    X = jnp.array([[0.1], [0.1], [0.4]])
    g = jax.grad(lambda ls: jnp.sum(cls(lengthscale=ls)(X)))(0.5)
    assert np.isfinite(g)


@pytest.mark.parametrize("cls", KERNELS)
@pytest.mark.parametrize("r", [0.0, 0.3, 1.1])
def test_bochner_1d(cls, r):
    """κ(r) = (1/π) ∫₀^∞ s(ω) cos(ωr) dω (convention s(ω) = ∫κ(r)e^{-iωr}dr)."""
    k = cls(variance=1.3, lengthscale=0.6)
    density = jax.jit(k.spectral_density)  # one dispatch per quadrature node
    s = lambda w: float(density(jnp.array([w]))[0])  # noqa: E731
    if r == 0.0:
        val, _ = integrate.quad(s, 0, np.inf, limit=500)
    else:
        val, _ = integrate.quad(s, 0, np.inf, weight="cos", wvar=r, limlst=200)
    expected = float(k.kappa(jnp.array([[r]]))[0])
    np.testing.assert_allclose(val / np.pi, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("cls", KERNELS)
@pytest.mark.parametrize("r", [0.0, 0.5])
def test_bochner_2d_isotropic(cls, r):
    """In 2-D, κ(r) = (2π)^{-1} ∫₀^∞ s(ρ) J₀(ρ r) ρ dρ (Hankel transform of the radial density)."""
    k = cls(variance=0.8, lengthscale=0.9)
    density = jax.jit(k.spectral_density)  # one dispatch per quadrature node, not one per operation
    s = lambda rho: float(density(jnp.array([[rho, 0.0]]))[0])  # noqa: E731
    f = lambda rho: s(rho) * special.j0(rho * r) * rho  # noqa: E731
    # Matérn-1/2 decays like ρ^-2 here: integrate to a large cut-off and bound the tail analytically
    upper = 4000.0
    val, _ = integrate.quad(f, 0, upper, limit=4000)
    expected = float(k.kappa(jnp.array([[r, 0.0]]))[0])
    tol = 2e-3 if cls is K.Matern12 else 1e-6  # tail beyond the cut-off: ∫ 2σ²λ/ρ² dρ ≈ 1e-3 · σ²
    np.testing.assert_allclose(val / (2 * np.pi), expected, rtol=tol, atol=1e-9)


@pytest.mark.parametrize("cls", KERNELS)
def test_sample_frequencies_reproduce_kernel(cls):
    """σ² E_p[cos(ωᵀr)] = κ(r) for ARD lengthscales in 2-D, within 5 Monte Carlo standard errors."""
    k = cls(variance=1.5, lengthscale=jnp.array([0.5, 2.0]))
    n = 200_000
    w = k.sample_frequencies(jax.random.PRNGKey(3), n, 2)
    assert w.shape == (n, 2)
    for r in ([0.2, -0.4], [1.0, 1.5]):
        c = 1.5 * np.cos(np.asarray(w) @ np.array(r))
        se = c.std() / np.sqrt(n)
        assert abs(c.mean() - float(k.kappa(jnp.array(r)))) < 5 * se


def test_additive_and_product():
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(6, 2))
    k1, k2 = K.Matern32(variance=0.5, lengthscale=0.3), K.Matern12(variance=2.0, lengthscale=0.7)
    add, prod = K.Additive([k1, k2]), K.Product([k1, k2])
    np.testing.assert_allclose(add(X), k1(X[:, :1]) + k2(X[:, 1:]), rtol=1e-12)
    np.testing.assert_allclose(prod(X), k1(X[:, :1]) * k2(X[:, 1:]), rtol=1e-12)
    np.testing.assert_allclose(add.diag(X), np.full(6, 2.5))
    w = jnp.array([[0.3, -1.2]])
    np.testing.assert_allclose(prod.spectral_density(w),
                               k1.spectral_density(w[:, :1]) * k2.spectral_density(w[:, 1:]))


def test_pytree_jit_grad():
    X = jnp.linspace(0, 1, 5)[:, None]
    k = K.Matern52(variance=1.0, lengthscale=0.4)
    out = jax.jit(lambda kern: kern(X))(k)
    np.testing.assert_allclose(out, k(X))
    g = jax.grad(lambda kern: jnp.sum(kern(X)))(k)
    assert isinstance(g, K.Matern52) and np.isfinite(g.lengthscale)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_bad_hyperparameters(bad):
    with pytest.raises(ValueError, match="lengthscale must be positive"):
        K.Matern32(lengthscale=bad)
    with pytest.raises(ValueError, match="variance must be positive"):
        K.SquaredExponential(variance=bad)


def test_bad_inputs():
    k = K.Matern32(lengthscale=jnp.ones(2))
    with pytest.raises(ValueError, match="rank 2"):
        k(jnp.ones(3))
    with pytest.raises(ValueError, match="3 input dimensions, expected 2"):
        k(jnp.ones((3, 3)))
    with pytest.raises(ValueError, match="NaN or inf"):
        k(jnp.array([[0.0, jnp.nan]]))
    with pytest.raises(ValueError, match="non-empty sequence"):
        K.Additive([])


@pytest.mark.parametrize("lengthscale", [0.08, 0.3, 0.7, 2.0, 10.0])
def test_periodic_gram_and_fourier_series(lengthscale):
    """The Gram matrix against the exp-sine-squared formula, and the Fourier coefficients against the
    closed form q_0 = σ² e^{-z} I_0(z), q_j = 2σ² e^{-z} I_j(z), z = 1/ℓ² (scipy's ``ive``), far into the
    tail (40 terms, down to 1e-130: an FFT gave q_j < 0 there), traced (jit) and in float32."""
    k = K.Periodic(1.3, lengthscale, 2.5)
    x = np.linspace(-3.0, 4.0, 9)[:, None]
    d = x - x.T
    np.testing.assert_allclose(k(x), 1.3 * np.exp(-2 * np.sin(np.pi * d / 2.5) ** 2 / lengthscale**2),
                               rtol=1e-12)
    np.testing.assert_allclose(k.diag(x), 1.3)
    z = 1.0 / lengthscale**2
    ref = 1.3 * special.ive(np.arange(12), z) * np.r_[1.0, 2.0 * np.ones(11)]
    np.testing.assert_allclose(k.fourier_coefficients(12), ref, rtol=1e-10, atol=1e-15)
    ref = 1.3 * special.ive(np.arange(40), z) * np.r_[1.0, 2.0 * np.ones(39)]
    np.testing.assert_allclose(k.fourier_coefficients(40), ref, rtol=1e-11, atol=0)
    traced = jax.jit(lambda ell: K.Periodic(1.3, ell, 2.5).fourier_coefficients(40))(lengthscale)
    np.testing.assert_allclose(traced, ref, rtol=1e-11, atol=0)
    q32 = K.Periodic(np.float32(1.3), np.float32(lengthscale), 2.5).fourier_coefficients(40)
    assert q32.dtype == np.float32 and np.all(np.asarray(q32) >= 0)
    np.testing.assert_allclose(q32, ref, rtol=2e-5, atol=1e-37)


def test_periodic_bad_hyperparameters():
    with pytest.raises(ValueError, match="period must be positive and finite \\(a number"):
        K.Periodic(1.0, 1.0, np.ones(2))
    with pytest.raises(ValueError):
        K.Periodic(-1.0, 1.0, 1.0)


@pytest.mark.parametrize("kernel_class", [K.Matern52, K.ChordalMatern])
def test_a_templates_input_dim_is_read_from_its_prior_or_param(kernel_class):
    """A template's D comes from the shape of its lengthscale's draws (a prior's batch + event shape) or of a
    Param's initial value, as from a concrete array: ActivationFeatures.from_kernel checks a template's D so
    (it raised ``TypeError: object of type 'method' has no len()`` on a prior)."""
    import numpyro.distributions as dist

    from ppl_sparsegp import ActivationFeatures, Param

    extra = {"nu": 1.5} if kernel_class is K.ChordalMatern else {}
    D = 3
    for lengthscale, want in ((dist.LogNormal(jnp.zeros(D), 1.0).to_event(1), D), (dist.LogNormal(0.0, 1.0), None),
                              (dist.LogNormal(jnp.zeros(D), 1.0), D), (Param(jnp.ones(D)), D), (jnp.ones(D), D),
                              (1.0, None)):
        assert kernel_class(lengthscale=lengthscale, **extra).input_dim == want, lengthscale
    template = K.ChordalMatern(1.5, lengthscale=dist.LogNormal(jnp.zeros(D), 1.0).to_event(1))
    assert ActivationFeatures.from_kernel(template, D, 4).input_dim == D
    with pytest.raises(ValueError, match="input"):
        ActivationFeatures.from_kernel(template, D + 1, 4)
