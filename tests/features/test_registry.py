r"""The registry of feature families (:data:`ppl_sparsegp.features.FAMILIES`): complete, and every family
at its test-sized instance honours the contracts the generic code relies on, each checked against a dense
float64 computation from the family's own Kuu and Kuf (independent of the library's solves, whitening and
registered shortcuts):

* the registry holds every concrete feature class the package exports (so a new family cannot be left
  out of the cross-family tests), each once, and its instances are of that class;
* ``conditional`` (the default, or the family's registration: Kronecker, trigonometric, additive
  orthogonal) gives :math:`\mu = K_{fu}K_{uu}^{-1}\mathbf m` and :math:`\sigma^2 = k_{ff} - q_{ff} +
  \operatorname{diag}(A^\top SA)`, centred and whitened (:math:`A = R^\top K_{uu}^{-1}K_{uf}`);
* ``sufficient_statistics`` (the dense default, or a family's one-pass registration: VFF, spherical) equals
  :math:`A = K_{uf}K_{uf}^\top`, :math:`\mathbf c = K_{uf}\mathbf y`, :math:`\mathbf y^\top\mathbf y`, N;
* the attributes generic modules branch on are true of the family: ``covariance_of_prior`` is False only
  where :math:`K_{ff} - Q_{ff}` is indeed indefinite, ``one_pass_with_fixed_map`` only with a map
  (``kuf_kernel_fields``).

The bound and residual properties over the registry are in ``tests/test_properties.py``. Eager
evaluation of instances of at most 49 features on 30 inputs: about a second per family in all.
"""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_sparsegp as psg
import ppl_sparsegp.features as features
from ppl_sparsegp.features import FAMILIES, InducingFeature
from ppl_sparsegp.linalg import Dense

IDS = [f.name for f in FAMILIES]
N = 30


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_registry_is_complete():
    """Every concrete InducingFeature subclass the package defines is exported (features and top level) and
    registered once; every registered class is such a subclass."""
    defined = {c for c in _subclasses(InducingFeature)
               if c.__module__.startswith("ppl_sparsegp.") and not c.__name__.startswith("_")
               and not inspect.isabstract(c)}
    exported = {getattr(features, n) for n in features.__all__}
    exported = {c for c in exported
                if isinstance(c, type) and issubclass(c, InducingFeature) and c is not InducingFeature}
    registered = [f.feature_class for f in FAMILIES]
    assert len(registered) == len(set(registered)), "a family is registered twice"
    assert defined <= exported, f"export these families in ppl_sparsegp.features: {defined - exported}"
    assert exported - set(registered) == set(), \
        f"add these families to FAMILIES (ppl_sparsegp/features/registry.py): {exported - set(registered)}"
    assert set(registered) <= exported
    top = {getattr(psg, n) for n in psg.__all__}
    assert set(registered) <= top, f"export these families at the top level: {set(registered) - top}"


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_instance_is_of_its_family(family):
    """The example is an instance of exactly its class, on a kernel the family accepts, with valid inputs."""
    feature, kernel = family.instance()
    assert type(feature) is family.feature_class
    feature.check_kernel(kernel)
    X = family.inputs(np.random.default_rng(0), N)
    assert np.shape(feature.check_inputs(jnp.asarray(X))) == X.shape
    assert 1 <= feature.num_features <= 50


@jax.jit
def _matrices(feature, kernel, X):
    Kmm = psg.Kuu(feature, kernel)
    return Kmm.to_dense(), psg.Kuf(feature, kernel, X), kernel(X), Kmm.sqrt()


def _dense(family, seed=0):
    """(feature, kernel, X, Kuu, Kuf, Kff, R): the family's instance on N inputs, the matrices (R the
    library's square root of Kuu) as float64 NumPy arrays (one compiled program per family)."""
    feature, kernel = family.instance()
    X = jnp.asarray(family.inputs(np.random.default_rng(seed), N))
    return (feature, kernel, X, *(np.asarray(a, np.float64) for a in _matrices(feature, kernel, X)))


@jax.jit
def _conditionals(feature, kernel, X, q):
    """conditional's (mean, var) centred and whitened, for q = {False: (m, S), True: (m_v, S_v)}."""
    return [psg.conditional(feature, kernel, X, q[w][0], Dense(q[w][1]), whiten=w) for w in (False, True)]


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_conditional_equals_the_dense_formula(family):
    """``conditional`` centred (u ~ N(m, S)) and whitened (u = Rv, v ~ N(m_v, S_v)) against the dense
    formulas from Kuu and Kuf."""
    feature, kernel, X, K, Kuf, Kff, R = _dense(family)
    rng = np.random.default_rng(1)
    M = K.shape[0]
    np.testing.assert_allclose(R @ R.T, K, rtol=1e-10, atol=1e-12 * np.max(np.abs(K)))
    A = np.linalg.solve(K, Kuf)                                   # Kuu⁻¹ Kuf
    qff = np.sum(Kuf * A, axis=0)
    q = {}
    for whiten, B in ((False, A), (True, R.T @ A)):
        L = np.tril(rng.normal(size=(B.shape[0],) * 2)) * 0.3
        q[whiten] = (rng.normal(size=B.shape[0]), L @ L.T + 0.1 * np.eye(len(L)))
    out = _conditionals(feature, kernel, X, jax.tree.map(jnp.asarray, q))
    scale = np.max(np.diag(Kff))
    for (whiten, B), (mean, var) in zip(((False, A), (True, R.T @ A)), out):
        m, S = q[whiten]
        np.testing.assert_allclose(np.asarray(mean), B.T @ m, atol=1e-8 * np.sqrt(scale) * (1 + np.abs(m).sum()))
        want = np.maximum(np.diag(Kff) - qff + np.sum(B * (S @ B), axis=0), 0.0)
        np.testing.assert_allclose(np.asarray(var), want, atol=1e-8 * scale * (1 + M))


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_sufficient_statistics_equal_the_dense_sums(family):
    """``sufficient_statistics`` (a family's one-pass registration in chunks of 7 rows, or the default)
    against Kuf Kufᵀ, Kuf y, yᵀy and N."""
    feature, kernel, X, _, Kuf, _, _ = _dense(family)
    y = np.random.default_rng(2).normal(size=N)
    default = psg.sufficient_statistics.registry[(object, object)]
    registered = psg.sufficient_statistics.dispatch(feature, kernel) is not default
    stats = psg.sufficient_statistics(feature, kernel, X, jnp.asarray(y), **({"chunk_size": 7} if registered else {}))
    A = np.asarray(stats.A) if stats.A is not None else np.asarray(stats.root) @ np.asarray(stats.root).T
    scale = np.max(np.abs(Kuf)) ** 2 * N
    np.testing.assert_allclose(A, Kuf @ Kuf.T, atol=1e-10 * scale)
    np.testing.assert_allclose(np.asarray(stats.c), Kuf @ y, atol=1e-10 * np.sqrt(scale) * np.abs(y).sum())
    np.testing.assert_allclose(np.asarray(stats.f1), Kuf.sum(axis=1), atol=1e-10 * np.sqrt(scale) * N)
    assert float(stats.yy) == pytest.approx(float(y @ y), rel=1e-12) and int(stats.n) == N
    assert float(stats.ysum) == pytest.approx(float(y.sum()), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_covariance_of_prior_attribute_is_true(family):
    """``covariance_of_prior`` (which the bound and residual properties skip on): True gives Kff − Qff ⪰ 0
    (tests/test_properties.py); False must mean Kff − Qff is indefinite, so no family skips them needlessly."""
    feature, _, _, K, Kuf, Kff, _ = _dense(family)
    residual = Kff - Kuf.T @ np.linalg.solve(K, Kuf)
    lam = np.linalg.eigvalsh(0.5 * (residual + residual.T))
    scale = np.max(np.diag(Kff))
    if feature.covariance_of_prior:
        assert lam[0] >= -1e-8 * scale, (family.name, lam[0] / scale)
    else:
        assert lam[0] < -1e-3 * scale and lam[-1] > 1e-3 * scale, (family.name, lam[0] / scale, lam[-1] / scale)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_one_pass_attribute_is_true(family):
    """``one_pass_with_fixed_map`` (fit_spherical's precondition) only for a family whose Kuf depends on an
    input map of the kernel (``kuf_kernel_fields``), and one whose Kuf then moves with that map."""
    cls = family.feature_class
    if not cls.one_pass_with_fixed_map:
        return
    assert cls.kuf_kernel_fields, family.name
    feature, kernel = family.instance()
    X = jnp.asarray(family.inputs(np.random.default_rng(3), N))
    moved = kernel.replace(**{f: 1.5 * getattr(kernel, f) for f in cls.kuf_kernel_fields})
    assert not np.allclose(np.asarray(psg.Kuf(feature, kernel, X)), np.asarray(psg.Kuf(feature, moved, X)))
