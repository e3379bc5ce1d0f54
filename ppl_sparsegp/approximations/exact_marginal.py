r"""The exact GP in a user's own model: ``marginal_spectral_gp(..., exact=True)``.

The same observed site as :func:`~ppl_sparsegp.marginal_spectral_gp` with the projected-process covariances
replaced by the kernels themselves:

.. math::

    \mathbf y \sim \mathcal N\big(H\bar{\boldsymbol\beta},\ C\big),\qquad
    C = \textstyle\sum_j K^{(j)}_{ff} + HL_\beta L_\beta^\top H^\top + \sigma^2 I,

evaluated by a dense Cholesky factor of C: O(N³) per evaluation and gradient, for N up to a few thousand.
It is the reference a user runs (on the data or a subsample) to check a sparse fit: the same sites, the
same ``Predictive`` draws at ``X_new`` (from the exact joint conditional of every GP and the mean's
weights given y) and the same leave-one-out terms for PSIS-LOO.

References:
    1. Rasmussen & Williams (2006), Gaussian processes for machine learning, §2.2 (eqs. 2.19, 2.30) and §2.7.
    2. Bürkner, Gabry, Vehtari (2021), Efficient leave-one-out cross-validation for Bayesian non-factorized
       normal and Student-t models, Computational Statistics 36.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.typing import ArrayLike
from numpyro.distributions import Distribution, constraints

__all__ = ["ExactMarginalGaussian", "MAX_EXACT_ROWS"]

#: set by ``exact_marginals``: None (off), else the rows the exact marginal keeps (an index array, or
#: ``slice(None)`` for all)
_FORCED = contextvars.ContextVar("ppl_sparsegp_exact_marginals", default=None)


@contextlib.contextmanager
def exact_marginals(rows=None):
    """Inside this context every :func:`~ppl_sparsegp.marginal_spectral_gp` is the exact GP
    (``exact=True``, no row cap) on the rows ``rows`` of its data (an index array; None: all): the pilot of
    :func:`~ppl_sparsegp.choose_features` and :func:`~ppl_sparsegp.diagnostics.mode_check` run a user's
    model so, with no ``exact`` argument of the model needed. The model is traced inside the context (the
    choice is made when the site is built, so it holds inside ``jit``)."""
    token = _FORCED.set(slice(None) if rows is None else np.asarray(rows))
    try:
        yield
    finally:
        _FORCED.reset(token)


def pilot_rows(X, y, mean_basis):
    """``(forced, X, y, mean_basis)``: outside ``exact_marginals`` the arguments as given and False;
    inside it True and the context's rows of X (axis 0), y (its last axis) and an array mean basis (axis 0;
    a callable basis is evaluated at the kept inputs)."""
    rows = _FORCED.get()
    if rows is None:
        return False, X, y, mean_basis
    X = np.asarray(X)[rows] if isinstance(X, (list, tuple)) else X[rows]
    y = None if y is None else y[..., rows]
    if mean_basis is not None and not callable(mean_basis):
        mean_basis = mean_basis[rows]
    return True, X, y, mean_basis

#: The default cap on N of ``marginal_spectral_gp(..., exact=True)`` (an N x N float64 covariance of 0.8 GB,
#: and its Cholesky factor as much again, O(N^3) per gradient).
MAX_EXACT_ROWS = 10_000


class ExactMarginalGaussian(Distribution):
    r"""The exact marginal :math:`\mathcal N(H\bar{\boldsymbol\beta}, C)` of Gaussian observations of a sum
    of GPs and a Gaussian-weighted parametric mean, with the dense
    :math:`C = \sum_j K^{(j)}_{ff} + HL_\beta L_\beta^\top H^\top + \sigma^2 I` (module docstring), as
    built by ``marginal_spectral_gp(..., exact=True)``. Event shape (N,); a batch shape for several outputs
    that share the hyperparameters.

    :param cov: C (N, N), symmetric positive definite.
    :param loc: the mean :math:`H\bar{\boldsymbol\beta}` (N,) or 0.
    :param batch_shape: the outputs' batch shape (a ``numpyro.plate``'s).
    :param validate_args: NumPyro's flag.
    """

    arg_constraints = {}
    support = constraints.real_vector
    pytree_data_fields = ("cov", "loc")

    def __init__(self, cov: jax.Array, loc: ArrayLike = 0.0, *, batch_shape: tuple[int, ...] = (),
                 validate_args: Optional[bool] = None) -> None:
        self.cov, self.loc = cov, loc
        super().__init__(batch_shape=tuple(batch_shape), event_shape=(cov.shape[-1],), validate_args=validate_args)

    def _residual(self, value):
        return jnp.reshape(value - self.loc, (-1, self.event_shape[0])).T  # (N, B)

    def log_prob(self, value: ArrayLike) -> jax.Array:
        """The joint log density (...,) of observations ``value`` (..., N)."""
        out = _dense_log_prob(self.cov, self._residual(value))
        return jnp.reshape(out, jnp.shape(value)[:-1])

    def sample(self, key, sample_shape=()):
        L = jnp.linalg.cholesky(self.cov)
        eps = jax.random.normal(key, tuple(sample_shape) + self.batch_shape + self.event_shape, self.cov.dtype)
        return self.loc + eps @ L.T

    def loo_log_prob(self, value: ArrayLike) -> jax.Array:
        r"""Pointwise :math:`\log p(y_i\mid\mathbf y_{-i},\theta)` (..., N) of ``value`` (..., N) [2]: with
        :math:`\mathbf g = C^{-1}\mathbf r` and :math:`\bar c_{ii} = [C^{-1}]_{ii}`,
        :math:`-\tfrac12\log 2\pi + \tfrac12\log\bar c_{ii} - \tfrac12 g_i^2/\bar c_{ii}`. O(N³)."""
        return jnp.reshape(_dense_loo(self.cov, self._residual(value)).T, jnp.shape(value))


@jax.jit
def _dense_log_prob(C, r):
    """log N(r | 0, C) per column of r (N, B), by one Cholesky factor and one triangular solve."""
    L = jnp.linalg.cholesky(C)
    a = solve_triangular(L, r, lower=True)
    return (-0.5 * jnp.sum(a * a, axis=0) - jnp.sum(jnp.log(jnp.diagonal(L)))
            - 0.5 * C.shape[0] * math.log(2 * math.pi))  # Eq. (2.30) [1]


@jax.jit
def _dense_loo(C, r):
    L = jnp.linalg.cholesky(C)
    Cinv = cho_solve((L, True), jnp.eye(C.shape[0], dtype=C.dtype))
    cbar = jnp.diagonal(Cinv)
    g = Cinv @ r
    return -0.5 * math.log(2 * math.pi) + 0.5 * jnp.log(cbar)[:, None] - 0.5 * g**2 / cbar[:, None]


def check_exact_size(name, named, X, max_exact_rows):
    """Refuse, before any N × N matrix is built, more rows than ``max_exact_rows`` (naming N, the memory of
    the dense covariance and the alternatives) and a kernel whose input dimensions are not X's (naming the
    GP and the kernel, not the kernel's internal arguments)."""
    N, D = int(X.shape[0]), int(X.shape[1])
    if max_exact_rows is not None and N > max_exact_rows:
        gib = N * N * 8 / 2**30
        raise ValueError(f"marginal_spectral_gp({name!r}, exact=True): N = {N} rows need an N × N float64 covariance "
                         f"of {gib:.3g} GiB (its Cholesky factor as much again; O(N³) = {float(N) ** 3:.2g} flops per "
                         f"gradient), above max_exact_rows = {max_exact_rows}. Alternatives: the spectral features "
                         "(exact=False; sized from the data by choose_features), the exact GP on a random subsample "
                         f"of at most {max_exact_rows} rows, or max_exact_rows=None (or larger) if the memory and time "
                         "are affordable")
    for gp_name, _, kernel in named:
        try:
            dim = getattr(kernel, "input_dim", None)
        except (TypeError, AttributeError):  # a template: its lengthscale a prior (sized when sampled)
            dim = None
        if isinstance(dim, int) and dim != D:
            raise ValueError(f"marginal_spectral_gp({name!r}, exact=True): X has {D} input dimension(s) (shape "
                             f"{tuple(X.shape)}) but the kernel of {gp_name!r} ({type(kernel).__name__}) has {dim}: "
                             f"give X of shape (N, {dim}) or a kernel with {D} lengthscales (or one)")


def exact_covariance(kernels, X, noise_variance, H=None, L=None):
    """C = Σ_j K_j(X, X) + H L Lᵀ Hᵀ + σ² I (N, N) for concrete kernels and inputs X (N, D)."""
    C = sum(k(X, X) for k in kernels) + noise_variance * jnp.eye(X.shape[0], dtype=X.dtype)
    if H is not None:
        HL = H @ L
        C = C + HL @ HL.T
    return C


def exact_conditional_draw(kernels, X, X_new, C, r, rng_key, *, H=None, L=None, beta_bar=None):
    r"""One joint draw of every GP at X_new (and of the mean's weights β) from their exact conditional given
    the residual r = y − Hβ̄ (..., N): the stacked :math:`\mathbf z = [f_1(X_*); \dots; f_J(X_*); \boldsymbol\beta]`
    has cross-covariance :math:`K_{zy} = [K_j(X_*, X); L_\beta L_\beta^\top H^\top]` with y, so
    :math:`\mathbf z\mid\mathbf y \sim \mathcal N(\bar{\mathbf z} + K_{zy}C^{-1}\mathbf r,\
    K_{zz} - K_{zy}C^{-1}K_{yz})` (eq. 2.19 [1]), drawn through the covariance's symmetric square root
    (eigendecomposition, exact for a singular covariance such as a periodic kernel's).

    :returns: (list of J arrays (..., N_new), β (..., P) or None).
    """
    n_new = X_new.shape[0]
    blocks_zy = [k(X_new, X) for k in kernels]
    blocks_zz = [k(X_new, X_new) for k in kernels]
    if H is not None:
        B = L @ L.T
        blocks_zy.append(B @ H.T)
        blocks_zz.append(B)
    Kzy = jnp.concatenate(blocks_zy, axis=0)  # (J N_new + P, N)
    Kzz = jax.scipy.linalg.block_diag(*blocks_zz)
    Lc = jnp.linalg.cholesky(C)
    rt = jnp.reshape(r, (-1, r.shape[-1])).T  # (N, B)
    mean = Kzy @ cho_solve((Lc, True), rt)  # (Z, B)
    V = solve_triangular(Lc, Kzy.T, lower=True)
    cov = Kzz - V.T @ V
    lam, U = jnp.linalg.eigh(0.5 * (cov + cov.T))
    root = U * jnp.sqrt(jnp.maximum(lam, 0.0))
    xi = jax.random.normal(rng_key, (root.shape[1], rt.shape[1]), root.dtype)
    z = (mean + root @ xi).T  # (B, Z)
    z = jnp.reshape(z, tuple(np.shape(r)[:-1]) + (z.shape[-1],))
    fs = [z[..., j * n_new:(j + 1) * n_new] for j in range(len(kernels))]
    beta = None if H is None else beta_bar + z[..., len(kernels) * n_new:]
    return fs, beta
