r"""The families of q(u) (or q(v), whitened): Gaussian with a full, diagonal, block-diagonal or
two-Kronecker covariance. A family is a callable ``(name, dim, Kmm, whiten) -> (loc, operator)`` that
creates its params (``<name>_loc``, ...) with ``numpyro.param``, initialised at the prior; any such callable
can be passed as ``q_cov``.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, §5.3.
    2. Sun, Shi, Wilson, Grosse (2021), Scalable variational Gaussian processes via harmonic kernel
       decomposition, ICML.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpyro
from numpyro.distributions import constraints

from ..linalg import BlockDiag, Dense, Diagonal, Kronecker, KroneckerSum, LinearOperator, StackedBlockDiag
from ..validation import AName, AnyOf, Count, Flag, InstanceOf, IsCallable, OneOf, validated

__all__ = ["full_covariance", "diagonal_covariance", "block_diagonal_covariance", "two_kronecker_covariance",
           "default_family", "resolve_q_family"]

#: Kuu, as the q families receive it (a traced operator is not judged: the guides call them under jit)
_OPERATOR = Annotated[Any, InstanceOf("ppl_sparsegp.linalg.LinearOperator",
                                      what="a LinearOperator (e.g. Kuu(feature, kernel))")]


@validated
def full_covariance(name: AName, dim: Count, Kmm: _OPERATOR, whiten: Flag) -> tuple[jax.Array, LinearOperator]:
    """q = N(m, LLᵀ) with a free lower-triangular L (initialised at the prior).

    :param name: the inducing site's name: the params are ``<name>_loc``, ``<name>_scale_tril``.
    :param dim: M, the number of inducing variables.
    :param Kmm: Kuu as a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M) (for the initialisation).
    :param whiten: whether q is over v (u = R v, prior N(0, I)) or over u (prior N(0, Kuu)).
    :returns: ``(loc, S)``: the mean (M,) and the covariance operator (M, M) of q.
    """
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))

    def init(rng_key):
        if whiten:
            return jnp.eye(dim, dtype=Kmm.dtype)
        return jnp.linalg.cholesky(Kmm.to_dense())

    L = numpyro.param(f"{name}_scale_tril", init, constraint=constraints.scaled_unit_lower_cholesky)
    return loc, Dense.from_cholesky(L)


@validated
def diagonal_covariance(name: AName, dim: Count, Kmm: _OPERATOR, whiten: Flag) -> tuple[jax.Array, LinearOperator]:
    """q = N(m, diag(s²)) (mean field), initialised at the prior's marginal variances.

    :param name: the inducing site's name: the params are ``<name>_loc``, ``<name>_scale``.
    :param dim: M, the number of inducing variables.
    :param Kmm: Kuu as a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M) (for the initialisation).
    :param whiten: whether q is over v (u = R v, prior N(0, I)) or over u (prior N(0, Kuu)).
    :returns: ``(loc, S)``: the mean (M,) and the covariance operator (M, M) of q.
    """
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))

    def init(rng_key):
        return jnp.ones(dim, Kmm.dtype) if whiten else jnp.sqrt(Kmm.diagonal())

    scale = numpyro.param(f"{name}_scale", init, constraint=constraints.positive)
    return loc, Diagonal(scale**2)


@validated
def block_diagonal_covariance(name: AName, dim: Count, Kmm: _OPERATOR, whiten: Flag) -> tuple[jax.Array,
                              LinearOperator]:
    r"""q = :math:`\prod_t\mathcal N(\boldsymbol\mu_t, L_tL_t^\top)`: one full-rank Gaussian per block of
    Kmm (a :class:`~ppl_sparsegp.linalg.BlockDiag`), as the HVGP [2, §4.2]. Returns ``(loc, S)``, S a
    :class:`~ppl_sparsegp.linalg.StackedBlockDiag` of the factors when the blocks have equal sizes (one
    batched operation per step, whatever T), else a BlockDiag of ``Dense.from_cholesky``; initialised at
    the prior. Params ``<name>_loc`` and ``<name>_scale_tril`` (shape (T, m, m) when the blocks have equal
    sizes, else ``<name>_scale_tril_<t>`` per block).

    Use as ``SparseGP(..., q_cov=block_diagonal_covariance)``.

    :param name: the inducing site's name (params ``<name>_loc``, ``<name>_scale_tril``).
    :param dim: M, the number of inducing variables.
    :param Kmm: Kuu as a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M) (for the initialisation; a BlockDiag).
    :param whiten: whether q is over v (u = R v, prior N(0, I)) or over u (prior N(0, Kuu)).
    :returns: ``(loc, S)``: the mean (M,) and the covariance operator (M, M) of q.
    :raises ValueError: when Kmm is not block-diagonal or ``dim`` does not match its blocks.
    """
    if not isinstance(Kmm, BlockDiag):
        raise ValueError(f"block_diagonal_covariance needs a BlockDiag Kmm, got {type(Kmm).__name__}")
    blocks = Kmm.blocks
    sizes = tuple(b.sqrt_cols for b in blocks) if whiten else Kmm.block_sizes
    if sum(sizes) != dim:
        raise ValueError(f"dim {dim} does not match the block sizes {sizes} of Kmm")
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))

    def init(b):
        return jnp.eye(b.sqrt_cols, dtype=Kmm.dtype) if whiten else jnp.linalg.cholesky(b.to_dense())

    def init_all(rng_key):
        if isinstance(Kmm, StackedBlockDiag):
            return jnp.broadcast_to(jnp.eye(sizes[0], dtype=Kmm.dtype), Kmm.chol.shape) if whiten else Kmm.chol
        return jnp.stack([init(b) for b in blocks])

    lower = constraints.scaled_unit_lower_cholesky
    if len(set(sizes)) == 1:
        L = numpyro.param(f"{name}_scale_tril", init_all, constraint=lower)
        return loc, StackedBlockDiag.from_cholesky(L)
    Ls = [numpyro.param(f"{name}_scale_tril_{t}", lambda rng_key, b=b: init(b), constraint=lower)
          for t, b in enumerate(blocks)]
    return loc, BlockDiag(tuple(Dense.from_cholesky(L) for L in Ls))


@validated
def two_kronecker_covariance(name: AName, dim: Count, Kmm: _OPERATOR, whiten: Flag) -> tuple[jax.Array, LinearOperator]:
    r"""q(u) (or q(v)) covariance :math:`S = \otimes_d L_dL_d^\top + \otimes_d J_dJ_d^\top` for
    Kronecker features [1, §5.3, Fig. 7]: unlike a single Kronecker product it keeps the ELBO
    increasing with M. Use as ``SparseGP(KroneckerFeatures(...), ..., q_cov=two_kronecker_covariance)``.

    Initialised at the prior (L_d = I whitened, chol(K_d) otherwise) with small, distinct J_d entries
    (the eigendecomposition inside :class:`~ppl_sparsegp.linalg.KroneckerSum` needs distinct eigenvalues
    for stable gradients).

    :param name: the inducing site's name (params ``<name>_loc`` and the factors' params).
    :param dim: M, the number of inducing variables (the product of the factors' sizes).
    :param Kmm: Kuu, a :class:`~ppl_sparsegp.linalg.Kronecker` operator (its factors give the sizes).
    :param whiten: whether q is over v (u = R v) or over u.
    :returns: ``(loc, S)``: the mean (M,) and S as a :class:`~ppl_sparsegp.linalg.KroneckerSum`.
    """
    if not isinstance(Kmm, Kronecker):
        raise ValueError("two_kronecker_covariance needs Kronecker features (Kuu a Kronecker operator)")
    loc = numpyro.param(f"{name}_loc", lambda rng_key: jnp.zeros(dim, Kmm.dtype))
    Ls, Js = [], []
    for d, K in enumerate(Kmm.factors):
        n = K.sqrt_cols if whiten else K.size

        def init_L(rng_key, K=K, n=n):
            return jnp.eye(n, dtype=Kmm.dtype) if whiten else jnp.linalg.cholesky(K.to_dense())

        def init_J(rng_key, n=n):
            return jnp.diag(jnp.linspace(1e-2, 2e-2, n, dtype=Kmm.dtype))

        Ls.append(numpyro.param(f"{name}_L{d}", init_L, constraint=constraints.lower_cholesky))
        Js.append(numpyro.param(f"{name}_J{d}", init_J))
    return loc, KroneckerSum(tuple(Ls), tuple(Js))


#: a q family: a name of :data:`_FAMILIES` ("auto" too) or a callable (name, dim, Kmm, whiten) -> (loc, operator)
QFamily = Annotated[Any, AnyOf(OneOf("auto", "full", "diag", "block-diag", "two-kron"), IsCallable())]

_FAMILIES = {"full": full_covariance, "diag": diagonal_covariance, "block-diag": block_diagonal_covariance,
             "two-kron": two_kronecker_covariance}


@validated
def default_family(Kmm: _OPERATOR) -> Callable[..., tuple[jax.Array, LinearOperator]]:
    """The family ``q_cov="auto"`` picks from Kuu's structure: block-diagonal for a
    :class:`~ppl_sparsegp.linalg.StackedBlockDiag` Kuu (harmonic features: the HVGP's q [2, §4.2]), full
    otherwise (a two-Kronecker or diagonal q is a further approximation the caller opts into).

    :param Kmm: Kuu as a LinearOperator.
    :returns: the q family, a callable ``(name, dim, Kmm, whiten) -> (loc, S)``."""
    return block_diagonal_covariance if isinstance(Kmm, StackedBlockDiag) else full_covariance


def _auto(name, dim, Kmm, whiten):
    return default_family(Kmm)(name, dim, Kmm, whiten)


@validated
def resolve_q_family(q_cov: QFamily) -> Callable[..., tuple[jax.Array, LinearOperator]]:
    """The q(u) covariance family for ``q_cov``: ``"auto"`` (from Kuu's structure, :func:`default_family`),
    ``"full"``, ``"diag"``, ``"block-diag"``, ``"two-kron"`` or a callable
    ``(name, dim, Kmm, whiten) -> (loc, operator)``, returned as is."""
    if isinstance(q_cov, str):
        if q_cov == "auto":
            return _auto
        if q_cov not in _FAMILIES:
            raise ValueError(f"q_cov must be one of {['auto'] + sorted(_FAMILIES)} or a callable, got {q_cov!r}")
        return _FAMILIES[q_cov]
    return q_cov


def q_cov_name(family) -> str:
    """The inverse of :func:`resolve_q_family` for the library's families: the ``q_cov`` string that gives
    ``family`` (what a saved fit records).

    :raises ValueError: for a user-defined callable (no name rebuilds it).
    """
    if family is _auto:
        return "auto"
    for name, f in _FAMILIES.items():
        if family is f:
            return name
    raise ValueError(f"q_cov is a user-defined callable ({getattr(family, '__qualname__', family)!r}); "
                     f"a fit can hold the q families of ppl_sparsegp only: 'auto', "
                     f"{', '.join(repr(n) for n in _FAMILIES)}")
