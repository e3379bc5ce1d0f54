"""Every structured operator against its dense form, for every operation.

Tolerances: the reference tests run in float64 (eps ~ 2.2e-16). The test matrices are small (n <= 24)
and well conditioned (cond(K) <~ 1e3 by construction: A A^T / n + I, positive diagonals bounded away from
0), so backward-stable Cholesky/triangular solves give relative errors ~ n * cond * eps < 1e-11. We
assert rtol = 1e-9 (two orders of margin) with atol = 1e-10 for entries that are ~0 by cancellation.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sparsegp.linalg import (
    BlockDiag,
    Dense,
    Diagonal,
    DiagPlusLowRank,
    Identity,
    Kronecker,
    KroneckerSum,
    LinearOperator,
    StackedBlockDiag,
    stacked_cholesky,
    triangular_inverse,
)

RTOL, ATOL = 1e-9, 1e-10
KEY = jax.random.PRNGKey(0)
# All test randomness comes from one draw with the fixed KEY, consumed in order (one JAX compilation
# instead of one per shape; the values are NumPy so dense references need no compilation either).
_POOL = np.asarray(jax.random.normal(KEY, (1 << 16,)))


class _Draws:
    def __init__(self, offset):
        self.pos = offset

    def normal(self, *shape):
        size = int(np.prod(shape))
        assert self.pos + size <= _POOL.size, "enlarge _POOL"
        out = _POOL[self.pos:self.pos + size].reshape(shape)
        self.pos += size
        return out

    def spd(self, n):
        A = self.normal(n, n)
        return A @ A.T / n + np.eye(n)

    def positive(self, n):
        return 0.5 + 1.5 / (1.0 + np.exp(-self.normal(n)))  # in (0.5, 2)

    def dplr(self, n, r):
        return DiagPlusLowRank(self.positive(n), self.normal(n, r))


def close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@functools.lru_cache(maxsize=None)
def cases():
    g = _Draws(0)
    return {
        "dense": Dense(g.spd(6)),
        "diagonal": Diagonal(g.positive(5)),
        "identity": Identity(5),
        "dplr_r1": g.dplr(7, 1),
        "dplr_r2": g.dplr(7, 2),
        "dplr_r3": g.dplr(7, 3),
        "blockdiag": BlockDiag((Dense(g.spd(3)), g.dplr(4, 2), Diagonal(g.positive(2)))),
        "kron2": Kronecker((Dense(g.spd(3)), g.dplr(4, 2))),
        "kron3": Kronecker((Dense(g.spd(2)), Diagonal(g.positive(3)), g.dplr(4, 1))),
        "blockdiag_kron": BlockDiag((Kronecker((Dense(g.spd(2)), g.dplr(3, 1))), Identity(2),
                                     g.dplr(3, 2))),
        "kron_sum": KroneckerSum((np.linalg.cholesky(g.spd(3)), np.linalg.cholesky(g.spd(4))),
                                 (g.normal(3, 3), g.normal(4, 2))),
        # 2x2 blocks: the 3-column right-hand sides take the inverse-factor path, vectors the solve path
        "stacked": StackedBlockDiag(np.stack([g.spd(2) for _ in range(4)])),
        # like VFF's Matérn-3/2 Kuu: one column on rows 0-2, the other on rows 4-6, row 3 zero (diagonal capacitance)
        "dplr_disjoint": DiagPlusLowRank(g.positive(7),
                                         g.normal(7, 2) * np.array([[1, 0]] * 3 + [[0, 0]] + [[0, 1]] * 3),
                                         disjoint=True),
        # VFF's 2-D Kuu and a block of them: square disjoint roots inside the structures
        "kron_disjoint": Kronecker((DiagPlusLowRank(g.positive(3), g.normal(3, 2) * np.array([[1, 0], [1, 0], [0, 1]]),
                                                    disjoint=True), Dense(g.spd(2)))),
        "blockdiag_disjoint": BlockDiag((Diagonal(g.positive(2)), DiagPlusLowRank(
            g.positive(3), g.normal(3, 2) * np.array([[1, 0], [0, 1], [0, 1]]), disjoint=True))),
    }


NAMES = list(cases())


TRACE_KINDS = ("dense", "diagonal", "identity", "dplr")  # S in trace_solve: the forms held as diag + factor


@jax.jit
def _evaluate(op, inp):
    """Every operation of ``op`` at once, under one ``jax.jit`` (op-by-op dispatch of ~100 small
    primitives per case would dominate the test time; eager execution is checked separately)."""
    out = {"dense": op.to_dense(), "sqrt": op.sqrt(), "logdet": op.logdet(),
           "diagonal": op.diagonal(), "inv_quad": op.inv_quad(inp["v"]),
           "matmul_op": op @ inp["M"], "inv_diagonal": op._inv_diagonal()}
    for method, keys in [("matmul", "vM"), ("solve", "vM"), ("whiten", "vM"),
                         ("sqrt_rmatmul", "vM"), ("sqrt_matmul", "wW"), ("solve_sqrt", "wW")]:
        for k in keys:
            out[f"{method}_{k}"] = getattr(op, method)(inp[k])
    for kind in TRACE_KINDS:
        out[f"trace_solve_{kind}"] = op.trace_solve(inp[f"S_{kind}"])
        out[f"S_{kind}"] = inp[f"S_{kind}"].to_dense()
    return out


@functools.lru_cache(maxsize=None)
def results(name):
    op = cases()[name]
    n, m = op.size, op.sqrt_cols
    g = _Draws(20000)
    inp = {"v": g.normal(n), "M": g.normal(n, 3), "w": g.normal(m), "W": g.normal(m, 3),
           "S_dense": Dense(g.spd(n)), "S_diagonal": Diagonal(g.positive(n)), "S_dplr": g.dplr(n, 2),
           "S_identity": Identity(n)}
    out = jax.tree_util.tree_map(np.asarray, _evaluate(op, inp))
    return op, {k: v for k, v in inp.items() if not k.startswith("S_")}, out


@pytest.fixture(params=NAMES)
def res(request):
    return results(request.param)


# ---------------------------------------------------------------------------------------------
# every operation against the dense matrix
# ---------------------------------------------------------------------------------------------
def test_shape_and_dense_is_symmetric(res):
    op, _, out = res
    K, n = out["dense"], op.size
    assert op.shape == (n, n) == K.shape
    assert op.dtype == K.dtype == np.float64
    close(K, K.T)
    assert np.all(np.linalg.eigvalsh(K) > 0)


def test_matmul(res):
    op, inp, out = res
    K = out["dense"]
    close(out["matmul_v"], K @ inp["v"])
    close(out["matmul_M"], K @ inp["M"])
    close(out["matmul_op"], K @ inp["M"])


def test_solve(res):
    op, inp, out = res
    K = out["dense"]
    close(out["solve_v"], np.linalg.solve(K, inp["v"]))
    close(out["solve_M"], np.linalg.solve(K, inp["M"]))


def test_logdet(res):
    op, inp, out = res
    sign, ld = jnp.linalg.slogdet(out["dense"])
    assert sign == 1
    close(out["logdet"], ld)


def test_diagonal(res):
    op, inp, out = res
    close(out["diagonal"], np.diagonal(out["dense"]))


def test_inv_quad(res):
    op, inp, out = res
    close(out["inv_quad"], inp["v"] @ np.linalg.solve(out["dense"], inp["v"]))


def test_sqrt_factor(res):
    op, inp, out = res
    R = out["sqrt"]
    assert R.shape == (op.size, op.sqrt_cols)
    close(R @ R.T, out["dense"])


def test_sqrt_matmul(res):
    op, inp, out = res
    close(out["sqrt_matmul_w"], out["sqrt"] @ inp["w"])
    close(out["sqrt_matmul_W"], out["sqrt"] @ inp["W"])


def test_sqrt_rmatmul(res):
    op, inp, out = res
    close(out["sqrt_rmatmul_v"], out["sqrt"].T @ inp["v"])
    close(out["sqrt_rmatmul_M"], out["sqrt"].T @ inp["M"])


def test_solve_sqrt(res):
    """K⁻¹ R V (the weights of whitened inducing values), against a dense solve."""
    op, inp, out = res
    K, R = out["dense"], out["sqrt"]
    for k in "wW":
        close(out[f"solve_sqrt_{k}"], np.linalg.solve(K, R @ inp[k]))


def test_disjoint_root_is_square_and_d_half_times_symmetric():
    """With disjoint columns R = D^½(I + GGᵀ)^½: square, and D^{-½} R symmetric (checked densely)."""
    op = cases()["dplr_disjoint"]
    R = np.asarray(op.sqrt())
    assert R.shape == (7, 7) and op.sqrt_cols == 7
    S = R / np.sqrt(np.asarray(op.d))[:, None]
    close(S, S.T)
    G = np.asarray(op.B) / np.sqrt(np.asarray(op.d))[:, None]
    w, U = np.linalg.eigh(np.eye(7) + G @ G.T)
    close(S, U @ np.diag(np.sqrt(w)) @ U.T)


def test_whiten(res):
    op, inp, out = res
    K, R = out["dense"], out["sqrt"]
    for k in "vM":
        close(out[f"whiten_{k}"], R.T @ np.linalg.solve(K, inp[k]))
    # ||R^T K^{-1} b||^2 = b^T K^{-1} b
    close(np.sum(out["whiten_v"] ** 2), out["inv_quad"])


@pytest.mark.parametrize("kind", TRACE_KINDS)
def test_trace_solve(res, kind):
    op, inp, out = res
    close(out[f"trace_solve_{kind}"], np.trace(np.linalg.solve(out["dense"], out[f"S_{kind}"])))


def test_inv_diagonal(res):
    # diag(K^{-1}): what trace_solve uses for the diagonal part of S
    op, inp, out = res
    close(out["inv_diagonal"], np.diagonal(np.linalg.inv(out["dense"])))


def test_eager_matches_jit(res):
    # the tests above run under jit; op-by-op execution traces the same code (logdet only: eager
    # dispatch of every method would double the test time)
    op, inp, out = res
    close(op.logdet(), out["logdet"], rtol=1e-12)


def test_trace_solve_structured_pairs():
    g = _Draws(30000)
    trace = jax.jit(lambda K, S: K.trace_solve(S))

    def want(K, S):
        return np.trace(np.linalg.solve(np.asarray(K.to_dense()), np.asarray(S.to_dense())))

    # BlockDiag with BlockDiag of the same block sizes: blockwise
    K = cases()["blockdiag"]
    S = BlockDiag((g.dplr(3, 1), Dense(g.spd(4)), Diagonal(g.positive(2))))
    close(trace(K, S), want(K, S))
    # different block sizes: no blockwise rule, and a BlockDiag S is not held as diag + factor: raises
    # (the former general rule formed S's dense square-root factor)
    S = BlockDiag((Dense(g.spd(5)), Diagonal(g.positive(4))))
    with pytest.raises(NotImplementedError, match=r"BlockDiag does not implement trace_solve \(S: BlockDiag\)"):
        K.trace_solve(S)
    # Kronecker with Kronecker of matching factor sizes: product of factor traces
    K = cases()["kron2"]
    S = Kronecker((Diagonal(g.positive(3)), Dense(g.spd(4))))
    close(trace(K, S), want(K, S))
    # Kronecker with a KroneckerSum of matching factor sizes: two products of factor traces
    S = KroneckerSum((np.linalg.cholesky(g.spd(3)), np.linalg.cholesky(g.spd(4))),
                     (g.normal(3, 2), g.normal(4, 3)))
    close(trace(K, S), want(K, S))
    # (StackedBlockDiag with StackedBlockDiag, and BlockDiag with it: test_stacked_block_diag_against_dense)
    S = Dense(g.spd(5))
    close(Identity(5).trace_solve(S), np.trace(np.asarray(S.to_dense())))
    with pytest.raises(ValueError, match="size"):
        Identity(4).trace_solve(S)
    # a pair with no fast rule raises instead of forming S's dense factor
    with pytest.raises(NotImplementedError, match="Kronecker does not implement trace_solve.*StackedBlockDiag"):
        cases()["kron2"].trace_solve(StackedBlockDiag(np.stack([g.spd(3) for _ in range(4)])))
    with pytest.raises(NotImplementedError, match="DiagPlusLowRank does not implement trace_solve.*KroneckerSum"):
        g.dplr(12, 1).trace_solve(cases()["kron_sum"])


def test_dense_from_cholesky_and_jitter():
    K = _Draws(31000).spd(5)
    L = np.linalg.cholesky(K)
    op = Dense.from_cholesky(L)
    close(op.to_dense(), K)
    close(op.logdet(), np.linalg.slogdet(K)[1])
    opj = Dense(K, jitter=0.5)
    close(opj.to_dense(), K + 0.5 * np.eye(5))
    close(opj.logdet(), np.linalg.slogdet(K + 0.5 * np.eye(5))[1])


# ---------------------------------------------------------------------------------------------
# StackedBlockDiag and the Cholesky helpers (stacks of small blocks)
# ---------------------------------------------------------------------------------------------
def _random_blocks(key, T, m, scale=0.5):
    L = np.tril(np.random.default_rng(key).normal(size=(T, m, m))) * scale
    L[:, np.arange(m), np.arange(m)] = np.abs(L[:, np.arange(m), np.arange(m)]) + 0.3
    return L


def test_stacked_block_diag_against_dense():
    """The stacked operator of the HVGP's Kuu and q: every operation against the dense block-diagonal
    matrix, with many (inverse-factor path) and few (triangular-solve path) right-hand sides."""
    rng = np.random.default_rng(11)
    T, m = 3, 5
    A = rng.normal(size=(T, m, m))
    K = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(m)
    op = StackedBlockDiag(K, jitter=1e-3)
    Kd = np.kron(np.eye(T), np.zeros((m, m)))
    for t in range(T):
        Kd[t * m:(t + 1) * m, t * m:(t + 1) * m] = K[t] + 1e-3 * np.eye(m)
    L = np.linalg.cholesky(Kd)  # block-diagonal too
    np.testing.assert_allclose(np.asarray(op.to_dense()), Kd, atol=1e-12)
    np.testing.assert_allclose(np.asarray(op.sqrt()), L, atol=1e-12)
    np.testing.assert_allclose(float(op.logdet()), np.linalg.slogdet(Kd)[1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(op.diagonal()), np.diag(Kd), rtol=1e-12)
    for k in (1, 2 * m):  # k > m: through L⁻¹
        B = rng.normal(size=(T * m, k))
        np.testing.assert_allclose(np.asarray(op.matmul(B)), Kd @ B, atol=1e-12)
        np.testing.assert_allclose(np.asarray(op.solve(B)), np.linalg.solve(Kd, B), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(op.whiten(B)), np.linalg.solve(L, B), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(op.sqrt_matmul(B)), L @ B, atol=1e-12)
        np.testing.assert_allclose(np.asarray(op.sqrt_rmatmul(B)), L.T @ B, atol=1e-12)
    b = rng.normal(size=T * m)
    np.testing.assert_allclose(float(op.inv_quad(b)), b @ np.linalg.solve(Kd, b), rtol=1e-9)
    S = StackedBlockDiag.from_cholesky(_random_blocks(12, T, m))
    np.testing.assert_allclose(float(op.trace_solve(S)), np.trace(np.linalg.solve(Kd, np.asarray(S.to_dense()))),
                               rtol=1e-9)
    blocks = BlockDiag(tuple(Dense(K[t], jitter=1e-3) for t in range(T)))  # the same matrix, block by block
    np.testing.assert_allclose(float(blocks.trace_solve(S)), float(op.trace_solve(S)), rtol=1e-12)
    assert all(isinstance(bl, Dense) for bl in op.blocks) and op.block_sizes == (m,) * T


@pytest.mark.parametrize("m", [1, 3, 8, 13])
def test_triangular_inverse_and_cholesky_gradient(m):
    """triangular_inverse = L⁻¹ (powers of two and padded sizes); stacked_cholesky's reverse-mode rule
    (products with L⁻¹ only) = JAX's Cholesky gradient, on a stack of SPD matrices."""
    rng = np.random.default_rng(m)
    A = rng.normal(size=(4, m, m))
    K = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(m)
    L = np.linalg.cholesky(K)
    np.testing.assert_allclose(np.asarray(triangular_inverse(L)), np.linalg.inv(L), rtol=1e-10, atol=1e-12)
    C = rng.normal(size=(4, m, m))
    ours = jax.jit(jax.grad(lambda K: jnp.sum(C * stacked_cholesky(K))))(K)
    ref = jax.jit(jax.grad(lambda K: jnp.sum(C * jnp.linalg.cholesky(K))))(K)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# transformations
# ---------------------------------------------------------------------------------------------
def test_jit_and_traced_construction():
    # every case goes through jit (see _evaluate); here: operators built from traced arrays
    g = _Draws(32000)
    K, d, B = g.spd(4), g.positive(4), g.normal(4, 2)
    f = jax.jit(lambda K, d, B: BlockDiag((Dense(K), DiagPlusLowRank(d, B), Diagonal(d))).logdet())
    want = (np.linalg.slogdet(K)[1] + np.linalg.slogdet(np.diag(d) + B @ B.T)[1]
            + np.sum(np.log(d)))
    close(f(K, d, B), want)
    op = cases()["kron3"]
    close(jax.jit(lambda o: o.logdet())(op), op.logdet(), rtol=1e-12)


def test_vmap_batch_of_operators():
    g = _Draws(33000)
    ds = np.stack([g.positive(5) for _ in range(4)])
    Ks = np.stack([g.spd(5) for _ in range(4)])
    b = g.normal(5)
    diag_batch = jax.vmap(Diagonal)(ds)
    dense_batch = jax.vmap(Dense)(Ks)
    close(jax.vmap(lambda o: o.logdet())(diag_batch), np.sum(np.log(ds), axis=1))
    close(jax.vmap(lambda o: o.logdet())(dense_batch), np.linalg.slogdet(Ks)[1])
    close(jax.vmap(lambda o: o.solve(b))(dense_batch), np.stack([np.linalg.solve(K, b) for K in Ks]))
    close(jax.vmap(lambda o: o.solve(b))(diag_batch), b / ds)
    # stacking concrete operators leafwise gives the same batch
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[Dense(K) for K in Ks])
    close(jax.vmap(lambda o: o.logdet())(stacked), np.linalg.slogdet(Ks)[1])


def test_grad_logdet_dplr():
    g = _Draws(34000)
    d, B = g.positive(7), g.normal(7, 2)
    grad = jax.jit(jax.grad(lambda d: DiagPlusLowRank(d, B).logdet()))(d)
    # d/dd_i log|D + B B^T| = (K^{-1})_ii
    close(grad, np.diagonal(np.linalg.inv(np.diag(d) + B @ B.T)))


def test_float32_dplr_solve():
    g = _Draws(35000)
    d, B, b = g.positive(20), g.normal(20, 3), g.normal(20)
    f32 = np.float32
    op32 = DiagPlusLowRank(d.astype(f32), B.astype(f32))
    x32 = op32.solve(b.astype(f32))
    assert op32.dtype == jnp.float32 and x32.dtype == jnp.float32
    assert op32.logdet().dtype == jnp.float32
    x64 = np.linalg.solve(np.diag(d) + B @ B.T, b)
    # float32 eps ~ 1.2e-7; cond(K) ~ 1e2 here, so 1e-4 relative leaves ample margin
    assert float(np.linalg.norm(np.asarray(x32, dtype=float) - x64) / np.linalg.norm(x64)) < 1e-4


def _max_intermediate_size(jaxpr):
    biggest = 0
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            biggest = max(biggest, int(np.prod(v.aval.shape)) if hasattr(v.aval, "shape") else 0)
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    biggest = max(biggest, _max_intermediate_size(inner))
    return biggest


@pytest.mark.parametrize("method", ["matmul", "solve", "whiten", "sqrt_rmatmul", "diagonal",
                                    "logdet", "inv_quad"])
def test_structured_ops_never_form_n_by_n(method):
    g = _Draws(36000)
    for op in [g.dplr(200, 3),
               Kronecker((Dense(g.spd(10)), g.dplr(20, 2))),
               BlockDiag((g.dplr(150, 2), Diagonal(np.ones(50)))),
               StackedBlockDiag(np.stack([g.spd(4) for _ in range(50)]))]:
        n = op.size
        args = () if method in ("diagonal", "logdet") else (jnp.ones(n),)
        jaxpr = jax.make_jaxpr(lambda o, *a: getattr(o, method)(*a))(op, *args).jaxpr
        assert _max_intermediate_size(jaxpr) < n * n // 4, (type(op).__name__, method)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(ValueError, match="Dense: matrix must be a square 2-D"):
        Dense(jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="Dense: matrix must be a square 2-D"):
        Dense(jnp.ones(3))
    with pytest.raises(ValueError, match="Dense: matrix contains NaN"):
        Dense(jnp.eye(3).at[0, 0].set(jnp.nan))
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite.*jitter"):
        Dense(jnp.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="Diagonal: d must be 1-D"):
        Diagonal(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="Diagonal: d contains NaN"):
        Diagonal(jnp.array([1.0, jnp.inf]))
    with pytest.raises(ValueError, match="Diagonal: d must be > 0"):
        Diagonal(jnp.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="DiagPlusLowRank: B must have 3 rows"):
        DiagPlusLowRank(jnp.ones(3), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="DiagPlusLowRank: B must be 2-D"):
        DiagPlusLowRank(jnp.ones(3), jnp.ones(3))
    with pytest.raises(ValueError, match="DiagPlusLowRank: d must be > 0"):
        DiagPlusLowRank(-jnp.ones(3), jnp.ones((3, 1)))
    with pytest.raises(ValueError, match="disjoint=True.*more than one nonzero.*leave disjoint=False"):
        DiagPlusLowRank(jnp.ones(3), jnp.ones((3, 2)), disjoint=True)
    with pytest.raises(ValueError, match="Kronecker: factors must be a non-empty tuple"):
        Kronecker(())
    with pytest.raises(ValueError, match=r"Kronecker: factors\[1\] must be a LinearOperator"):
        Kronecker((Identity(2), jnp.eye(2)))
    with pytest.raises(ValueError, match="BlockDiag: blocks must be a non-empty tuple"):
        BlockDiag([])
    with pytest.raises(ValueError, match="BlockDiag: blocks must be a non-empty tuple"):
        BlockDiag(Identity(2))
    with pytest.raises(ValueError, match="Identity: n must be a positive int"):
        Identity(0)
    with pytest.raises(ValueError, match=r"Dense.solve: B must have shape \(6,\)"):
        cases()["dense"].solve(jnp.ones(5))
    with pytest.raises(ValueError, match=r"sqrt_matmul: V must have shape \(9,\)"):
        cases()["dplr_r2"].sqrt_matmul(jnp.ones(7))


def test_checks_skipped_under_tracing():
    # a non-PD matrix under jit cannot be checked: the result is NaN, no exception
    out = jax.jit(lambda M: Dense(M).logdet())(jnp.array([[1.0, 2.0], [2.0, 1.0]]))
    assert np.isnan(out)


def test_unimplemented_operation_raises():
    class Bare(LinearOperator):
        pass

    with pytest.raises(NotImplementedError, match="Bare does not implement solve"):
        Bare().solve(jnp.ones(2))
    # the base has no dense fallback: trace_solve raises unless the structure implements it
    for method, args in [("matmul", (jnp.ones(2),)), ("logdet", ()), ("diagonal", ()), ("sqrt", ()),
                         ("sqrt_matmul", (jnp.ones(2),)), ("sqrt_rmatmul", (jnp.ones(2),)), ("to_dense", ()),
                         ("trace_solve", (Identity(2),)), ("_inv_diagonal", ())]:
        with pytest.raises(NotImplementedError, match="Bare does not implement"):
            getattr(Bare(), method)(*args)

    class DenseWithoutTrace(Dense):  # a structure that does not implement trace_solve
        trace_solve = LinearOperator.trace_solve

    with pytest.raises(NotImplementedError, match=r"DenseWithoutTrace does not implement trace_solve \(S: Diagonal\)"):
        DenseWithoutTrace(np.eye(3)).trace_solve(Diagonal(np.ones(3)))
