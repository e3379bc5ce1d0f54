r"""The single place that turns q(u) (or a value of u) and the features into q(f) marginals.

With :math:`A = K_{uu}^{-1}K_{uf}` (unwhitened, :math:`\mathbf u = \mathbf m`) or
:math:`A = R^\top K_{uu}^{-1} K_{uf}` (whitened, :math:`\mathbf u = R\mathbf v`, :math:`RR^\top = K_{uu}`,
R possibly non-square as for VFF with Matérn-5/2),

.. math::

    \mu(\mathbf x_n) = \mathbf a_n^\top\mathbf m, \qquad
    \sigma^2(\mathbf x_n) = k(\mathbf x_n,\mathbf x_n) - \mathbf q_n + \mathbf a_n^\top S\,\mathbf a_n,

where :math:`\mathbf q_n = [K_{fu}K_{uu}^{-1}K_{uf}]_{nn}` and S is q(u)'s (or q(v)'s) covariance;
with ``q_cov=None`` the result is p(f | u = m), the conditional the MCMC formulation uses [1, eq. 26;
2, §2.4.3]. Feature families override :func:`conditional` only where their structure demands
(register with ``conditional.register(FeatureType)``; the dispatcher is declared in
:mod:`ppl_sparsegp.covariances`, this module registers the default).

References:
    1. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification.
    2. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .covariances import Kuf, Kuu, conditional
from .grid import Grid
from .kernels import Kernel
from .linalg import LinearOperator

__all__ = ["conditional", "projected_mean", "projection"]


def projection(feature: Any, kernel: Kernel, X: Union[ArrayLike, Grid], *, whiten: bool,
               Kmm: Optional[LinearOperator] = None, Kmn: Optional[jax.Array] = None):
    r"""Return ``(A, qff_diag)``: :math:`A` as above (M or M' by N) and diag of
    :math:`K_{fu}K_{uu}^{-1}K_{uf}`.

    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
    :param kernel: a concrete kernel.
    :param X: inputs (N, D) or a Grid.
    :param whiten: A for the whitened parameterisation (u = R v) or for u.
    :param Kmm: a precomputed Kuu (optional); ``Kmn``: a precomputed Kuf (optional).
    :returns: ``(A, qff_diag)``, arrays (M', N) and (N,)."""
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    Kmn = Kuf(feature, kernel, X) if Kmn is None else Kmn
    return _projection_of(Kmm, Kmn, whiten)


def _projection_of(Kmm, Kmn, whiten):
    if whiten:
        A = Kmm.whiten(Kmn)  # Rᵀ Kuu⁻¹ Kuf
        return A, jnp.sum(A * A, axis=0)
    A = Kmm.solve(Kmn)  # Kuu⁻¹ Kuf
    return A, jnp.sum(Kmn * A, axis=0)


@conditional.register(object)
def _conditional(feature, kernel, X, q_mu, q_cov=None, *, whiten: bool = False, Kmm=None, rng_key=None):
    """The default: every feature whose Kuf is computed exactly (``rng_key`` is not used)."""
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    Kmn = Kuf(feature, kernel, X)
    return _mean_of(Kmm, Kmn, q_mu, whiten), _var_of(Kmm, Kmn, kernel.diag(X), q_cov, whiten)


def projected_mean(feature: Any, kernel: Kernel, X: Union[ArrayLike, Grid], q_mu: jax.Array, *, whiten: bool,
                   Kmm: Optional[LinearOperator] = None):
    r"""The conditional's mean alone, :math:`K_{fu}K_{uu}^{-1}\mathbf u` (u = R v whitened): the projected
    process, for callers that need no variance (``spectral_gp``). Families on the default conditional skip
    the variance's work; a family with its own ``conditional`` gives that one's mean.

    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
    :param kernel: a concrete kernel.
    :param X: inputs (N, D) or a Grid.
    :param q_mu: the inducing variables (M,) (v when ``whiten``).
    :param whiten: read ``q_mu`` as v with u = R v.
    :param Kmm: a precomputed Kuu (optional).
    :returns: the mean (N,)."""
    if conditional.dispatch(feature) is not conditional.default:
        return conditional(feature, kernel, X, q_mu, whiten=whiten, Kmm=Kmm)[0]
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    return _mean_of(Kmm, Kuf(feature, kernel, X), q_mu, whiten)


# The algebra after Kuu, Kuf and diag k(X, X) are built (and validated on concrete values by the caller)
# is compiled as one program each: NumPyro runs a model eagerly when it initialises, and op by op these
# operations and their gradients compiled one by one (~2.5 s of a 1-D Cox process's NUTS run,
# measured); under a trace (NUTS, SVI) they are inlined.
@partial(jax.jit, static_argnums=3)
def _mean_of(Kmm, Kmn, q_mu, whiten):
    # Eq. (26) [1]: mean = Aᵀ q_mu = K_fu W with W = K_uu⁻¹ u, u = R v whitened (solve_sqrt): a vector's
    # solve, so a caller that uses only the mean (the projected process) never pays for the M × N solve
    # in A. Written (Wᵀ Kuf)ᵀ, not Kfu W: XLA:CPU then keeps Kuf's (M, N) layout and does a row-vector
    # product both ways, a quarter less time per NUTS gradient (measured, lgcp_1d, 31 features)
    W = Kmm.solve_sqrt(q_mu) if whiten else Kmm.solve(q_mu)
    return (W.T @ Kmn).T


@partial(jax.jit, static_argnums=4)
def _var_of(Kmm, Kmn, kdiag, q_cov, whiten):
    A, qff = _projection_of(Kmm, Kmn, whiten)
    var = kdiag - qff
    if q_cov is not None:
        var = var + jnp.sum(A * q_cov.matmul(A), axis=0)  # diag(Aᵀ S A)
    return jnp.maximum(var, 0.0)
