"""Cyclic transformation groups: actions against explicit matrices / NumPy, orders, DFT weights, checks."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import ppl_sparsegp as psg
from ppl_sparsegp.groups import (
    ImageFlip,
    ImageShift,
    LongitudeRotation,
    Negation,
    ProductGroup,
    Rotation,
    coordinate_negation,
    multi_negation,
    principal_axes_negation,
    real_dft_weights,
)
from ppl_sparsegp.kernels import SphereEmbedded


def test_real_weights_are_the_paired_complex_dft():
    """Row t of the real weights is F_t + F_{T−t} (and F_0, F_{T/2} alone), F_{ts} = e^{−2πits/T}/T [§3.4]."""
    for T in range(2, 9):
        s = np.arange(T)
        F = np.exp(-2j * np.pi * np.outer(s, s) / T) / T
        W = real_dft_weights(T)
        assert W.shape == (T // 2 + 1, T)
        for t in range(T // 2 + 1):
            ref = F[t] if t == 0 or 2 * t == T else F[t] + F[T - t]
            np.testing.assert_allclose(W[t], ref.real, atol=1e-14)
            np.testing.assert_allclose(ref.imag, 0.0, atol=1e-14)  # conjugate pairs are real


def test_multiway_negation_weights_are_walsh_hadamard():
    """J-way negation: W = H_{2^J} / 2^J (Sylvester order = numpy.kron order), notes §1 [repo]."""
    g = multi_negation(np.eye(4)[:, :3])
    assert g.orbit_size == 8 and g.num_subkernels == 8
    np.testing.assert_allclose(g.weights(), scipy.linalg.hadamard(8) / 8.0, atol=1e-15)


@pytest.mark.parametrize("group", [Rotation(5) * Negation(), Rotation(6), ImageShift((3, 4), axis=1, step=1)
                                   * ImageFlip((3, 4), axis=0), LongitudeRotation(7)])
def test_weight_columns_sum_to_the_identity_element(group):
    """Σ_t W_{t,s} = δ_{s,0}: the sub-kernels sum to k(x, G⁰x') = k(x, x')."""
    e0 = np.zeros(group.orbit_size)
    e0[0] = 1.0
    np.testing.assert_allclose(group.weights().sum(0), e0, atol=1e-14)
    assert group.num_subkernels == math.prod(T // 2 + 1 for T in group.orders)


WAYS_3D = [Negation(), Negation(np.array([0.6, 0.8, 0.0])), Rotation(5), Rotation(4, plane=(1, 2)),
           Rotation(3, plane=np.linalg.qr(np.random.default_rng(1).normal(size=(3, 2)))[0])]


@pytest.mark.parametrize("way", WAYS_3D + [LongitudeRotation(12, lon_index=1)])
def test_ways_are_cyclic_of_their_order_and_orbit_is_the_powers(way):
    rng = np.random.default_rng(0)
    X = np.array(way.to_domain(rng.normal(size=(6, 3))))
    T = way.order
    np.testing.assert_allclose(way.power(way.power(X, T - 1), 1), X, atol=1e-12)
    for s in range(1, T):
        assert not np.allclose(way.power(X, s), X)
    orbit = np.asarray(way.orbit(X))
    assert orbit.shape == (T,) + X.shape
    Y = X
    for s in range(T):  # orbit[s] = G applied s times
        np.testing.assert_allclose(orbit[s], Y, atol=1e-10)
        Y = np.asarray(way.power(Y, 1))
    way.check(3)


def test_product_orbit_is_in_c_order():
    g = Rotation(3, plane=(0, 1)) * Negation(np.array([0.0, 0.0, 1.0]))
    X = np.random.default_rng(0).normal(size=(4, 3))
    orbit = np.asarray(g.orbit(X))
    for i, (s1, s2) in enumerate(g.multi_indices()):
        ref = np.asarray(g.ways[0].power(g.ways[1].power(X, s2), s1))
        np.testing.assert_allclose(orbit[i], ref, atol=1e-12)
        np.testing.assert_allclose(np.asarray(g.apply(X, (s1, s2))), ref, atol=1e-12)


def test_rotation_and_reflection_match_explicit_matrices():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5, 3))
    th = 2 * np.pi * 2 / 7
    R = np.eye(3)
    R[np.ix_([0, 2], [0, 2])] = [[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]
    np.testing.assert_allclose(Rotation(7, plane=(0, 2)).power(X, 2), X @ R.T, atol=1e-12)
    U = np.linalg.qr(rng.normal(size=(3, 2)))[0]
    H = np.eye(3) - 2 * U @ U.T  # Householder reflection through span(U)
    np.testing.assert_allclose(Negation(U).power(X, 1), X @ H.T, atol=1e-12)
    np.testing.assert_allclose(Negation().power(X, 1), -X)


def test_image_transformations_match_numpy_flips_and_rolls():
    rng = np.random.default_rng(3)
    imgs = rng.normal(size=(2, 4, 5, 3))
    flat = imgs.reshape(2, -1)
    np.testing.assert_array_equal(ImageFlip((4, 5, 3), axis=0).power(flat, 1),
                                  imgs[:, ::-1].reshape(2, -1))
    np.testing.assert_array_equal(ImageFlip((4, 5, 3), axis=1).power(flat, 1),
                                  imgs[:, :, ::-1].reshape(2, -1))
    shift = ImageShift((4, 5, 3), axis=0, step=2)
    assert shift.order == 2
    np.testing.assert_array_equal(shift.power(flat, 1), np.roll(imgs, 2, axis=1).reshape(2, -1))
    shift = ImageShift((4, 6), axis=1, step=4)  # 6 / gcd(6, 4) = 3
    assert shift.order == 3
    img2 = rng.normal(size=(1, 4, 6))
    np.testing.assert_array_equal(shift.power(img2.reshape(1, -1), 2), np.roll(img2, 8, axis=2).reshape(1, -1))


def test_longitude_rotation_wraps_and_sphere_kernel_is_invariant():
    g = LongitudeRotation(12)
    X = np.array([[170.0, 10.0], [-180.0, -45.0]])
    np.testing.assert_allclose(g.power(X, 1), [[-160.0, 10.0], [-150.0, -45.0]])
    k = SphereEmbedded(psg.SquaredExponential(1.0, 0.7))
    rng = np.random.default_rng(4)
    P = np.stack([rng.uniform(-180, 180, 8), rng.uniform(-80, 80, 8)], 1)
    np.testing.assert_allclose(k(g.power(P, 5)), k(P), atol=1e-12)
    E = np.asarray(SphereEmbedded.embed(P))
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-12)
    lon, lat = np.deg2rad(P[0])
    np.testing.assert_allclose(E[0], [np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)])


def test_principal_axes_negation_reflects_the_leading_principal_components():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 4)) @ rng.normal(size=(4, 4))
    Xc = X - X.mean(0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)  # principal axes, by decreasing variance
    g = principal_axes_negation(X, 2)
    assert g.orders == (2, 2)
    for j, way in enumerate(g.ways):
        u = np.asarray(way.directions)[:, 0]
        np.testing.assert_allclose(abs(u @ Vt[j]), 1.0, atol=1e-8)
        GX = np.asarray(way.power(Xc, 1))
        np.testing.assert_allclose(GX @ Vt.T, (Xc @ Vt.T) * np.where(np.arange(4) == j, -1.0, 1.0), atol=1e-8)
    split = principal_axes_negation(X, 2, split=True)  # all 4 axes dealt into 2 subspaces of 2
    assert [len(w.directions[0]) for w in split.ways] == [2, 2]
    split.check(4)


def test_coordinate_negation():
    g = coordinate_negation(3, (0, 2))
    X = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(g.apply(X, (1, 1)), X * [-1, 1, -1], atol=1e-14)


def test_groups_are_hashable_and_static_under_jit():
    a = principal_axes_negation(np.random.default_rng(0).normal(size=(50, 3)), 2)
    b = principal_axes_negation(np.random.default_rng(0).normal(size=(50, 3)), 2)
    assert a == b and hash(a) == hash(b)
    assert ImageFlip((8, 8), 0) * ImageFlip((8, 8), 1) == ProductGroup((ImageFlip((8, 8), 0), ImageFlip((8, 8), 1)))
    f = jax.jit(lambda X, g: g.orbit(X), static_argnums=1)
    X = jnp.ones((2, 3))
    np.testing.assert_allclose(f(X, a), a.orbit(X))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="orthonormal"):
        Negation(np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="order"):
        Rotation(1)
    with pytest.raises(ValueError, match="axis"):
        ImageFlip((4, 4), axis=2)
    with pytest.raises(ValueError, match="step"):
        ImageShift((4, 4), axis=0, step=4)
    with pytest.raises(ValueError, match="distinct"):
        coordinate_negation(3, (0, 0))
    with pytest.raises(ValueError, match="num_ways"):
        principal_axes_negation(np.ones((10, 2)), 3)
    with pytest.raises(ValueError, match="inputs"):
        ImageFlip((4, 4), 0).check(15)
    with pytest.raises(ValueError, match="do not commute"):
        (Rotation(4, plane=(0, 1)) * Rotation(4, plane=(1, 2))).check(3)
    with pytest.raises(ValueError, match="not independent"):
        (Negation() * Negation()).check(3)
    with pytest.raises(ValueError, match="needs at least"):
        Rotation(3, plane=(0, 3)).check(3)
