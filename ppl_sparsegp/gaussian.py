r"""Gaussians over inducing variables with structured covariance, and the library's one KL.

:class:`StructuredNormal` is a NumPyro distribution :math:`\mathcal N(\boldsymbol\mu, K)` whose
covariance is a :mod:`ppl_sparsegp.linalg` operator, so the prior :math:`p(\mathbf u) = \mathcal N(0,
K_{uu})` keeps its structure (diagonal plus low rank, block-diagonal, Kronecker) inside NumPyro.
``kl_divergence`` is registered for pairs of them, which ``TraceMeanField_ELBO`` uses analytically.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.kl import kl_divergence

from .linalg import Identity, LinearOperator

__all__ = ["StructuredNormal", "gaussian_kl"]


class StructuredNormal(Distribution):
    r""":math:`\mathcal N(\boldsymbol\mu, K)` with K a structured PSD operator.

    Sampling uses the operator's square-root factor, :math:`\mathbf x = \boldsymbol\mu + R\,\boldsymbol
    \epsilon` with :math:`RR^\top = K` and :math:`\boldsymbol\epsilon\sim\mathcal N(0, I_{M'})`.

    :param loc: mean, shape (M,).
    :param cov: a :class:`~ppl_sparsegp.linalg.LinearOperator` of size M.
    :param validate_args: NumPyro's ``validate_args`` of every
        :class:`~numpyro.distributions.Distribution` (None: NumPyro's global setting, see
        ``numpyro.enable_validation``); when on, NumPyro checks ``loc`` against ``arg_constraints`` (a real
        vector) and the values given to ``log_prob`` against the support.
    :raises TypeError: when ``cov`` is not a LinearOperator.
    :raises ValueError: when the last axis of ``loc`` is not of size M.
    """

    arg_constraints = {"loc": constraints.real_vector}
    support = constraints.real_vector
    reparametrized_params = ["loc"]

    def __init__(self, loc: ArrayLike, cov: LinearOperator, *, validate_args: Optional[bool] = None):
        if not isinstance(cov, LinearOperator):
            raise TypeError(f"cov must be a LinearOperator, got {type(cov).__name__}")
        loc = jnp.asarray(loc)
        if loc.shape[-1:] != (cov.size,):
            raise ValueError(f"loc has shape {loc.shape}, expected ({cov.size},) to match cov")
        self.loc, self.cov = loc, cov
        super().__init__(batch_shape=(), event_shape=(cov.size,), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + (self.cov.sqrt_cols,), dtype=self.loc.dtype)
        flat = eps.reshape((-1, self.cov.sqrt_cols)).T
        x = self.cov.sqrt_matmul(flat).T.reshape(sample_shape + (self.cov.size,))
        return self.loc + x

    def log_prob(self, value: ArrayLike) -> jax.Array:
        r = (value - self.loc).reshape((-1, self.cov.size)).T
        maha = jnp.sum(r * self.cov.solve(r), axis=0)
        out = -0.5 * (maha + self.cov.logdet() + self.cov.size * math.log(2 * math.pi))
        return out.reshape(jnp.shape(value)[:-1])

    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return self.cov.diagonal()

    def tree_flatten(self):
        return (self.loc, self.cov), None

    @classmethod
    def tree_unflatten(cls, aux_data: Any, params: Sequence[Any]):
        return cls(*params)


def gaussian_kl(q_mu: jax.Array, q_cov: LinearOperator, p_cov: LinearOperator, p_mu: Optional[jax.Array] = None):
    r"""KL(N(q_mu, S) ‖ N(p_mu, K)), the one KL of the library.

    .. math::

        \mathrm{KL} = \tfrac12\left[\operatorname{tr}(K^{-1}S) + (\boldsymbol\mu_q-\boldsymbol\mu_p)^\top
        K^{-1}(\boldsymbol\mu_q-\boldsymbol\mu_p) - M + \log|K| - \log|S|\right].

    Every term uses the operators' structure: with K = I (whitened) it costs O(M) for diagonal S and
    O(M²) for a Cholesky factor; block-diagonal pairs are handled block by block.

    :param q_mu: the mean of q (M,).
    :param q_cov: S, a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M).
    :param p_cov: K, a LinearOperator (M, M).
    :param p_mu: the mean of p (M,), default zero.
    :returns: a scalar.
    """
    d = q_mu if p_mu is None else q_mu - p_mu
    if isinstance(p_cov, Identity):
        maha, logdet_p = jnp.sum(d**2), 0.0
    else:
        maha, logdet_p = jnp.dot(d, p_cov.solve(d)), p_cov.logdet()
    trace = p_cov.trace_solve(q_cov)
    return 0.5 * (trace + maha - q_cov.size + logdet_p - q_cov.logdet())


@kl_divergence.register(StructuredNormal, StructuredNormal)
def _kl_structured(p, q):
    return gaussian_kl(p.loc, p.cov, q.cov, q.loc)
