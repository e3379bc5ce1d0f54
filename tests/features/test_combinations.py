"""features/combinations: additive features stack the per-dimension blocks, Kronecker features take
their Kronecker (Kuu) and Khatri–Rao (Kuf) products, against dense constructions from the 1-D parts."""
import numpy as np
from scipy.linalg import block_diag

import ppl_sparsegp as psg
from ppl_sparsegp.features import AdditiveFeatures, FourierFeatures, KroneckerFeatures

X = np.random.default_rng(0).uniform(0.0, 1.0, (9, 2))
F1, F2 = FourierFeatures(-0.5, 1.5, 3), FourierFeatures(-0.3, 1.3, 2)
K1, K2 = psg.Matern32(1.2, 0.4), psg.Matern12(0.7, 0.3)


def test_additive_blocks_against_the_one_dimensional_parts():
    f, k = AdditiveFeatures([F1, F2]), psg.Additive([K1, K2])
    np.testing.assert_allclose(psg.Kuu(f, k).to_dense(),
                               block_diag(psg.Kuu(F1, K1).to_dense(), psg.Kuu(F2, K2).to_dense()), rtol=1e-12)
    np.testing.assert_allclose(psg.Kuf(f, k, X), np.vstack([psg.Kuf(F1, K1, X[:, :1]), psg.Kuf(F2, K2, X[:, 1:])]),
                               rtol=1e-12)


def test_kronecker_products_against_the_one_dimensional_parts():
    f, k = KroneckerFeatures([F1, F2]), psg.Product([K1, K2])
    np.testing.assert_allclose(psg.Kuu(f, k).to_dense(),
                               np.kron(psg.Kuu(F1, K1).to_dense(), psg.Kuu(F2, K2).to_dense()), rtol=1e-12)
    A, B = np.asarray(psg.Kuf(F1, K1, X[:, :1])), np.asarray(psg.Kuf(F2, K2, X[:, 1:]))
    khatri_rao = np.stack([np.kron(A[:, n], B[:, n]) for n in range(len(X))], axis=1)
    np.testing.assert_allclose(psg.Kuf(f, k, X), khatri_rao, rtol=1e-12)


def test_per_dimension_kuf_of_concrete_data_stays_a_constant_inside_a_trace():
    """Additive and Kronecker VFF over concrete data inside a trace of the hyperparameters (NUTS): each
    dimension's Kuf is computed once (not a traced value, so not recomputed per gradient), with the
    same values as outside the trace."""
    import jax

    for f, make in ((AdditiveFeatures([F1, F2]), lambda ell: psg.Additive([psg.Matern32(1.2, ell), K2])),
                    (KroneckerFeatures([F1, F2]), lambda ell: psg.Product([psg.Matern32(1.2, ell), K2]))):
        seen = []
        jax.make_jaxpr(lambda ell: seen.append(psg.Kuf(f, make(ell), X)) or ell)(0.4)
        assert not isinstance(seen[0], jax.core.Tracer)
        np.testing.assert_allclose(seen[0], psg.Kuf(f, make(0.4), X), rtol=1e-12)


def test_grid_conditional_computes_no_basis_per_gradient():
    """On a Grid of concrete axes inside a trace of the hyperparameters, the per-axis Kuf are constants:
    the traced program evaluates no cosine (the per-axis basis, or the edge formulas, per gradient)."""
    import jax
    import jax.numpy as jnp

    from ppl_sparsegp.grid import Grid

    f, grid = KroneckerFeatures([F1, F2]), Grid([jnp.linspace(0.0, 1.0, 5), jnp.linspace(0.0, 1.0, 4)])
    kernel = lambda ell: psg.Product([psg.Matern32(1.2, ell), K2])  # noqa: E731
    q = np.linspace(-1.0, 1.0, psg.Kuu(f, kernel(0.4)).sqrt_cols)  # whitened
    mean = lambda ell: psg.conditional(f, kernel(ell), grid, q, whiten=True)[0]  # noqa: E731
    eqns = jax.make_jaxpr(mean)(0.4).jaxpr.eqns
    assert not any(e.primitive.name in ("cos", "sin") for e in eqns)
    np.testing.assert_allclose(jax.jit(mean)(0.4), mean(0.4), rtol=1e-12)
