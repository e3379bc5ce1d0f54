r"""Property tests (hypothesis) of the invariants the library promises, over random shapes, hyperparameters
and dtypes (issue 17, item 3). Every reference is computed independently, in float64 NumPy, from the
parameters the library was given (rounded to the tested dtype first):

(a) every structured operator (:class:`Dense` and ``Dense.from_cholesky``, :class:`Diagonal`,
    :class:`Identity`, :class:`DiagPlusLowRank`, :class:`StackedBlockDiag`, :class:`BlockDiag`,
    :class:`Kronecker`, :class:`KroneckerSum`, nested) against its dense matrix for every operation:
    ``to_dense``, ``matmul``, ``solve``, ``logdet``, ``diagonal``, ``sqrt`` (:math:`RR^\top = K`),
    ``sqrt_matmul``, ``sqrt_rmatmul``, ``whiten``, ``inv_quad`` and ``trace_solve`` (against the forms of S
    every structure takes: dense, diagonal, identity, diagonal + low rank, and the structure-matched ones:
    block-diagonal with the same blocks, Kronecker or Kronecker-sum with the same factors, stacked blocks);
    float32 operators return float32;
(b) the collapsed bound ≤ the exact log marginal likelihood, for every feature family that is a
    covariance of the GP prior (inducing points, VFF for Matérn-1/2, 3/2, 5/2 and the periodic kernel,
    additive and Kronecker combinations, Hermite and trigonometric VOF, additive VOF, harmonic features)
    on random data and hyperparameters, long lengthscales and dense inducing sets included;
(c) :math:`K_{ff} - Q_{ff}` is positive semi-definite for the same families (:math:`Q_{ff} = W^\top W`,
    :math:`W = R^\top K_{uu}^{-1}K_{uf}` as the library whitens);
(d) the whitened and centred :class:`~ppl_sparsegp.SparseGP` log densities agree up to the change of
    variables :math:`\mathbf u = R\mathbf v`: for v in the row space of R (all of it when R is square),
    :math:`\log p_w(\mathbf v, \mathbf y) - \log p_c(R\mathbf v, \mathbf y) = \tfrac12\log|K_{uu}|
    - \tfrac{M'-M}{2}\log 2\pi` (R is M × M'; for VFF's :math:`[D^{1/2}, B]` the null space of R carries
    the extra N(0, I) factor), and their likelihood terms are equal;
(e) the structured KL (:func:`~ppl_sparsegp.gaussian_kl` and the registered ``kl_divergence`` of two
    :class:`~ppl_sparsegp.StructuredNormal`) equals the dense Gaussian KL, for every prior structure with
    the q structures it is paired with, and for every structure as q against the whitened prior N(0, I).

(b), (c) and (d) also run over the registry of families (:data:`ppl_sparsegp.features.FAMILIES`, complete by
``tests/features/test_registry.py``), each at its test-sized instance: every family, the integral-transform and
spherical ones included; (b) and (c) only where the family declares ``covariance_of_prior``.

Random Fourier features are not in (b) and (c): their Kuu, Kuf are not covariances of the GP prior, so
:math:`K_{ff} - Q_{ff}` is indefinite and their "bound" (the sparse-spectrum marginal likelihood) may exceed
the exact value (``tests/approximations/test_collapsed.py`` checks it against a dense evaluation instead); they
are in (d).

**Cost.** jit compilation dominates (1–3 s per new structure, family or shape on one core), so the fast
tier (unmarked) draws the *values* (hyperparameters, data, matrices, conditioning) with one structure per
test and dtype, and the ``slow`` tier draws structures, shapes, families, kernels and likelihoods too,
with more examples (``SLOW``). Shapes come from small sets, so that examples share compilations.
Hypothesis runs derandomized (the same examples every run) without a database.

**Tolerances** (ε the unit roundoff of the tested dtype: 2.2e-16 or 1.2e-7).

(a), (e): backward-stable factorisations give errors of order n·ε·κ, with κ = ‖K‖ for products and
cond(K) for solves, log-determinants, whitening and traces, times a stability factor s of the structure
beyond cond(K): :class:`DiagPlusLowRank`'s Woodbury solve forms :math:`D^{-1}x` and cancels it down to
:math:`K^{-1}x`, so its error is relative to :math:`\|K\|/\min d \ge` cond(K), not cond(K) (they differ
when the rank reaches the size and d is small: measured 4.6e4·n·cond(K)·ε for d = 1e-6, n = 4, r = 3;
harmless for VFF, whose rank ≤ 3 is far below M, so that :math:`\|K\|/\min d \approx` cond(K)), and
:class:`KroneckerSum`'s generalised eigendecomposition loses cond(A) = Π_j cond(L_j)². Measured over 60
random structures per dtype (not derandomized), errors ≤ 2.2 (float64) and ≤ 1.2 (float32) in units of
n·ε·s·κ (the KLs included, κ the larger of the two covariances'); the tests allow ``C_OP`` = 50.

(b), (c): see the constants below.

(d): the two log densities are sums of the same O(N + M) terms evaluated through different factors
(centred: a solve with Kuu; whitened: none); see ``RTOL_WHITEN``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence
from scipy.linalg import block_diag

import ppl_sparsegp as psg
from ppl_sparsegp import StructuredNormal, gaussian_kl
from ppl_sparsegp.approximations.collapsed import collapsed_elbo, exact_log_marginal_likelihood
from ppl_sparsegp.features import (
    FAMILIES as REGISTRY,
    AdditiveFeatures,
    AdditiveOrthogonal,
    FourierFeatures,
    HarmonicFeatures,
    HermiteFeatures,
    InducingPoints,
    KroneckerFeatures,
    RandomFourierFeatures,
    TrigonometricFeatures,
)
from ppl_sparsegp.groups import Negation, Rotation
from ppl_sparsegp.linalg import (
    BlockDiag,
    Dense,
    Diagonal,
    DiagPlusLowRank,
    Identity,
    Kronecker,
    KroneckerSum,
    StackedBlockDiag,
)

F64, F32 = np.float64, np.float32
_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=False,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAST = settings(max_examples=3, **_COMMON)
SLOW = settings(max_examples=20, **_COMMON)  # the slow tier: each new structure, family, M or kernel compiles
SLOW_OPERATORS = settings(SLOW, max_examples=40)
SLOW_WHITENING = settings(SLOW, max_examples=12)

C_OP = 50.0
SEEDS = st.integers(0, 2**31 - 1)


def eps(dtype):
    return float(np.finfo(dtype).eps)


def as64(x):
    return np.asarray(x, dtype=np.float64)


# ==================================================================================================
# (a), (e) structured operators
# ==================================================================================================
# A spec is a hashable tuple: ("dense" | "chol" | "diagonal" | "identity", n), ("dplr", n, r),
# ("stacked", T, m), ("blockdiag", specs), ("kron", specs), ("kronsum", ((n_j, r_j), ...)).
def _leaf(max_n, max_block):
    return st.one_of(
        st.tuples(st.sampled_from(["dense", "chol", "diagonal", "identity"]), st.integers(1, max_n)),
        st.tuples(st.just("dplr"), st.integers(1, max_n), st.integers(1, 3)),
        st.tuples(st.just("stacked"), st.integers(1, max_block), st.integers(1, max_block)))


LEAF, KRON_LEAF = _leaf(4, 3), _leaf(3, 2)
KRONSUM = st.tuples(st.just("kronsum"), st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)),
                                                 min_size=1, max_size=2).map(tuple))
KRON = st.tuples(st.just("kron"), st.lists(KRON_LEAF, min_size=1, max_size=3).map(tuple))
SPECS = st.one_of(
    LEAF, KRON, KRONSUM,
    st.tuples(st.just("blockdiag"), st.lists(LEAF, min_size=1, max_size=3).map(tuple)),
    st.tuples(st.just("blockdiag"), st.tuples(KRON, st.one_of(LEAF, KRONSUM))))
# the fast tier's structure: every class once, Kronecker and Kronecker-sum inside a block diagonal (size 19)
KITCHEN = ("blockdiag", (("kron", (("dense", 2), ("dplr", 3, 1))), ("kronsum", ((2, 1), (2, 2))),
                         ("stacked", 2, 2), ("diagonal", 2), ("identity", 1), ("chol", 2)))


def spec_size(spec):
    kind = spec[0]
    if kind == "stacked":
        return spec[1] * spec[2]
    if kind == "blockdiag":
        return sum(spec_size(s) for s in spec[1])
    if kind == "kron":
        return math.prod(spec_size(s) for s in spec[1])
    if kind == "kronsum":
        return math.prod(n for n, _ in spec[1])
    return spec[1]


def matched(spec, variant):
    """The spec of an S that ``spec``'s operator has a pairwise trace_solve rule for (variant 0 or 1: a
    Kronecker is matched by a Kronecker of matched factors, or by a Kronecker sum of the same sizes)."""
    kind = spec[0]
    if kind == "blockdiag":
        return ("blockdiag", tuple(matched(s, variant) for s in spec[1]))
    if kind == "stacked":
        return spec
    if kind == "kron":
        if variant == 0:
            return ("kron", tuple(matched(s, variant) for s in spec[1]))
        return ("kronsum", tuple((spec_size(s), 2) for s in spec[1]))
    n = spec_size(spec)
    return ("dense", n) if variant == 0 else ("dplr", n, 2)


def build(spec, rng, dtype, delta):
    """``(operator, K)``: the operator in ``dtype`` and its dense matrix formed here in float64 NumPy from the
    same (rounded) parameters. ``delta`` bounds the smallest eigenvalue of each leaf from below (about):
    the conditioning knob."""
    def rounded(a):
        return np.asarray(np.asarray(a, dtype), np.float64)

    def spd(n):
        A = rng.normal(size=(n, n))
        G = A @ A.T
        return rounded(0.5 * (G + G.T) / n + delta * np.eye(n))

    def lower(n):
        L = np.tril(rng.normal(size=(n, n)))
        L[np.diag_indices(n)] = np.abs(L[np.diag_indices(n)]) + math.sqrt(delta)
        return rounded(L)

    def positive(n):
        return rounded(np.exp(rng.uniform(math.log(delta), math.log(2.0), n)))

    kind = spec[0]
    if kind == "dense":
        M = spd(spec[1])
        return Dense(jnp.asarray(M, dtype)), M
    if kind == "chol":
        L = lower(spec[1])
        return Dense.from_cholesky(jnp.asarray(L, dtype)), L @ L.T
    if kind == "diagonal":
        d = positive(spec[1])
        return Diagonal(jnp.asarray(d, dtype)), np.diag(d)
    if kind == "identity":
        return Identity(spec[1], dtype=dtype), np.eye(spec[1])
    if kind == "dplr":
        d, B = positive(spec[1]), rounded(rng.normal(size=(spec[1], spec[2])))
        return DiagPlusLowRank(jnp.asarray(d, dtype), jnp.asarray(B, dtype)), np.diag(d) + B @ B.T
    if kind == "stacked":
        Ms = np.stack([spd(spec[2]) for _ in range(spec[1])])
        return StackedBlockDiag(jnp.asarray(Ms, dtype)), block_diag(*Ms)
    if kind in ("blockdiag", "kron"):
        ops, mats = zip(*[build(s, rng, dtype, delta) for s in spec[1]])
        if kind == "blockdiag":
            return BlockDiag(ops), block_diag(*mats)
        K = mats[0]
        for m in mats[1:]:
            K = np.kron(K, m)
        return Kronecker(ops), K
    if kind == "kronsum":
        Ls = [lower(n) for n, _ in spec[1]]
        Js = [rounded(rng.normal(size=(n, r))) for n, r in spec[1]]
        A, B = Ls[0] @ Ls[0].T, Js[0] @ Js[0].T
        for L, J in zip(Ls[1:], Js[1:]):
            A, B = np.kron(A, L @ L.T), np.kron(B, J @ J.T)
        return KroneckerSum(tuple(jnp.asarray(L, dtype) for L in Ls), tuple(jnp.asarray(J, dtype) for J in Js)), A + B
    raise ValueError(spec)


def stability(spec, op):
    """The structure's stability factor s (module docstring), from the operator's own (rounded) parameters."""
    kind = spec[0]
    if kind == "dplr":  # Woodbury: D⁻¹x, of size ‖x‖/min d, cancels down to K⁻¹x
        d, B = as64(op.d), as64(op.B)
        K = np.diag(d) + B @ B.T
        return max(1.0, float(np.linalg.norm(K, 2) / np.min(d) / np.linalg.cond(K)))
    if kind == "kronsum":
        return float(np.prod([np.linalg.cond(as64(L)) ** 2 for L in op.A_chol]))
    if kind in ("blockdiag", "kron"):
        parts = op.blocks if kind == "blockdiag" else op.factors
        return max(stability(s, o) for s, o in zip(spec[1], parts))
    return 1.0


GENERIC_S = ("dense", "diagonal", "identity", "dplr")


@jax.jit
def _operations(op, inp, S):
    """Every operation of ``op`` and its traces against every S, under one jit."""
    out = {"dense": op.to_dense(), "sqrt": op.sqrt(), "logdet": op.logdet(), "diagonal": op.diagonal(),
           "inv_quad": op.inv_quad(inp["v"]), "matmul_op": op @ inp["V"]}
    for method, keys in [("matmul", "vV"), ("solve", "vV"), ("whiten", "vV"), ("sqrt_rmatmul", "vV"),
                         ("sqrt_matmul", "wW")]:
        for k in keys:
            out[f"{method}_{k}"] = getattr(op, method)(inp[k])
    for name, s in S.items():
        out[f"trace_{name}"] = op.trace_solve(s)
    return out


@jax.jit
def _kls(op, inp, S):
    """KL(N(mq, S) ‖ N(mp, K)) by gaussian_kl and by the registered kl_divergence, for every S; and
    KL(N(mq, K) ‖ N(0, I)) (K as q against the whitened prior)."""
    out = {}
    for name, s in S.items():
        out[f"kl_{name}"] = gaussian_kl(inp["mq"], s, op, inp["mp"])
        out[f"kld_{name}"] = kl_divergence(StructuredNormal(inp["mq"], s), StructuredNormal(inp["mp"], op))
    eye = Identity(op.size, dtype=op.dtype)
    out["kl_whitened"] = gaussian_kl(inp["mq"], op, eye)
    out["kld_whitened"] = kl_divergence(StructuredNormal(inp["mq"], op),
                                        StructuredNormal(jnp.zeros_like(inp["mq"]), eye))
    return out


def operator_case(spec, seed, dtype, delta, what, s_names):
    """(op, K, inputs (float64 copies of the rounded values), S {name: (operator, dense, spec)}, outputs of
    ``what`` (_operations or _kls) for the S named in ``s_names``)."""
    rng = np.random.default_rng(seed)
    op, K = build(spec, rng, dtype, delta)
    n, m = op.size, op.sqrt_cols
    shapes = {"v": (n,), "V": (n, 3), "w": (m,), "W": (m, 2), "mq": (n,), "mp": (n,)}
    inp = {k: np.asarray(rng.normal(size=s), dtype) for k, s in shapes.items()}
    specs = {name: (name, n, 2) if name == "dplr" else (name, n) for name in GENERIC_S}
    specs.update({f"matched{v}": matched(spec, v) for v in (0, 1)})
    S = {}
    for name, s in specs.items():  # all drawn (the same values whichever are used)
        S[name] = build(s, rng, dtype, 1.0) + (s,)
    S = {name: S[name] for name in s_names}
    out = what(op, jax.tree.map(jnp.asarray, inp), {k: v[0] for k, v in S.items()})
    return op, K, {k: as64(v) for k, v in inp.items()}, S, jax.tree.map(np.asarray, out)


ALL_S = GENERIC_S + ("matched0", "matched1")


def dense_kl(mq, Sq, mp, Sp):
    """KL(N(mq, Sq) ‖ N(mp, Sp)) from dense float64 matrices."""
    d = mq - mp
    return 0.5 * (np.trace(np.linalg.solve(Sp, Sq)) + d @ np.linalg.solve(Sp, d) - len(d)
                  + np.linalg.slogdet(Sp)[1] - np.linalg.slogdet(Sq)[1])


def check_operator(spec, seed, dtype, delta):
    op, K, x, S, out = operator_case(spec, seed, dtype, delta, _operations, ALL_S)
    n, m = op.size, op.sqrt_cols
    assert op.shape == (n, n) and n == spec_size(spec)
    assert op.dtype == dtype and all(v.dtype == dtype for v in out.values()), \
        {k: v.dtype for k, v in out.items() if v.dtype != dtype}
    assert out["sqrt"].shape == (n, m)
    unit = C_OP * max(n, m) * eps(dtype) * stability(spec, op)
    cond, normK = np.linalg.cond(K), np.linalg.norm(K, 2)
    Kinv = np.linalg.inv(K)
    R = as64(out["sqrt"])
    normR = np.linalg.norm(R, 2)

    def close(name, got, want, scale):
        err = np.linalg.norm(as64(got) - want)
        assert err <= unit * scale, (name, spec, dtype, delta, err / (unit * scale))

    close("to_dense", out["dense"], K, normK)
    close("sqrt R Rᵀ = K", R @ R.T, K, normK)
    close("diagonal", out["diagonal"], np.diag(K), normK)
    close("logdet", out["logdet"], np.linalg.slogdet(K)[1], cond)
    for k in "vV":
        sol = Kinv @ x[k]
        close(f"matmul {k}", out[f"matmul_{k}"], K @ x[k], normK * np.linalg.norm(x[k]))
        close(f"solve {k}", out[f"solve_{k}"], sol, cond * np.linalg.norm(sol))
        close(f"whiten {k}", out[f"whiten_{k}"], R.T @ sol, cond * normR * np.linalg.norm(sol))
        close(f"sqrt_rmatmul {k}", out[f"sqrt_rmatmul_{k}"], R.T @ x[k], normR * np.linalg.norm(x[k]))
    close("__matmul__", out["matmul_op"], K @ x["V"], normK * np.linalg.norm(x["V"]))
    for k in "wW":
        close(f"sqrt_matmul {k}", out[f"sqrt_matmul_{k}"], R @ x[k], normR * np.linalg.norm(x[k]))
    iq = x["v"] @ Kinv @ x["v"]
    close("inv_quad", out["inv_quad"], iq, cond * iq)
    for name, (_, Sd, _) in S.items():
        t = np.trace(Kinv @ Sd)  # S is PSD: tr(K⁻¹S) > 0 and its rounding is relative
        close(f"trace_solve S={name}", out[f"trace_{name}"], t,
              cond * t + np.linalg.norm(Kinv, 2) * np.linalg.norm(Sd, 2))
    return op, K, x, S, out


def check_kl(spec, seed, dtype, delta, s_names=ALL_S):
    op, K, x, S, out = operator_case(spec, seed, dtype, delta, _kls, s_names)
    assert all(v.dtype == dtype for v in out.values())
    n = op.size
    s_p, cond_p = stability(spec, op), np.linalg.cond(K)
    for name, (Sop, Sd, s_spec) in S.items():
        want = dense_kl(x["mq"], Sd, x["mp"], K)
        # the KL's terms (trace, Mahalanobis, logdets, n) each carry their relative rounding
        terms = (np.trace(np.linalg.solve(K, Sd)) + abs(np.linalg.slogdet(K)[1]) + abs(np.linalg.slogdet(Sd)[1])
                 + (x["mq"] - x["mp"]) @ np.linalg.solve(K, x["mq"] - x["mp"]) + n)
        tol = C_OP * n * eps(dtype) * max(s_p * cond_p, stability(s_spec, Sop) * np.linalg.cond(Sd)) * terms
        for key in ("kl", "kld"):
            got = float(out[f"{key}_{name}"])
            assert abs(got - want) <= tol, (key, name, spec, dtype, got, want, abs(got - want) / tol)
    want = dense_kl(x["mq"], K, np.zeros(n), np.eye(n))
    terms = np.trace(K) + abs(np.linalg.slogdet(K)[1]) + x["mq"] @ x["mq"] + n
    tol = C_OP * n * eps(dtype) * s_p * cond_p * terms
    for key in ("kl", "kld"):
        got = float(out[f"{key}_whitened"])
        assert abs(got - want) <= tol, (key, "whitened", spec, dtype, got, want)


DELTAS = {F64: [1.0, 1e-2, 1e-4, 1e-6], F32: [1.0, 1e-2]}


def test_operators_equal_their_dense_form():
    """(a), fast tier, float32 (float64 on fixed structures: test_linalg.py; random ones: the slow tier): the
    KITCHEN structure (every class), random values and conditioning."""
    @FAST
    @given(seed=SEEDS, delta=st.sampled_from(DELTAS[F32]))
    def prop(seed, delta):
        check_operator(KITCHEN, seed, F32, delta)

    prop()


def test_structured_kl_equals_dense_kl():
    """(e), fast tier, float32: KL(q ‖ p) for p the KITCHEN structure and q the structure-matched S (the
    pairs the library forms: a q family against Kuu's structure), and q = KITCHEN against N(0, I)."""
    @FAST
    @given(seed=SEEDS, delta=st.sampled_from(DELTAS[F32]))
    def prop(seed, delta):
        check_kl(KITCHEN, seed, F32, delta, ("matched0", "matched1"))

    prop()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_operators_and_kl_random_structures(dtype):
    """(a) and (e), slow tier: random structures and shapes, both dtypes, every S."""
    @SLOW_OPERATORS
    @given(spec=SPECS, seed=SEEDS, delta=st.sampled_from(DELTAS[dtype]))
    def prop(spec, seed, delta):
        check_operator(spec, seed, dtype, delta)
        check_kl(spec, seed, dtype, delta)

    prop()


# ==================================================================================================
# feature families: (b) bound ≤ exact, (c) Kff − Qff ⪰ 0, (d) whitened = centred
# ==================================================================================================
KERNELS = {"se": psg.SquaredExponential, "m12": psg.Matern12, "m32": psg.Matern32, "m52": psg.Matern52}
# family -> (input kind, the M drawn from, the kernels drawn from)
FAMILIES = {
    "inducing-points": ("interval", (5, 20, 60), ("se", "m12", "m32", "m52")),
    "vff-matern12": ("interval", (5, 20, 60), ("m12",)),
    "vff-matern32": ("interval", (5, 20, 60), ("m32",)),
    "vff-matern52": ("interval", (5, 20, 60), ("m52",)),
    "vff-periodic": ("interval", (3, 10, 30), ("periodic",)),
    "additive-vff": ("square", (5, 15), ("m32",)),
    "kronecker-vff": ("square", (3, 6), ("m32",)),
    "additive-ip": ("square", (5, 15), ("se", "m52")),
    "kronecker-ip": ("square", (4, 8), ("se", "m52")),
    "hermite": ("normal1", (5, 20, 40), ("se",)),
    "trigonometric": ("normal1", (5, 21, 41), ("se", "m12", "m32", "m52")),
    "additive-orthogonal": ("normal2", (5, 15), ("se",)),
    "harmonic-negation": ("normal2", (5, 20), ("se",)),
    "harmonic-rotation": ("normal2", (5, 15), ("se",)),
    "random-fourier": ("interval", (5, 20, 60), ("se", "m32")),  # (d) only: not a covariance of the prior
}
BOUND_FAMILIES = [f for f in FAMILIES if f != "random-fourier"]
N_DATA = 50


def family_data(family, rng, variance):
    """(X, y): N_DATA inputs of the family's kind and a smooth function of amplitude σ_f plus noise."""
    kind = FAMILIES[family][0]
    X = {"interval": lambda: np.sort(rng.uniform(0, 1, N_DATA))[:, None],
         "square": lambda: rng.uniform(0, 1, (N_DATA, 2)),
         "normal1": lambda: rng.normal(size=(N_DATA, 1)),
         "normal2": lambda: rng.normal(size=(N_DATA, 2))}[kind]()
    f = np.sin(6 * X[:, 0] + rng.uniform(0, 2 * np.pi)) + (X[:, 1] ** 2 if X.shape[1] > 1 else 0.0)
    return X, math.sqrt(variance) * f + 0.1 * rng.normal(size=N_DATA)


def family_params(family, M, rng, ell, variance):
    """The traced parameters of the family's feature and kernel (arrays; the static ones are in
    ``family_problem``)."""
    p = {"ell": ell, "variance": variance}
    if family == "inducing-points":
        p["Z"] = np.linspace(0, 1, M)[:, None] if rng.random() < 0.5 else rng.uniform(-0.2, 1.2, (M, 1))
    elif family in ("additive-ip", "kronecker-ip"):
        p["Z"] = np.linspace(0, 1, M)[:, None]
    elif family == "hermite":
        p["input_scale"] = float(np.exp(rng.uniform(math.log(0.3), math.log(3.0))))
    elif family == "trigonometric":
        p["band"] = float(rng.uniform(1.0, 10.0))
    elif family.startswith("harmonic"):
        p["Z"] = rng.normal(size=(M, 2))
    elif family == "random-fourier":
        p["W"] = rng.normal(size=(M, 1))
    return p


def family_problem(family, M, kernel_kind, p):
    """(feature, kernel) from static (family, M, kernel kind) and traced parameters ``p`` (so that one
    compilation serves every value; the periodic kernel's period is a Python number, as it must be)."""
    ell, var = p["ell"], p["variance"]
    k = None if kernel_kind == "periodic" else KERNELS[kernel_kind]
    if family == "inducing-points":
        return InducingPoints(p["Z"]), k(var, ell)
    if family.startswith("vff-matern"):
        return FourierFeatures(-0.5, 1.5, M), k(var, ell)
    if family == "vff-periodic":
        return FourierFeatures(0.0, 1.0, M), psg.Periodic(var, ell, 1.0)
    if family == "additive-vff":
        return (AdditiveFeatures([FourierFeatures(-0.5, 1.5, M)] * 2),
                psg.Additive([k(var, ell), psg.Matern52(0.5 * var, 2.0 * ell)]))
    if family == "kronecker-vff":
        return (KroneckerFeatures([FourierFeatures(-0.5, 1.5, M)] * 2),
                psg.Product([k(var, ell), psg.Matern12(1.0, 2.0 * ell)]))
    if family == "additive-ip":
        return AdditiveFeatures([InducingPoints(p["Z"])] * 2), psg.Additive([k(var, ell), psg.Matern32(0.5 * var, ell)])
    if family == "kronecker-ip":
        return KroneckerFeatures([InducingPoints(p["Z"])] * 2), psg.Product([k(var, ell), psg.Matern32(1.0, ell)])
    if family == "hermite":
        return HermiteFeatures(M, input_scale=p["input_scale"]), k(var, ell)
    if family == "trigonometric":
        return TrigonometricFeatures(M, band=p["band"], basis="fourier" if M % 2 else "dirichlet"), k(var, ell)
    if family == "additive-orthogonal":
        return (AdditiveOrthogonal([HermiteFeatures(M), TrigonometricFeatures(M, band=4.0)]),
                psg.Additive([k(var, ell), psg.Matern32(0.5 * var, ell)]))
    if family == "harmonic-negation":
        return HarmonicFeatures(Negation(), p["Z"]), k(var, ell)
    if family == "harmonic-rotation":
        return HarmonicFeatures(Rotation(4), p["Z"]), k(var, ell)
    if family == "random-fourier":
        return RandomFourierFeatures(p["W"]), k(var, ell)
    raise ValueError(family)


def cast(tree, dtype):
    return jax.tree.map(lambda a: np.asarray(a, dtype), tree)


def as_dtype(tree, dtype):
    """Every floating leaf of a feature/kernel pytree in ``dtype``. Needed for float32 while x64 is on: the
    constructors store concrete numbers (a fixed centre, a constant variance) in the default float dtype,
    float64, and the library's dtypes then follow the widest input."""
    def leaf(a):
        if isinstance(a, float):  # a NumPy scalar stays concrete under jit (the periodic kernel's period must)
            return np.asarray(a, dtype)
        return jnp.asarray(a, dtype) if jnp.issubdtype(jnp.result_type(a), jnp.floating) else a

    return jax.tree.map(leaf, tree)


def _bound_terms(family, M, kernel_kind, p, X, y, noise):
    feature, kernel = as_dtype(family_problem(family, M, kernel_kind, p), X.dtype)
    Kmm = psg.Kuu(feature, kernel)
    return {"bound": collapsed_elbo(feature, kernel, X, y, noise),
            "W": Kmm.whiten(psg.Kuf(feature, kernel, X)),  # Q_ff = WᵀW as the library forms it
            "Kff": kernel(X)}


_bound_terms_jit = jax.jit(_bound_terms, static_argnums=(0, 1, 2))
_exact_jit = jax.jit(lambda family, M, kernel_kind, p, X, y, noise: exact_log_marginal_likelihood(
    family_problem(family, M, kernel_kind, p)[1], X, y, noise), static_argnums=(0, 1, 2))


# (b) float64: both sides are sums of O(N) terms, the largest yᵀy/(2σ²) ≤ ~1e3·|exact| at σ² = 1e-4,
# through backward-stable Cholesky factors: a few hundred ε·1e3 ≈ 1e-10·|exact|. Measured over every
# family with random hyperparameters (σ² ≥ 1e-4, ℓ from 0.05 to 10): bound − exact ≤ +1.9e-16·|exact|
# (Hermite, where the bound is tight); RTOL64 = 1e-8 is test_collapsed's allowance.
RTOL64 = 1e-8
# float32 (σ² ≥ 1e-2, so that N σ_f²/σ² stays far below 1/ε₃₂): the float32 bound against the float64
# exact value; the bound's rounding is ≤ ~1e-4·|exact| (test_collapsed) and the float32 jitter of inducing
# points and harmonic features lowers the bound further. Measured (6 random cases per family): ≤
# −2.6e-8·|exact| (Hermite, tight) for every family but Kronecker inducing points (xfail below).
RTOL32 = 1e-4
# (c) smallest eigenvalue of Kff − WᵀW, relative to σ_f². float64: W = Rᵀ Kuu⁻¹ Kuf through a backward-stable
# factorisation, measured ≥ −1.2e-14 (Hermite; the jittered families' Kuu has cond ≤ 1/(1e-10)): 1e-10
# leaves four orders. float32: measured ≥ −6.4e-6 for the jitter-free families and ≥ −2.6e-4 for Kronecker
# inducing points (two jittered factors: cond(Kuu) up to (1/1e-5)² and W's rounding grows with cond(L));
# 1e-3 for all (a wrong Kuf or Kuu shows as an O(1) negative eigenvalue).
PSD_TOL = {F64: 1e-10, F32: 1e-3}


def hyper_strategy(dtype, max_ell=10.0):
    """(seed, ℓ, σ_f², σ²): lengthscales from 0.05 to 10 (20 times the data range: ill-conditioned Kuu),
    noise down to 1e-4 (float64) or 1e-2 (float32)."""
    log = st.floats(0.0, 1.0).map
    return st.tuples(SEEDS, log(lambda t: 0.05 * (max_ell / 0.05)**t), log(lambda t: 0.1 * 100.0**t),
                     log(lambda t: (1e-4 if dtype == F64 else 1e-2) * (1e4 if dtype == F64 else 1e2) ** t))


# always tried in the fast tier: lengthscale 10 (20 times the data range), noise 1e-4
ILL_CONDITIONED = (1, 10.0, 1.0, 1e-4)


def check_bound_and_residual(family, M, kernel_kind, hyper, dtype):
    seed, ell, variance, noise = hyper
    rng = np.random.default_rng(seed)
    X, y = family_data(family, rng, variance)
    p = family_params(family, M, rng, ell, variance)
    args = (family, M, kernel_kind)
    exact = float(_exact_jit(*args, cast(p, F64), X, y, noise))
    out = jax.tree.map(np.asarray, _bound_terms_jit(*args, cast(p, dtype), np.asarray(X, dtype),
                                                     np.asarray(y, dtype), dtype(noise)))
    assert all(v.dtype == dtype for v in out.values())
    bound = float(out["bound"])
    assert np.isfinite(exact) and np.isfinite(bound), (family, M, hyper, bound, exact)
    rtol = RTOL64 if dtype == F64 else RTOL32
    assert bound <= exact + rtol * abs(exact), (family, M, hyper, (bound - exact) / abs(exact))
    W, Kff = as64(out["W"]), as64(out["Kff"])
    residual = Kff - W.T @ W
    lam = np.linalg.eigvalsh(0.5 * (residual + residual.T))[0]
    scale = np.max(np.diag(Kff))
    assert lam >= -PSD_TOL[dtype] * scale, (family, M, hyper, lam / scale)


# the fast tier: one M and kernel per family, values drawn; the slow tier: every family, M and kernel
FAST_BOUND = [("inducing-points", 20, "m52"), ("vff-matern32", 20, "m32"), ("harmonic-negation", 5, "se")]


@pytest.mark.parametrize("family, M, kernel_kind", FAST_BOUND, ids=[f for f, _, _ in FAST_BOUND])
def test_bound_below_exact_and_residual_psd(family, M, kernel_kind):
    """(b) and (c), fast tier (float64): inducing points on a grid or at random (Dense Kuu), VFF (diagonal +
    low rank), harmonic features (stacked blocks)."""
    @FAST
    @given(hyper=hyper_strategy(F64))
    @example(hyper=ILL_CONDITIONED)
    def prop(hyper):
        check_bound_and_residual(family, M, kernel_kind, hyper, F64)

    prop()


@pytest.mark.slow
@pytest.mark.parametrize("family, dtype", [(f, d) for d in (F64, F32) for f in BOUND_FAMILIES],
                         ids=[f"{f}-{n}" for n in ("float64", "float32") for f in BOUND_FAMILIES])
def test_bound_below_exact_and_residual_psd_every_family(family, dtype):
    """(b) and (c), slow tier: every family, M and kernel drawn, both dtypes. Kronecker inducing points in
    float32 only up to ℓ = 2 (see the next test)."""
    _, Ms, kernels = FAMILIES[family]
    max_ell = 2.0 if (family, dtype) == ("kronecker-ip", F32) else 10.0

    @SLOW
    @given(M=st.sampled_from(Ms), kernel_kind=st.sampled_from(kernels), hyper=hyper_strategy(dtype, max_ell))
    def prop(M, kernel_kind, hyper):
        check_bound_and_residual(family, M, kernel_kind, hyper, dtype)

    prop()


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="float32: the collapsed bound of Kronecker inducing "
                   "points exceeds the exact value at long lengthscales (each factor carries the jitter ε, "
                   "so cond(Kuu) ~ 1/ε²)")
def test_float32_kronecker_inducing_points_long_lengthscale():
    """(b) in float32 for Kronecker inducing points at ℓ = 10 (20 times the data range), M = 8 × 8, σ_f² = 10,
    σ² = 1e-2: cond(Kuu) ~ 5e11 with float32's jitter 1e-5 per factor, and the float32 bound is
    +1.0e-1·|exact| above the exact value (float64: below). Measured from ℓ = 5 on (ℓ ≤ 2: below exact,
    checked by the property above)."""
    check_bound_and_residual("kronecker-ip", 8, "se", (0, 10.0, 10.0, 1e-2), F32)


# (d) -------------------------------------------------------------------------------------------------
LIKELIHOODS = ("gaussian", "poisson", "bernoulli")


def _site_log_probs(model, args, values):
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*args)
    return {k: jnp.sum(s["fn"].log_prob(s["value"])) for k, s in tr.items() if s["type"] == "sample"}


def _whitened_and_centred(family, M, kernel_kind, likelihood, residual, p, X, y, z, noise):
    return whitened_and_centred(*family_problem(family, M, kernel_kind, p), likelihood, residual, X, y, z, noise)


def whitened_and_centred(feature, kernel, likelihood, residual, X, y, z, noise):
    """The whitened and centred SparseGP's site log densities at v = RᵀKuu⁻¹R z and u = R v, and Kuu."""
    lik = {"gaussian": lambda: psg.Gaussian(noise), "poisson": psg.Poisson, "bernoulli": psg.Bernoulli}[likelihood]()
    Kmm = psg.Kuu(feature, kernel)
    v = Kmm.whiten(Kmm.sqrt_matmul(z))  # RᵀKuu⁻¹R z: z projected on R's row space (z itself for square R)
    u = Kmm.sqrt_matmul(v)
    out = {}
    for whiten, site, value in ((True, "f_v", v), (False, "f_u", u)):
        gp = psg.SparseGP(feature, kernel, lik, whiten=whiten, residual=residual)
        logs = _site_log_probs(gp.model, (X, y), {site: value})
        out["prior_w" if whiten else "prior_c"], out["y_w" if whiten else "y_c"] = logs[site], logs["y"]
    out["Kuu"], out["logdet"] = Kmm.to_dense(), Kmm.logdet()
    return out


_whitened_and_centred_jit = jax.jit(_whitened_and_centred, static_argnums=(0, 1, 2, 3, 4))


def scaled_logdet(K):
    """(log|K|, cond) through the Jacobi-scaled matrix C = S⁻¹KS⁻¹ (VFF's graded Kuu: cond(K) ~ 1e15 but
    cond(C) < 10), with cond(C)."""
    s = np.sqrt(np.diag(K))
    C = K / np.outer(s, s)
    return 2.0 * np.sum(np.log(s)) + np.linalg.slogdet(C)[1], np.linalg.cond(C)


# float64: the centred prior's uᵀKuu⁻¹u is a solve with Kuu (cond up to 1e10 with inducing points'
# jitter, 1e20 for Kronecker inducing points, ~1e15 for VFF's graded Kuu, whose Woodbury solve is
# diagonally scaled); the whitened one has no solve, and u = Rv lies where the factors are accurate.
# Measured over every family (ℓ from 0.05 to 10, every likelihood and residual mode): |difference −
# expected| ≤ 2.4e-12 (Kronecker inducing points, ℓ = 10) times the sum of the magnitudes of the terms,
# likelihood terms equal to 2.2e-14; 1e-9 is allowed.
RTOL_WHITEN = 1e-9


def check_whitening(family, M, kernel_kind, likelihood, residual, hyper):
    seed, ell, variance, noise = hyper
    rng = np.random.default_rng(seed)
    X, y = family_data(family, rng, variance)
    if likelihood == "poisson":
        y = rng.poisson(np.exp(np.clip(y, -3, 3))).astype(float)
    elif likelihood == "bernoulli":
        y = (y > np.median(y)).astype(float)
    p = family_params(family, M, rng, ell, variance)
    Mp = jax.eval_shape(lambda p: psg.Kuu(*family_problem(family, M, kernel_kind, p)).sqrt(), p).shape[1]
    z = rng.normal(size=Mp)  # R is M × M'
    out = jax.tree.map(np.asarray, _whitened_and_centred_jit(family, M, kernel_kind, likelihood, residual, p,
                                                              X, y, z, noise))
    assert_whitening(out, len(z), (family, M, hyper))


def assert_whitening(out, Mp, label):
    """(d) on the outputs of :func:`whitened_and_centred` (R is M × M')."""
    assert all(np.all(np.isfinite(v)) for v in out.values()), \
        (label, {k: np.all(np.isfinite(v)) for k, v in out.items()})
    M_ = out["Kuu"].shape[0]
    # log|Kuu| of the operator (checked against the dense matrix in (a)); here also against the scaled dense
    # one where that is reliable (Kronecker inducing points reach cond 1e16 even scaled: jitter per factor)
    logdet, dense_logdet, cond = float(out["logdet"]), *scaled_logdet(out["Kuu"])
    if cond < 1e10:
        assert abs(logdet - dense_logdet) <= 1e-12 * cond * (abs(dense_logdet) + M_), \
            (label, logdet, dense_logdet)
    expected = 0.5 * logdet - 0.5 * (Mp - M_) * math.log(2 * math.pi)
    got = (float(out["prior_w"]) + float(out["y_w"])) - (float(out["prior_c"]) + float(out["y_c"]))
    scale = sum(abs(float(out[k])) for k in ("prior_w", "prior_c", "y_w", "y_c")) + abs(expected)
    assert abs(got - expected) <= RTOL_WHITEN * scale, (label, got, expected, abs(got - expected) / scale)
    assert abs(float(out["y_w"]) - float(out["y_c"])) <= RTOL_WHITEN * scale


FAST_WHITENING = [("vff-matern52", 10, "m52"), ("inducing-points", 20, "m32")]


@pytest.mark.parametrize("family, M, kernel_kind", FAST_WHITENING, ids=[f for f, _, _ in FAST_WHITENING])
def test_whitened_equals_centred(family, M, kernel_kind):
    """(d), fast tier: VFF Matérn-5/2 (R = [D^½, B] is M × (M + 3): the non-square case) and inducing points
    (square R, Kuu with cond up to 1e10), Gaussian likelihood, random hyperparameters and u."""
    @FAST
    @given(hyper=hyper_strategy(F64))
    @example(hyper=ILL_CONDITIONED)
    def prop(hyper):
        check_whitening(family, M, kernel_kind, "gaussian", "expected", hyper)

    prop()


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_whitened_equals_centred_every_family(family):
    """(d), slow tier: every family, M, kernel, likelihood and residual mode drawn."""
    _, Ms, kernels = FAMILIES[family]

    @SLOW_WHITENING
    @given(M=st.sampled_from(Ms), kernel_kind=st.sampled_from(kernels), likelihood=st.sampled_from(LIKELIHOODS),
           residual=st.sampled_from(psg.SparseGP.RESIDUALS), hyper=hyper_strategy(F64))
    def prop(M, kernel_kind, likelihood, residual, hyper):
        check_whitening(family, M, kernel_kind, likelihood, residual, hyper)

    prop()


# ==================================================================================================
# (b), (c), (d) on the registry: every family of ppl_sparsegp.features.FAMILIES at its test-sized
# instance (tests/features/test_registry.py checks the registry is complete), values drawn
# ==================================================================================================
REGISTRY_BOUND = [f for f in REGISTRY if f.feature_class.covariance_of_prior]  # (b), (c): covariances only


def registry_problem(family, seed, noise):
    """(feature, kernel, X, y): the family's instance and kernel, N_DATA of its inputs, a smooth function
    of them plus noise of variance ``noise``."""
    rng = np.random.default_rng(seed)
    feature, kernel = family.instance()
    X = family.inputs(rng, N_DATA)
    f = np.sin(6 * X[:, 0] + rng.uniform(0, 2 * np.pi)) + (X[:, 1] ** 2 if X.shape[1] > 1 else 0.0)
    return feature, kernel, jnp.asarray(X), jnp.asarray(f + math.sqrt(noise) * rng.normal(size=N_DATA))


NOISES = st.floats(0.0, 1.0).map(lambda t: 1e-4 * 1e4 ** t)


@jax.jit
def _registry_bound_terms(feature, kernel, X, y, noise):
    """The exact log marginal likelihood, the collapsed bound, W = RᵀKuu⁻¹Kuf and Kff: one program per family."""
    return {"exact": exact_log_marginal_likelihood(kernel, X, y, noise), "W": psg.Kuu(feature, kernel).whiten(
        psg.Kuf(feature, kernel, X)), "bound": collapsed_elbo(feature, kernel, X, y, noise), "Kff": kernel(X)}


@pytest.mark.parametrize("family", REGISTRY_BOUND, ids=[f.name for f in REGISTRY_BOUND])
def test_registry_bound_below_exact_and_residual_psd(family):
    """(b) and (c) for every registered family whose Kuu, Kuf are covariances of the prior
    (``covariance_of_prior``), float64, the data and the noise drawn (down to 1e-4)."""
    @settings(FAST, max_examples=2)
    @given(seed=SEEDS, noise=NOISES)
    @example(seed=1, noise=1e-4)
    def prop(seed, noise):
        feature, kernel, X, y = registry_problem(family, seed, noise)
        out = jax.tree.map(np.asarray, _registry_bound_terms(feature, kernel, X, y, noise))
        exact, bound = float(out["exact"]), float(out["bound"])
        assert bound <= exact + RTOL64 * abs(exact), (family.name, seed, noise, (bound - exact) / abs(exact))
        W, Kff = as64(out["W"]), as64(out["Kff"])
        residual = Kff - W.T @ W
        lam = np.linalg.eigvalsh(0.5 * (residual + residual.T))[0]
        assert lam >= -PSD_TOL[F64] * np.max(np.diag(Kff)), (family.name, seed, noise, lam)

    prop()


_registry_whitening_jit = jax.jit(whitened_and_centred, static_argnums=(2, 3))


@pytest.mark.parametrize("family", REGISTRY, ids=[f.name for f in REGISTRY])
def test_registry_whitened_equals_centred(family):
    """(d) for every registered family (weight-space ones included), Gaussian likelihood, one draw of the
    data, noise and u."""
    @settings(FAST, max_examples=1)
    @given(seed=SEEDS, noise=NOISES)
    def prop(seed, noise):
        feature, kernel, X, y = registry_problem(family, seed, noise)
        Mp = psg.Kuu(feature, kernel).sqrt_cols
        z = np.random.default_rng(seed).normal(size=Mp)
        out = jax.tree.map(np.asarray, _registry_whitening_jit(feature, kernel, "gaussian", "expected", X, y, z, noise))
        assert_whitening(out, Mp, (family.name, seed, noise))

    prop()
