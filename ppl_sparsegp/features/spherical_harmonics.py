r"""The mathematics of spherical harmonics that :class:`~ppl_sparsegp.features.SphericalHarmonicFeatures`
(:mod:`~ppl_sparsegp.features.spherical`) is built on: the dimensions N(d, n), Gegenbauer polynomials, a
fundamental system of points per degree, and the Funk–Hecke coefficients of a zonal kernel by
Gauss–Gegenbauer quadrature [1, 2]. Kernel-free except for :func:`funk_hecke_coefficients`.

References:
    1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features,
       ICML.
    2. Dai, Xu (2013), Approximation theory and harmonic analysis on spheres and balls, Springer, §1–3.
    3. Cho, Saul (2009), Kernel methods for deep learning, NeurIPS.
    4. NIST Digital Library of Mathematical Functions, §18.9 (recurrences of the classical orthogonal
       polynomials).
"""
from __future__ import annotations

import functools
import math
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ..kernels import Zonal
from ..validation import ArrayOf, InstanceOf, Integer, MaybeCount, NonNegativeInt, Positive, validated

__all__ = ["num_harmonics", "gegenbauer", "fundamental_system", "funk_hecke_coefficients", "MAX_HARMONICS_PER_DEGREE"]

MAX_HARMONICS_PER_DEGREE = 2600  # the largest N(d, n) whose fundamental system is built (a (3N)² Gram: 0.5 GB)


@validated
def num_harmonics(d: Annotated[int, Integer(2)], n: Annotated[int, NonNegativeInt()]) -> int:
    """N(d, n): the dimension of the degree-n spherical harmonics on :math:`S^{d-1}`."""
    if n == 0:
        return 1
    return (2 * n + d - 2) * math.comb(n + d - 3, n - 1) // n


@validated
def gegenbauer(n: Annotated[int, NonNegativeInt()], alpha: Positive, t: Annotated[Any, ArrayOf()]):
    r""":math:`C_n^\alpha(t)` by the three-term recurrence (5) :math:`C_0 = 1`, :math:`C_1 = 2\alpha t`,
    :math:`kC_k = 2t(k+\alpha-1)C_{k-1} - (k+2\alpha-2)C_{k-2}` [4, Table 18.9.1] (stable on [−1, 1];
    NumPy or JAX arrays).

    :param n: the degree ≥ 0 (static).
    :param alpha: α > 0.
    :param t: an array.
    :returns: an array of t's shape.
    """
    xp = jnp if isinstance(t, jax.Array) else np
    c_prev, c = xp.ones_like(t), 2.0 * alpha * t
    if n == 0:
        return c_prev
    for k in range(2, n + 1):
        c_prev, c = c, (2.0 * t * (k + alpha - 1) * c - (k + 2 * alpha - 2) * c_prev) / k  # Eq. (5)
    return c


def _gegenbauer_at_one(n: int, alpha: float) -> float:
    r""":math:`C_n^\alpha(1) = \Gamma(n+2\alpha)/(n!\,\Gamma(2\alpha))`."""
    return math.exp(math.lgamma(n + 2 * alpha) - math.lgamma(n + 1) - math.lgamma(2 * alpha))


def check_degree(d: int, n: int, name: str = "max_degree"):
    N = num_harmonics(d, n)
    if N > MAX_HARMONICS_PER_DEGREE:
        top = n
        while top > 0 and num_harmonics(d, top) > MAX_HARMONICS_PER_DEGREE:
            top -= 1
        raise ValueError(f"{name} = {n} needs {N} harmonics of degree {n} on the sphere S^{d - 1} (input_dim = "
                         f"{d - 1}), more than the {MAX_HARMONICS_PER_DEGREE} per degree whose fundamental system "
                         f"is built: use {name} <= {top} for input_dim = {d - 1} (fewer inputs allow higher degrees)")


@functools.lru_cache(maxsize=None)
def fundamental_system(d: int, n: int):
    r"""(V_n, L_n⁻¹) for degree n on :math:`S^{d-1}`: N(d, n) unit vectors, shape (N, d), chosen greedily
    to maximise :math:`\det C_n^\alpha(V V^\top)` over a fixed candidate pool, and the inverse Cholesky
    factor of :math:`\tfrac{\alpha}{n+\alpha}C_n^\alpha(V_nV_n^\top)`, shape (N, N) (NumPy float64;
    deterministic, computed once per process).

    :raises ValueError: for d < 3 or a degree past :data:`MAX_HARMONICS_PER_DEGREE`.
    """
    if d < 3:
        raise ValueError(f"spherical harmonic features need input_dim >= 2 (the sphere S^{d - 1} with d = "
                         "input_dim + 1 >= 3); for one input use FourierFeatures")
    check_degree(d, n, "degree")
    alpha = 0.5 * (d - 2)
    N = num_harmonics(d, n)
    P = max(3 * N, 64)
    rng = np.random.Generator(np.random.PCG64(1_000_003 * d + n))
    pool = rng.standard_normal((P, d))
    pool[0] = 0.0
    pool[0, -1] = 1.0  # start at the north pole
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    # pivoted Cholesky of the pool's Gram matrix C(pool poolᵀ): each pivot maximises the Schur complement,
    # i.e. the increment of det C(V Vᵀ) [1, App.]
    # pivoted Cholesky (LAPACK dpstrf) of the pool's Gram matrix C(pool poolᵀ): each pivot is the candidate
    # with the largest Schur complement, i.e. the largest increment of det C(V Vᵀ) [1, App.]; the first
    # N pivots (the Gram matrix has rank N) are the system
    G = gegenbauer(n, alpha, np.clip(pool @ pool.T, -1.0, 1.0))
    _, piv, rank, _ = scipy.linalg.lapack.dpstrf(G, lower=1, tol=-1.0)
    del G
    if rank < N:
        raise RuntimeError(f"fundamental system for d = {d}, n = {n}: the pool spans only {rank} of {N} "
                           "harmonics")  # does not happen for a pool of 3N generic points
    chosen = piv[:N] - 1
    V = pool[chosen]
    A = alpha / (n + alpha) * gegenbauer(n, alpha, np.clip(V @ V.T, -1.0, 1.0))
    Lc = np.linalg.cholesky(A)
    Linv = np.linalg.solve(Lc, np.eye(N))
    V.setflags(write=False)
    Linv.setflags(write=False)
    return V, Linv


def _block_product(d, degrees, C):
    """blockdiag(L_n⁻¹) C, one plain matmul per degree."""
    rows, start = [], 0
    for n in degrees:
        Linv = fundamental_system(d, n)[1]
        stop = start + len(Linv)
        rows.append(jnp.asarray(Linv, C.dtype) @ C[start:stop])
        start = stop
    return jnp.concatenate(rows, axis=0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _inverse_factor_product(d: int, degrees: tuple, C):
    r""":math:`\operatorname{blockdiag}(L_n^{-1})\,C` over the kept ``degrees`` (L_n of
    :func:`fundamental_system`): the step that turns the Gegenbauer rows :math:`C_n^\alpha(V_n\hat{\mathbf x})`
    into the harmonics Y_n, O(N Σ_n N(d, n)²) for C of shape (Σ_n N(d, n), N).

    Its derivative is written so that reverse mode transposes it into
    :math:`\operatorname{blockdiag}(L_n^{-\top})\,\bar C` with each constant :math:`L_n^{-\top}` stored
    row-major (a plain matmul): autodiff's own transpose of the product contracts the constant's first
    axis, which XLA's CPU backend ran at half the speed (measured, d = 9, degrees 0…5, N = 640 columns, one
    core: 39 ms against 19 ms for the forward product; with this rule 19 ms). Forward mode (``jax.jvp``,
    ``jax.hessian``) works as for any JAX function; the values are those of the plain product.

    :param d: the ambient dimension; ``degrees``: the kept degrees (a tuple, static).
    :param C: (Σ_n N(d, n), N) rows in the order of ``degrees``.
    :returns: (Σ_n N(d, n), N).
    """
    return _block_product(d, degrees, C)


@_inverse_factor_product.defjvp
def _inverse_factor_product_jvp(d, degrees, primals, tangents):
    (C,), (dC,) = primals, tangents
    rows, start = [], 0
    for n in degrees:  # L_n⁻¹ dC as (L_n⁻ᵀ)ᵀ dC: its transpose is then the row-major product L_n⁻ᵀ C̄
        LinvT = np.ascontiguousarray(fundamental_system(d, n)[1].T)
        stop = start + len(LinvT)
        rows.append(jnp.einsum("ji,jk->ik", jnp.asarray(LinvT, dC.dtype), dC[start:stop]))
        start = stop
    return _block_product(d, degrees, C), jnp.concatenate(rows, axis=0)


@functools.lru_cache(maxsize=None)
def _quadrature(d: int, max_degree: int, num_nodes: int):
    """(cos θ_q, P) with a_n = P[n] · κ(cos θ_q): Gauss–Legendre on [0, π] in θ (module docstring)."""
    alpha = 0.5 * (d - 2)
    x, w = np.polynomial.legendre.leggauss(num_nodes)
    theta = 0.5 * np.pi * (x + 1.0)
    w = 0.5 * np.pi * w
    t = np.cos(theta)
    c_d = math.exp(math.lgamma(d / 2) - math.lgamma((d - 1) / 2)) / math.sqrt(math.pi)
    C = np.empty((max_degree + 1, num_nodes))
    C[0] = 1.0
    if max_degree >= 1:
        C[1] = 2.0 * alpha * t
    for k in range(2, max_degree + 1):  # Eq. (5), every degree in one pass
        C[k] = (2.0 * t * (k + alpha - 1) * C[k - 1] - (k + 2 * alpha - 2) * C[k - 2]) / k
    at_one = np.array([_gegenbauer_at_one(n, alpha) for n in range(max_degree + 1)])
    P = c_d / at_one[:, None] * (w * np.sin(theta) ** (2 * alpha))[None, :] * C  # Eq. (1), t = cos θ
    return t, P


@validated
def funk_hecke_coefficients(kernel: Annotated[Any, InstanceOf(Zonal, what="a zonal kernel (e.g. ArcCosine(1))")],
                            d: Annotated[int, Integer(3)], max_degree: Annotated[int, NonNegativeInt()],
                            num_nodes: MaybeCount = None):
    r"""The Funk–Hecke coefficients :math:`a_0, \dots, a_L` of the kernel's κ on :math:`S^{d-1}`
    (module docstring; without σ²), differentiable in κ's hyperparameters.

    :param kernel: a concrete or traced :class:`~ppl_sparsegp.kernels.Zonal` kernel.
    :param d: the sphere's ambient dimension (input_dim + 1), ≥ 3.
    :param max_degree: L ≥ 0.
    :param num_nodes: Gauss–Legendre nodes in θ (default 2L + 200).
    :returns: (L + 1,) array; structurally vanishing degrees are exactly 0.
    """
    if d < 3:
        raise ValueError(f"d must be >= 3 (input_dim >= 2), got {d}")
    Q = 2 * max_degree + 200 if num_nodes is None else int(num_nodes)
    return _coefficients(kernel, int(d), int(max_degree), Q)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _coefficients(kernel, d, max_degree, num_nodes):
    t, P = _quadrature(d, max_degree, num_nodes)
    dtype = jnp.result_type(kernel.variance, float)
    a = jnp.asarray(P, dtype) @ kernel.kappa(jnp.asarray(t, dtype))  # Eq. (1)
    zero = np.array([kernel.vanishing_degree(n, d) for n in range(max_degree + 1)])
    return jnp.where(zero, 0.0, a)
