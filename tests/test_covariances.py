"""The ground-floor dispatchers (:mod:`ppl_sparsegp.covariances`) and the sufficient statistics.

* lookup walks the method resolution orders, feature first: a subclass of a registered feature or kernel
  gets its parent's registration, a registration for the subclass itself wins, and an unsupported pair
  raises ``NotImplementedError`` naming the kernels the feature supports;
* ``conditional.register`` on a feature subclass is what the approximations then call (nothing else
  changes);
* ``sufficient_statistics``: the default against statistics computed with NumPy from the kernel written
  out here, VFF's registration against the default, ``centred`` against the statistics of y − μ computed
  directly, ``with_root`` of a rank-deficient A.
"""
import jax
import numpy as np
import pytest
from numpyro import handlers

import ppl_sparsegp as psg
from ppl_sparsegp.conditionals import conditional
from ppl_sparsegp.covariances import (
    Dispatcher,
    FeatureDispatcher,
    Kuf,
    Kuu,
    SufficientStatistics,
    sufficient_statistics,
)
from ppl_sparsegp.features import AdditiveFeatures, FourierFeatures, InducingPoints, KroneckerFeatures

RNG = np.random.default_rng(0)
VARIANCE, LENGTHSCALE = 1.3, 0.4
KERNEL = psg.Matern32(VARIANCE, LENGTHSCALE)
X = RNG.uniform(0.0, 1.0, (15, 1))
Y = np.sin(5 * X[:, 0]) + 2.0
Z = np.linspace(0.1, 0.9, 4)[:, None]


def matern32(A, B):
    """σ²(1 + √3 r/ℓ) exp(−√3 r/ℓ), written out here."""
    r = np.sqrt(3.0) * np.abs(A[:, None, 0] - B[None, :, 0]) / LENGTHSCALE
    return VARIANCE * (1 + r) * np.exp(-r)


class MyPoints(InducingPoints):
    """A feature subclass with no registrations of its own."""


class MyMatern32(psg.Matern32):
    """A kernel subclass with no registrations of its own."""


class ShiftedPoints(InducingPoints):
    """A feature subclass that overrides ``conditional`` (here: the default's mean plus 1)."""


@conditional.register(ShiftedPoints)
def _shifted_conditional(feature, kernel, X, q_mu, q_cov=None, **kwargs):
    mean, var = conditional.default(feature, kernel, X, q_mu, q_cov, **kwargs)
    return mean + 1.0, var


class MoreShiftedPoints(ShiftedPoints):
    pass


def test_lookup_walks_the_method_resolution_orders():
    ff = FourierFeatures(-1.0, 2.0, 3)
    assert Kuu.dispatch(MyPoints(Z), KERNEL) is Kuu.dispatch(InducingPoints(Z), KERNEL)
    assert Kuf.dispatch(MyPoints(Z), MyMatern32()) is Kuf.dispatch(InducingPoints(Z), KERNEL)
    assert Kuu.dispatch(ff, MyMatern32()) is Kuu.dispatch(ff, psg.Matern32())
    # feature first: (Sub, Base kernel) wins over (Base feature, exact kernel); then the kernel's MRO
    d = Dispatcher("d")

    class Base:
        pass

    class Sub(Base):
        pass

    for key in [(object, object), (Base, psg.Matern32), (Sub, psg.kernels.Stationary), (Base, MyMatern32)]:
        d.register(*key)(lambda *args, key=key: key)
    assert d(Sub(), MyMatern32()) == (Sub, psg.kernels.Stationary)
    assert d(Base(), MyMatern32()) == (Base, MyMatern32)
    assert d(Base(), psg.Matern32()) == (Base, psg.Matern32)
    assert d(Base(), psg.Matern52()) == (object, object)
    f = FeatureDispatcher("f")
    f.register(Base)(lambda feature: "base")
    assert f(Sub()) == "base"
    with pytest.raises(NotImplementedError, match="f has no registration for int"):
        f(1)


def test_unsupported_pair_names_the_supported_kernels():
    ff = FourierFeatures(-1.0, 2.0, 3)
    with pytest.raises(NotImplementedError, match=r"Kuu is not defined for feature FourierFeatures with kernel "
                                                  r"SquaredExponential; supported kernels for this feature: ") as info:
        Kuu(ff, psg.SquaredExponential())
    supported = str(info.value).split("supported kernels for this feature: ")[1]
    for kernel in ("Matern12", "Matern32", "Matern52"):
        assert f"(FourierFeatures, {kernel})" in supported
    assert "SquaredExponential" not in supported
    with pytest.raises(NotImplementedError, match="supported kernels for this feature: none"):
        Dispatcher("Kuu")(ff, KERNEL)
    # the approximations refuse the pair when they are built, before any data arrive
    with pytest.raises(NotImplementedError, match="Kuf is not defined|Kuu is not defined"):
        psg.SparseGP(ff, psg.SquaredExponential())


def test_a_registered_conditional_is_what_the_approximations_call():
    """ShiftedPoints registers a conditional (the default's mean + 1); a further subclass inherits it,
    and spectral_gp (which only calls the dispatcher) returns the shifted function exactly."""
    assert conditional.dispatch(MoreShiftedPoints(Z)) is _shifted_conditional
    assert conditional.dispatch(MyPoints(Z)) is conditional.default
    v = RNG.normal(size=4)

    @jax.jit
    def f(v):
        with handlers.substitute(data={"f_v": v}):
            return [psg.spectral_gp("f", F(Z), KERNEL, X) for F in (InducingPoints, MoreShiftedPoints)]

    plain, shifted = f(v)
    np.testing.assert_allclose(shifted - plain, 1.0, rtol=0, atol=1e-12)


def test_default_statistics_equal_numpy_statistics():
    """A = Kuf Kufᵀ, c = Kuf y, yᵀy, N, Kuf·1, Σy from the kernel written out with NumPy (relative 1e-12:
    sums of 15 O(1) terms)."""
    assert sufficient_statistics.dispatch(InducingPoints(Z), KERNEL) is sufficient_statistics.registry[object, object]
    stats = jax.jit(lambda X, Y: sufficient_statistics(InducingPoints(Z), KERNEL, X, Y))(X, Y)
    K = matern32(Z, X)
    for field, ref in [("A", K @ K.T), ("c", K @ Y), ("yy", Y @ Y), ("n", 15), ("f1", K.sum(1)), ("ysum", Y.sum())]:
        np.testing.assert_allclose(getattr(stats, field), ref, rtol=1e-12, err_msg=field)
    assert stats.root is None and stats.num_features == 4


def test_vff_registration_equals_the_default():
    """FourierFeatures and AdditiveFeatures of them (every input inside the box) stream their statistics in
    one pass (``fourier_statistics``, checked in detail in test_fourier_statistics.py); through the
    dispatcher they equal the default's statistics of the dense Kuf to 1e-10 (rounding: both are sums of
    15 products)."""
    default = sufficient_statistics.registry[object, object]
    ff = FourierFeatures(-0.5, 1.5, 4)
    for feature in (ff, AdditiveFeatures([ff])):
        assert sufficient_statistics.dispatch(feature, KERNEL) is not default
    kron = KroneckerFeatures([ff, ff])
    assert sufficient_statistics.dispatch(kron, psg.Product([KERNEL, KERNEL])) is default
    stats, ref = sufficient_statistics(ff, KERNEL, X, Y), jax.jit(lambda X, Y: default(ff, KERNEL, X, Y))(X, Y)
    for field in ("A", "c", "yy", "n", "f1", "ysum"):
        np.testing.assert_allclose(getattr(stats, field), getattr(ref, field), rtol=1e-10, atol=1e-10, err_msg=field)


def test_centred_statistics_are_the_statistics_of_y_minus_the_mean():
    """centred(μ) against c, yᵀy, Σy of y − μ formed directly (A, f1, N unchanged; on data the kept y
    too); statistics without f1 cannot be centred."""
    K, mu = matern32(Z, X), 0.7
    for keep_root in (False, True):
        stats = SufficientStatistics.from_kuf(K, Y, keep_root=keep_root).centred(mu)
        r = Y - mu
        for field, ref in [("c", K @ r), ("yy", r @ r), ("ysum", r.sum()), ("f1", K.sum(1)), ("n", 15)]:
            np.testing.assert_allclose(getattr(stats, field), ref, rtol=1e-12, err_msg=field)
        if keep_root:
            np.testing.assert_allclose(stats.y, r, rtol=1e-15)
            np.testing.assert_array_equal(stats.root, K)
        else:
            np.testing.assert_allclose(stats.A, K @ K.T, rtol=1e-12)
    with pytest.raises(ValueError, match="cannot be centred"):
        SufficientStatistics(K @ K.T, K @ Y, Y @ Y, 15.0).centred(mu)


def test_with_root_of_a_rank_deficient_a():
    """Precomputed A of 3 points for 4 features has rank 3: its smallest eigenvalue is rounding noise of
    either sign, clipped at 0, and root rootᵀ = A to rounding (1e-12 of A's largest entry)."""
    K = matern32(Z, X[:3])
    A = K @ K.T
    rooted = SufficientStatistics(A, K @ Y[:3], Y[:3] @ Y[:3], 3.0).with_root()
    root = np.asarray(rooted.root)
    assert root.shape == (4, 4) and np.all(np.isfinite(root))
    np.testing.assert_allclose(root @ root.T, A, rtol=0, atol=1e-12 * A.max())
    assert np.linalg.matrix_rank(root, tol=1e-8 * np.abs(root).max()) == 3
