"""Harmonic kernel decomposition and the HVGP, against dense orbit computations and the complex DFT."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.infer import TraceMeanField_ELBO

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.variational import block_diagonal_covariance
from ppl_sparsegp.features.harmonic import HarmonicFeatures, check_invariance, harmonic_gram
from ppl_sparsegp.groups import (
    ImageFlip,
    ImageShift,
    LongitudeRotation,
    Negation,
    Rotation,
    coordinate_negation,
    multi_negation,
    principal_axes_negation,
)
from ppl_sparsegp.kernels import SphereEmbedded
from ppl_sparsegp.likelihoods import Gaussian
from ppl_sparsegp.linalg import BlockDiag, Dense, Identity, StackedBlockDiag

KERNEL = psg.Matern32(variance=1.3, lengthscale=0.9)
RNG = np.random.default_rng(0)
X3 = RNG.normal(size=(30, 3))
LONLAT = np.stack([RNG.uniform(-180, 180, 30), RNG.uniform(-80, 80, 30)], 1)
IMAGES = RNG.normal(size=(30, 12))  # 3 × 4 images

# (group, kernel, inputs): every kind of way, odd and even orders, products with T > 2
CASES = {
    "negation": (Negation(), KERNEL, X3),
    "pca-3way": (principal_axes_negation(X3, 3), KERNEL, X3),
    "rotation-5": (Rotation(5, plane=(0, 2)), KERNEL, X3),
    "rotation-6": (Rotation(6), psg.SquaredExponential(0.8, 1.1), X3),
    "rotation-4 x negation": (Rotation(4) * Negation(np.array([0.0, 0.0, 1.0])), KERNEL, X3),
    "flips": (ImageFlip((3, 4), 0) * ImageFlip((3, 4), 1), psg.SquaredExponential(1.0, 2.0), IMAGES),
    "shift-4": (ImageShift((3, 4), axis=1, step=1), psg.SquaredExponential(1.0, 2.0), IMAGES),
    "longitude-6": (LongitudeRotation(6), SphereEmbedded(psg.Matern52(1.0, 0.5)), LONLAT),
}


def dense(a):
    return np.asarray(a, dtype=np.float64)


# one compilation per shape instead of op-by-op dispatch
kgram = jax.jit(lambda kernel, A, B: kernel(A, B))
hgram = jax.jit(harmonic_gram, static_argnums=0)
kuu_kuf = jax.jit(lambda f, k, X: (psg.Kuu(f, k).to_dense(), psg.Kuf(f, k, X)))


@pytest.mark.parametrize("case", list(CASES))
def test_subkernels_sum_to_k_and_are_psd(case):
    """Σ_t k_t = k and every k_t is symmetric PSD (Thm 3.5), on random inputs, densely."""
    group, kernel, X = CASES[case]
    G = dense(hgram(group, kernel, X, X))
    assert G.shape == (group.num_subkernels, len(X), len(X))
    K = dense(kgram(kernel, X, X))
    np.testing.assert_allclose(G.sum(0), K, atol=1e-12)  # float64 round-off of T̃ terms
    for Gt in G:
        np.testing.assert_allclose(Gt, Gt.T, atol=1e-12)
        # PSD up to round-off: eigenvalues of an N×N float64 Gram are accurate to ~N ε ‖K‖
        assert np.linalg.eigvalsh(Gt).min() > -1e-10 * np.abs(K).max()


def complex_subkernels(way, kernel, X1, X2):
    """k_t(x, x') = (1/T) Σ_s e^{−2πits/T} k(x, G^s x') of one way, computed directly (Eq. 5)."""
    T = way.order
    Ks = np.stack([dense(kgram(kernel, X1, way.power(X2, s))) for s in range(T)])
    s = np.arange(T)
    F = np.exp(-2j * np.pi * np.outer(s, s) / T) / T
    return np.einsum("ts,sij->tij", F, Ks)


@pytest.mark.parametrize("case", ["negation", "rotation-5", "rotation-6", "shift-4", "longitude-6"])
def test_shift_property_and_real_pairing(case):
    """Prop 3.3: k_t(x, Gx') = e^{2πit/T} k_t(x, x'); k_t Hermitian PSD; the real kernels are k_0,
    k_t + k_{T−t} and k_{T/2} (§3.4)."""
    group, kernel, X = CASES[case]
    way = group.ways[0]
    T = way.order
    A, B = X[:12], X[12:]
    Kc = complex_subkernels(way, kernel, A, B)
    Kc_shift = complex_subkernels(way, kernel, A, way.power(B, 1))
    for t in range(T):
        np.testing.assert_allclose(Kc_shift[t], np.exp(2j * np.pi * t / T) * Kc[t], atol=1e-12)
        Ktt = complex_subkernels(way, kernel, X, X)[t]
        np.testing.assert_allclose(Ktt, Ktt.conj().T, atol=1e-12)
        assert np.linalg.eigvalsh(Ktt).min() > -1e-10
    real = dense(hgram(group, kernel, A, B))
    for t in range(T // 2 + 1):
        ref = Kc[t] if t == 0 or 2 * t == T else Kc[t] + Kc[T - t]
        np.testing.assert_allclose(real[t], ref.real, atol=1e-12)
        np.testing.assert_allclose(ref.imag, 0.0, atol=1e-12)
    # the invariant part: k_0(x, Gx') = k_0(x, x'); for even T, k_{T/2} changes sign under G
    shifted = dense(hgram(group, kernel, A, way.power(B, 1)))
    np.testing.assert_allclose(shifted[0], real[0], atol=1e-12)
    if T % 2 == 0:
        np.testing.assert_allclose(shifted[T // 2], -real[T // 2], atol=1e-12)


def test_multiway_subkernels_change_sign_per_way():
    """2-way flips: k_t(x, G_j x') = (−1)^{t_j} k_t(x, x') (Prop 3.3 for each way of §3.5)."""
    group, kernel, X = CASES["flips"]
    G = dense(hgram(group, kernel, X, X))
    for j, way in enumerate(group.ways):
        Gs = dense(hgram(group, kernel, X, way.power(X, 1)))
        for t, (t1, t2) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            np.testing.assert_allclose(Gs[t], (-1) ** (t1, t2)[j] * G[t], atol=1e-12)


def orbit_projection(feature, kernel, X):
    """Dense cov(u, u) and cov(u, f(X)) from the inducing variables' definition u = P v, v = f(orbit of Z)."""
    group, Z = feature.group, np.asarray(feature.Z)
    W = group.weights()
    T, Tt = W.shape
    if Z.ndim == 2:  # shared: u_t = Σ_s W_ts f(G^s Z)
        V = np.concatenate([np.asarray(group.apply(Z, s)) for s in group.multi_indices()])
        P = np.kron(W, np.eye(len(Z)))
    else:  # u_t = Σ_s W_ts f(G^s Z_t); v ordered (t, s, i)
        m = Z.shape[1]
        V = np.concatenate([np.asarray(group.apply(Z[t], s)) for t in range(T) for s in group.multi_indices()])
        P = np.zeros((T * m, T * Tt * m))
        for t in range(T):
            P[t * m:(t + 1) * m, t * Tt * m:(t + 1) * Tt * m] = np.kron(W[t], np.eye(m))
    Kvv, Kvf = dense(kgram(kernel, V, V)), dense(kgram(kernel, V, X))
    return P @ Kvv @ P.T, P @ Kvf


@pytest.mark.parametrize("case, shared", [("pca-3way", True), ("rotation-5", True), ("pca-3way", False),
                                          ("rotation-5", False), ("rotation-4 x negation", False),
                                          ("longitude-6", False)])
def test_kuu_kuf_from_the_orbit_and_orthogonal_blocks(case, shared):
    """Kuu = blockdiag(K_t,uu) with cov(u_t, u_t') = 0 for t ≠ t', and Kuf, from the orbit formulas."""
    group, kernel, X = CASES[case]
    T, m = group.num_subkernels, 3
    Z = X[:m] if shared else np.stack([X[m * t:m * t + m] + 0.1 for t in range(T)]) if T * m <= 30 else None
    feature = HarmonicFeatures(group, Z, jitter=0.0)
    Kmm = jax.eval_shape(lambda: psg.Kuu(feature, kernel))  # structure only (runs the invariance check)
    assert isinstance(Kmm, BlockDiag) and Kmm.block_sizes == (m,) * T
    assert isinstance(Kmm, StackedBlockDiag) and Kmm.chol.shape == (T, m, m)  # T dense blocks, one batch
    Kuu_dense, Kuf = kuu_kuf(feature, kernel, X)
    Cuu, Cuf = orbit_projection(feature, kernel, X)
    scale = np.abs(Cuu).max()
    np.testing.assert_allclose(dense(Kuu_dense), Cuu, atol=1e-12 * scale)  # includes the zero blocks
    off = Cuu.copy()
    for t in range(T):
        off[t * m:(t + 1) * m, t * m:(t + 1) * m] = 0.0
    np.testing.assert_allclose(off, 0.0, atol=1e-12 * scale)
    np.testing.assert_allclose(dense(Kuf), Cuf, atol=1e-12)
    assert feature.num_features == T * m


def test_invariance_check():
    X = X3
    ard = psg.Matern32(1.0, np.array([0.5, 1.0, 2.0]))
    with pytest.raises(ValueError, match="not invariant"):
        check_invariance(principal_axes_negation(X, 2), ard, X)
    rotation = HarmonicFeatures(Rotation(4), X[:3])
    with pytest.raises(ValueError, match="not invariant"):  # raised by Kuu when values are concrete
        jax.eval_shape(lambda: psg.Kuu(rotation, ard))
    longitude, flat = HarmonicFeatures(LongitudeRotation(6), LONLAT[:3]), psg.Matern32(1.0, 30.0)
    with pytest.raises(ValueError, match="not invariant"):  # a plain kernel of (lon, lat)
        jax.eval_shape(lambda: psg.Kuu(longitude, flat))
    check_invariance(coordinate_negation(3, (0, 2)), ard, X)  # axis reflections keep ARD kernels
    check_invariance(LongitudeRotation(6), SphereEmbedded(KERNEL), LONLAT)


GROUPS_VS_ARD = {  # group on 3 inputs, and whether it keeps every per-dimension lengthscale
    "negation": (Negation(), True),
    "axis reflections": (coordinate_negation(3, (0, 2)), True),
    "axis-aligned plane, rotated basis": (Negation(np.array([[1.0, 1.0], [1.0, -1.0], [0.0, 0.0]]) / np.sqrt(2)),
                                          True),
    "pca-2way": (principal_axes_negation(X3, 2), False),
    "rotation": (Rotation(4, plane=(0, 2)), False),
    "rotation x axis flip": (Rotation(4) * Negation(np.array([0.0, 0.0, 1.0])), False),
}


@pytest.mark.parametrize("case", list(GROUPS_VS_ARD))
def test_coordinate_sign_flips_is_invariance_under_every_ard_lengthscale(case):
    """Group.coordinate_sign_flips(D) is True exactly when an ARD kernel with distinct lengthscales is
    invariant (checked on values); the harmonic feature accepts or refuses an ARD template accordingly."""
    group, expected = GROUPS_VS_ARD[case]
    assert group.coordinate_sign_flips(3) is expected
    ard = psg.Matern32(1.0, np.array([0.5, 1.0, 2.0]))
    if expected:
        check_invariance(group, ard, X3)
    else:
        with pytest.raises(ValueError, match="not invariant"):
            check_invariance(group, ard, X3)
    template = psg.Matern32(1.0, psg.Param(np.ones(3), constraints.positive))
    feature = HarmonicFeatures(group, X3[:3])
    if expected:
        assert feature.check_kernel(template) is template
    else:
        with pytest.raises(ValueError, match="site 'kernel_lengthscale'.*scalar lengthscale"):
            feature.check_kernel(template)


def test_non_linear_and_permutation_ways_refuse_per_dimension_lengthscales():
    assert not LongitudeRotation(6).coordinate_sign_flips(2)
    assert not ImageFlip((3, 4), 1).coordinate_sign_flips(12)
    assert not ImageShift((3, 4), axis=1).coordinate_sign_flips(12)
    sphere = HarmonicFeatures(LongitudeRotation(6), LONLAT[:3])
    sphere.check_kernel(SphereEmbedded(psg.Matern52(1.0, psg.Param(1.0, constraints.positive))))  # isotropic
    with pytest.raises(ValueError, match="site 'kernel_base_lengthscale'"):
        sphere.check_kernel(SphereEmbedded(psg.Matern52(1.0, dist.LogNormal(np.zeros(3), 1.0))))
    flips = HarmonicFeatures(ImageFlip((3, 4), 1), IMAGES[:3])
    with pytest.raises(ValueError, match="site 'kernel_lengthscale'"):
        flips.check_kernel(psg.SquaredExponential(1.0, dist.LogNormal(np.zeros(12), 1.0).to_event(1)))


def harmonic_regression(group, kernel, collapsed):
    """(gp, X, y) for a small regression with a learnt Gaussian noise."""
    X = X3[:20]
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1]
    lik = Gaussian(variance=psg.Param(0.1, constraints.positive))
    feature = HarmonicFeatures(group, X[:3])
    gp = (psg.CollapsedGP(feature, kernel, lik) if collapsed
          else psg.SparseGP(feature, kernel, lik, q_cov=block_diagonal_covariance))
    return gp, X, y


def svi_losses(gp, X, y, lengthscales):
    """SVI's loss (jitted) at the given lengthscales, the other params at their initial values."""
    params = {"likelihood_variance": 0.1}
    if isinstance(gp, psg.SparseGP):  # q(v) at the prior: T blocks of m = 3
        T = gp.feature.group.num_subkernels
        params.update(f_v_loc=jnp.zeros(3 * T), f_v_scale_tril=jnp.broadcast_to(jnp.eye(3), (T, 3, 3)))
    loss = jax.jit(lambda p: TraceMeanField_ELBO().loss(jax.random.PRNGKey(1), p, gp.model, gp.guide, X, y))
    return [float(loss(dict(params, kernel_lengthscale=jnp.asarray(ls)))) for ls in lengthscales]


@pytest.mark.parametrize("collapsed", [False, True], ids=["SparseGP", "CollapsedGP"])
def test_learned_per_dimension_lengthscale_with_a_rotation_is_refused_not_nan(collapsed):
    """Issue 17 item 2: an ARD lengthscale learnt under a Rotation group starts isotropic (the value check
    passes), drifts apart, and every loss turned NaN. The structure is now refused before the first
    step: when the approximation is built from the template, and by Kuu and Kuf under jit (per-dimension
    values substituted into an isotropic model), where the value check cannot run."""
    ard = psg.Matern32(1.0, psg.Param(np.ones(3), constraints.positive))
    with pytest.raises(ValueError, match="site 'kernel_lengthscale'.*Use a scalar lengthscale"):
        harmonic_regression(Rotation(4), ard, collapsed)
    iso = psg.Matern32(1.0, psg.Param(1.0, constraints.positive))
    gp, X, y = harmonic_regression(Rotation(4), iso, collapsed)
    with pytest.raises(ValueError, match="Rotation.*not invariant under per-dimension lengthscales"):
        svi_losses(gp, X, y, [np.ones(3)])
    feature = HarmonicFeatures(Rotation(4), X3[:3])
    with pytest.raises(ValueError, match="Product of 3 one-dimensional kernels"):  # isotropic at first, too
        jax.jit(lambda ls: psg.Kuf(feature, psg.Product([psg.Matern32(1.0, ls)] * 3), X3))(1.0)
    # a scalar lengthscale under the same group is accepted, and the loss stays finite when it moves
    losses = svi_losses(gp, X, y, [1.0, 0.4])
    assert np.all(np.isfinite(losses)) and losses[0] != losses[1]


@pytest.mark.parametrize("collapsed", [False, True], ids=["SparseGP", "CollapsedGP"])
def test_per_dimension_lengthscale_with_sign_flips_is_accepted_and_stays_finite(collapsed):
    """Coordinate negations keep ARD kernels invariant for any lengthscales: accepted, and with the
    lengthscales apart the loss is finite (and differs: they are used) and the value check passes."""
    group = coordinate_negation(3, (0, 1))
    ard = psg.Matern32(1.0, psg.Param(np.ones(3), constraints.positive))
    apart = np.array([0.5, 1.0, 2.0])
    losses = svi_losses(*harmonic_regression(group, ard, collapsed), [np.ones(3), apart])
    assert np.all(np.isfinite(losses)) and losses[0] != losses[1]
    check_invariance(group, psg.Matern32(1.0, apart), X3)


def test_bad_inputs():
    with pytest.raises(ValueError, match="sub-kernels"):
        HarmonicFeatures(Negation() * Negation(np.array([1.0, 0, 0])), np.zeros((3, 2, 3)))
    with pytest.raises(ValueError, match="group"):
        HarmonicFeatures("negation", X3[:2])
    with pytest.raises(ValueError, match="inputs"):
        HarmonicFeatures(ImageFlip((3, 4), 0), X3[:2])
    with pytest.raises(ValueError, match="NaN"):
        HarmonicFeatures(Negation(), np.full((2, 3), np.nan))
    params = {"likelihood_variance_map": 0.1, "f_v_loc": np.zeros(4), "f_v_scale_tril": np.eye(4)}
    with pytest.raises(ValueError, match="input dimensions"):
        psg.SparseGP(HarmonicFeatures(Negation(), X3[:2]), KERNEL).elbo(params, np.zeros((4, 2)), np.zeros(4))


def random_blocks(key, T, m, scale=0.5):
    L = np.tril(np.random.default_rng(key).normal(size=(T, m, m))) * scale
    L[:, np.arange(m), np.arange(m)] = np.abs(L[:, np.arange(m), np.arange(m)]) + 0.3
    return L


def test_block_diagonal_kl_equals_dense_kl():
    feature = HarmonicFeatures(principal_axes_negation(X3, 2), np.stack([X3[3 * t:3 * t + 3] for t in range(4)]))
    L = random_blocks(1, 4, 3)
    mu = np.random.default_rng(2).normal(size=12)

    @jax.jit
    def kls(feature, L, mu):
        Kmm = psg.Kuu(feature, KERNEL)
        S = BlockDiag(tuple(Dense.from_cholesky(Lt) for Lt in L))
        return psg.gaussian_kl(mu, S, Kmm), psg.gaussian_kl(mu, S, Identity(12)), Kmm.to_dense(), S.to_dense()

    kl_block, kl_white, Kd, Sd = kls(feature, L, mu)
    Sd = dense(Sd)

    def kl_dense(P):
        Pinv = np.linalg.inv(P)
        return 0.5 * (np.trace(Pinv @ Sd) + mu @ Pinv @ mu - 12 + np.linalg.slogdet(P)[1] - np.linalg.slogdet(Sd)[1])

    np.testing.assert_allclose(kl_block, kl_dense(dense(Kd)), rtol=1e-9)
    np.testing.assert_allclose(kl_white, kl_dense(np.eye(12)), rtol=1e-12)


def test_block_diagonal_covariance_family_starts_at_the_prior():
    feature = HarmonicFeatures(Negation(), X3[:4])

    def run(whiten):
        Kmm = psg.Kuu(feature, KERNEL)
        with handlers.trace() as tr, handlers.seed(rng_seed=0):
            loc, S = block_diagonal_covariance("f_v", 8, Kmm, whiten)
        return loc, S, tr["f_v_scale_tril"]["value"], Kmm.to_dense()

    for whiten in (True, False):
        loc, S, L, Kd = jax.jit(run, static_argnums=0)(whiten)
        assert isinstance(S, BlockDiag) and S.block_sizes == (4, 4) and L.shape == (2, 4, 4)
        np.testing.assert_allclose(dense(S.to_dense()), np.eye(8) if whiten else dense(Kd), atol=1e-12)
        np.testing.assert_allclose(loc, 0.0)
    uneven = BlockDiag((Dense(np.eye(3)), Dense(2 * np.eye(2))))
    with handlers.trace() as tr, handlers.seed(rng_seed=0):
        _, S = block_diagonal_covariance("q", 5, uneven, False)
    assert set(tr) == {"q_loc", "q_scale_tril_0", "q_scale_tril_1"}
    np.testing.assert_allclose(dense(S.to_dense()), np.diag([1, 1, 1, 2, 2.0]), atol=1e-12)
    with pytest.raises(ValueError, match="BlockDiag"):
        block_diagonal_covariance("q", 3, Dense(np.eye(3)), True)


def svgp_predict(Z, kernel, Xs, m_u, S_u):
    """Dense SVGP predictive (unwhitened) on inducing points Z: independent numpy reference."""
    Kzz, Kzs = dense(kgram(kernel, Z, Z)), dense(kgram(kernel, Z, Xs))
    A = np.linalg.solve(Kzz, Kzs)
    mean = A.T @ m_u
    var = float(kernel.variance) - np.sum(Kzs * A, 0) + np.sum(A * (S_u @ A), 0)
    return mean, var


@pytest.mark.parametrize("q_family", ["full", "block"])
def test_shared_z_matches_svgp_on_the_orbit_points(q_family):
    """Thm 4.1: with shared Z, u = (W ⊗ I) v for v = f({G^s Z}), so the HKD model with q(u) and the SVGP
    on the orbit points with q(v) = N(P⁻¹m, P⁻¹ S P⁻ᵀ) have the same predictive mean and variance."""
    group = ImageFlip((2, 2), 0) * ImageFlip((2, 2), 1)  # T = T̃ = 4, W invertible
    kernel = psg.SquaredExponential(1.1, 1.3)
    rng = np.random.default_rng(3)
    Z, Xs = rng.normal(size=(3, 4)), rng.normal(size=(7, 4))
    T, m = 4, 3
    L = random_blocks(4, T, m)
    if q_family == "full":
        Lf = np.tril(rng.normal(size=(T * m, T * m))) * 0.3 + np.eye(T * m)
        params, S_u = {"f_u_scale_tril": Lf}, Lf @ Lf.T
        q_cov = "full"
    else:
        params = {"f_u_scale_tril": L}
        S_u = dense(BlockDiag(tuple(Dense.from_cholesky(Lt) for Lt in L)).to_dense())
        q_cov = block_diagonal_covariance
    m_u = rng.normal(size=T * m)
    params["f_u_loc"] = m_u
    gp = psg.SparseGP(HarmonicFeatures(group, Z, jitter=0.0), kernel, Gaussian(0.1), whiten=False, q_cov=q_cov)
    pred = jax.jit(lambda p: gp.predict(Xs, params=p))(params)
    V = np.concatenate([np.asarray(group.apply(Z, s)) for s in group.multi_indices()])  # G^s Z, s-major
    Pinv = np.linalg.inv(np.kron(group.weights(), np.eye(m)))
    mean, var = svgp_predict(V, kernel, Xs, Pinv @ m_u, Pinv @ S_u @ Pinv.T)
    np.testing.assert_allclose(pred["f_mean"], mean, atol=1e-9)
    np.testing.assert_allclose(pred["f_var"], var, atol=1e-9)


def closed_orbit_data(group, n=12, seed=5):
    """Inputs closed under the group (every x with all G^s x) and targets."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 3))
    X = np.concatenate([np.asarray(group.apply(base, s)) for s in group.multi_indices()])
    return X, np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=len(X))


@pytest.mark.parametrize("group", [multi_negation(np.eye(3)[:, :2]), Rotation(5)], ids=["2-way", "rot5"])
def test_hvgp_attains_the_collapsed_bound_on_symmetric_inputs(group):
    """Thm 4.2 made exact: for inputs closed under G the optimal q(u) is block-diagonal (the features
    of different sub-kernels are orthogonal over the data), so the HVGP's ELBO at the blockwise optimum
    equals the collapsed (Titsias) bound."""
    X, y = closed_orbit_data(group)
    noise = 0.05
    T, m = group.num_subkernels, 3
    Z = np.random.default_rng(6).normal(size=(T, m, 3))
    feature = HarmonicFeatures(group, Z)
    A = dense(jax.jit(lambda f: psg.Kuu(f, KERNEL).whiten(psg.Kuf(f, KERNEL, X)))(feature))  # L_t⁻¹ K_t,uf
    S = np.linalg.inv(np.eye(T * m) + A @ A.T / noise)  # optimal whitened q [Titsias]
    mu = S @ A @ y / noise
    blocks = [S[t * m:(t + 1) * m, t * m:(t + 1) * m] for t in range(T)]
    np.testing.assert_allclose(S, dense(BlockDiag(tuple(Dense(b) for b in blocks)).to_dense()), atol=1e-10)
    gp = psg.SparseGP(feature, KERNEL, Gaussian(noise), q_cov=block_diagonal_covariance)
    params = {"f_v_loc": mu, "f_v_scale_tril": np.stack([np.linalg.cholesky(b) for b in blocks])}
    elbo, bound = jax.jit(lambda p: (gp.elbo(p, X, y), psg.collapsed_elbo(feature, KERNEL, X, y, noise)))(params)
    np.testing.assert_allclose(elbo, bound, rtol=1e-9)


@pytest.mark.parametrize("whiten", [True, False])
def test_hvgp_elbo_against_dense_computation(whiten):
    """ELBO = Σ_n E_q log N(y_n | f_n, σ²) − Σ_t KL_t with the marginals of notes §1 (HVGP), densely."""
    group = principal_axes_negation(X3, 2)
    X, y = X3, np.cos(X3[:, 0])
    T, m, noise = 4, 3, 0.2
    Z = np.stack([X[3 * t:3 * t + 3] + 0.05 for t in range(T)])
    feature = HarmonicFeatures(group, Z, jitter=1e-8)
    Cuu, Cuf = orbit_projection(feature, KERNEL, X)
    Cuu = Cuu + 1e-8 * 1.3 * np.eye(T * m)  # the feature's jitter ε σ²
    L = random_blocks(7, T, m, 0.3)
    Sq = dense(BlockDiag(tuple(Dense.from_cholesky(Lt) for Lt in L)).to_dense())
    mu = np.random.default_rng(8).normal(size=T * m) * 0.3
    R = np.linalg.cholesky(Cuu)
    if whiten:  # u = R v: q(u) = N(R mu, R S Rᵀ), prior N(0, I) on v
        Su, mu_u, P = R @ Sq @ R.T, R @ mu, np.eye(T * m)
    else:
        Su, mu_u, P = Sq, mu, Cuu
    Aq = np.linalg.solve(Cuu, Cuf)
    mean = Aq.T @ mu_u
    var = 1.3 - np.sum(Cuf * Aq, 0) + np.sum(Aq * (Su @ Aq), 0)
    ve = np.sum(-0.5 * np.log(2 * np.pi * noise) - ((y - mean) ** 2 + var) / (2 * noise))
    Pinv = np.linalg.inv(P)
    kl = 0.5 * (np.trace(Pinv @ Sq) + mu @ Pinv @ mu - T * m + np.linalg.slogdet(P)[1] - np.linalg.slogdet(Sq)[1])
    gp = psg.SparseGP(feature, KERNEL, Gaussian(noise), whiten=whiten, q_cov=block_diagonal_covariance)
    site = gp.site
    params = {f"{site}_loc": mu, f"{site}_scale_tril": L}
    np.testing.assert_allclose(jax.jit(lambda p: gp.elbo(p, X, y))(params), ve - kl, rtol=1e-9)


def test_minibatch_svi_objective_is_unbiased_for_the_hvgp_elbo():
    """TraceMeanField_ELBO with batch_size B (u ~ q, data subsampled, KL analytic) averages to −ELBO."""
    group = principal_axes_negation(X3, 2)
    X, y = jnp.asarray(X3), jnp.asarray(np.cos(X3[:, 0]))
    feature = HarmonicFeatures(group, X3[:2])
    gp = psg.SparseGP(feature, KERNEL, Gaussian(0.3), q_cov=block_diagonal_covariance)
    params = {"f_v_loc": jnp.asarray(np.random.default_rng(9).normal(size=8) * 0.5),
              "f_v_scale_tril": jnp.asarray(random_blocks(10, 4, 2, 0.3))}
    elbo = TraceMeanField_ELBO()
    keys = jax.random.split(jax.random.PRNGKey(0), 1500)
    losses = jax.jit(jax.vmap(lambda k: elbo.loss(k, params, gp.model, gp.guide, X, y, batch_size=7)))(keys)
    exact = -jax.jit(lambda p: gp.elbo(p, X, y))(params)
    se = float(jnp.std(losses)) / np.sqrt(len(keys))
    assert abs(float(jnp.mean(losses)) - float(exact)) < 4 * se  # 4 standard errors: false alarm ~6e-5


def test_generic_path_factorises_only_m_by_m_blocks():
    """SparseGP's ELBO with harmonic features never factorises or solves with a (Tm)×(Tm) matrix: every
    Cholesky / triangular solve acts on one m×m block (cost T m³, not (Tm)³)."""
    group = principal_axes_negation(X3, 3)
    T, m = 8, 3
    feature = HarmonicFeatures(group, np.stack([X3[:m]] * T))
    gp = psg.SparseGP(feature, KERNEL, Gaussian(0.3), q_cov=block_diagonal_covariance)
    params = {"f_v_loc": jnp.zeros(T * m), "f_v_scale_tril": jnp.stack([jnp.eye(m)] * T)}
    jaxpr = jax.make_jaxpr(lambda p: gp.elbo(p, X3, np.ones(30)))(params)
    sizes = []

    def walk(jpr):
        for eqn in jpr.eqns:
            if eqn.primitive.name in ("cholesky", "triangular_solve"):
                sizes.append(eqn.invars[0].aval.shape[-1])
            for sub in jax.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    assert sizes and max(sizes) == m
