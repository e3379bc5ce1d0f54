r"""Gaussian observations with the inducing variables integrated out, in a user's own model.

``marginal_spectral_gp("y", {"trend": (vff, Matern52(...)), "season": (per, Periodic(...))}, X, y, noise_scale)``
adds the observed site ``y`` whose density is the model of :func:`~ppl_sparsegp.spectral_gp` plus Gaussian
noise with every inducing variable (and an optional parametric mean's weights) integrated out exactly:

.. math::

    \mathbf y &= H\boldsymbol\beta + \sum_j f_j(X) + \boldsymbol\varepsilon,\quad
    \boldsymbol\beta\sim\mathcal N(\bar{\boldsymbol\beta}, L_\beta L_\beta^\top),\quad
    \boldsymbol\varepsilon\sim\mathcal N(0,\sigma^2 I),\\
    f_j &= K^{(j)}_{fu}K^{(j)-1}_{uu}\mathbf u_j,\quad \mathbf u_j = R_j\mathbf v_j,\quad
    \mathbf v_j\sim\mathcal N(0, I),

so that with :math:`Z = [W_1^\top \cdots W_J^\top\ HL_\beta]` (N × M'),
:math:`W_j = R_j^\top K_{uu}^{(j)-1}K^{(j)}_{uf}`,

.. math::

    \mathbf y &\sim \mathcal N(H\bar{\boldsymbol\beta},\ ZZ^\top + \sigma^2 I)\\
    &= \mathcal N(H\bar{\boldsymbol\beta},\ \textstyle\sum_j Q^{(j)}_{ff} + HL_\beta L_\beta^\top H^\top + \sigma^2 I),

evaluated by Woodbury (:func:`~ppl_sparsegp.approximations.collapsed.woodbury_log_density`) in
O(N M'² + M'³). This is the exact marginal of the latent model (not Titsias' bound: no trace term), so
NUTS over the hyperparameters samples the same posterior as NUTS over the latent model, with nothing
latent left: no funnel between the whitened coordinates and the noise, a few leapfrog steps per draw.

When every Kuf factors as :math:`\operatorname{diag}(\mathbf s)\Phi` with Φ free of the hyperparameters
(:func:`~ppl_sparsegp.covariances.kuf_basis`: VFF with the data inside its box, the periodic kernel's
Fourier features) and X, y and H are data (not traced; H from NumPy, or ``mean_basis`` a function of the
inputs, evaluated at X under ``jax.ensure_compile_time_eval``), the statistics :math:`\Psi^\top\Psi`,
:math:`\Psi^\top\mathbf y`, :math:`\mathbf y^\top\mathbf y` of :math:`\Psi = [\Phi_1^\top\cdots\ H]` are
computed once, when the model is traced, and each gradient costs O(M'³) with no N (the Gram root comes
from an eigendecomposition of :math:`\Psi^\top\Psi`, as :class:`~ppl_sparsegp.CollapsedGP`'s precomputed
statistics do).

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, §5.2.
    2. Rasmussen & Williams (2006), Gaussian processes for machine learning, §2.7 (explicit basis functions).
    3. Bürkner, Gabry, Vehtari (2021), Efficient leave-one-out cross-validation for Bayesian non-factorized
       normal and Student-t models, Computational Statistics 36 (the pointwise LOO terms).
"""
from __future__ import annotations

import contextlib
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import Distribution

from ..covariances import Kuu, kuf_basis
from ..features.base import current_feature
from ..parameters import check_finite, check_positive, check_positive_prior, free_leaves, instantiate, is_concrete
from ..validation import (
    AnyOf,
    ArrayOf,
    Flag,
    InstanceOf,
    IsCallable,
    MaybeCount,
    OrNone,
    PositiveScalar,
    validated,
    warn_user,
)
from . import own_model_checks
from .common import as_inputs as _as_inputs, project as _project, require_model as _require_model
from .exact_marginal import (
    MAX_EXACT_ROWS,
    ExactMarginalGaussian,
    check_exact_size,
    exact_conditional_draw,
    exact_covariance,
    pilot_rows,
)
from .marginal_gaussian import MarginalGaussian, Part, data_statistics

__all__ = ["marginal_spectral_gp"]

#: the declared kinds of marginal_spectral_gp's arguments; their shapes against each other (X's rows, y's
#: last axis, the basis' width against the prior's) are checked in the body, naming both
_GPS = Annotated[Any, InstanceOf(tuple, list, dict, what="a (feature, kernel) pair, a list of pairs or a dict "
                                                          "{gp name: (feature, kernel)}")]
_X = Annotated[Any, ArrayOf(rank=(1, 2), read=False)]
_BASIS = Annotated[Any, OrNone(AnyOf(IsCallable(), ArrayOf(rank=(1, 2), read=False)))]


def _named_gps(name, gps):
    """[(gp name, feature, kernel)] from one (feature, kernel) pair, a list of pairs or a dict."""
    if isinstance(gps, tuple) and len(gps) == 2 and not isinstance(gps[0], tuple):
        gps = [gps]
    if isinstance(gps, dict):
        items = list(gps.items())
    elif isinstance(gps, (list, tuple)):
        items = [(f"{name}_gp{i}", pair) for i, pair in enumerate(gps)]
    else:
        items = []
    if not items or not all(isinstance(p, tuple) and len(p) == 2 for _, p in items):
        raise ValueError("gps must be a (feature, kernel) pair, a list of such pairs or a dict "
                         "{gp name: (feature, kernel)}, e.g. {'trend': (FourierFeatures(...), Matern52(...))}")
    return [(str(k), f, kern) for k, (f, kern) in items]


def _mean_prior(mean_prior, P, dtype):
    """(loc (P,), L (P, P)) of a Gaussian prior on the mean weights: a MultivariateNormal, or a Normal
    (independent weights; batch shape (P,) or ``.to_event(1)``)."""
    d = mean_prior
    while isinstance(d, (dist.Independent, dist.ExpandedDistribution)):  # Normal(0, 1).expand([P]).to_event(1)
        d = d.base_dist
    size = int(np.prod(mean_prior.shape())) if isinstance(mean_prior, Distribution) else None
    if isinstance(d, (dist.MultivariateNormal, dist.Normal)) and mean_prior.shape() not in ((), (P,)):
        raise ValueError(f"mean_prior must be over the {P} columns of mean_basis (shape ({P},)), got a prior of "
                         f"shape {mean_prior.shape()} ({size} weights): e.g. dist.Normal(jnp.zeros({P}), 1.0)")
    if isinstance(d, dist.MultivariateNormal):
        loc, L = d.loc, d.scale_tril
    elif isinstance(d, dist.Normal):
        loc, L = jnp.broadcast_to(d.loc, (P,)), jnp.diag(jnp.broadcast_to(d.scale, (P,)))
    else:
        raise ValueError(f"mean_prior must be a Gaussian prior on the {P} mean weights (dist.Normal or "
                         f"dist.MultivariateNormal), got {type(mean_prior).__name__}")
    if jnp.shape(loc) != (P,) or jnp.shape(L) != (P, P):
        raise ValueError(f"mean_prior must be over the {P} columns of mean_basis, got loc of shape "
                         f"{jnp.shape(loc)}")
    return jnp.asarray(loc, dtype), jnp.asarray(L, dtype)


def _basis_matrix(H, X, n, what):
    """H (n, P) from an array (N, P) or (N,), or from a callable evaluated at the inputs X as the user
    passed them, under compile-time evaluation: jax.numpy on concrete inputs gives a concrete H inside a
    trace (NUTS's jit), so the statistics path holds; H stays traced only where it uses traced values."""
    name = f"{what}(X)" if callable(H) else what
    with jax.ensure_compile_time_eval():  # data stay concrete inside a trace (for the statistics)
        if callable(H):
            H = H(np.asarray(X) if isinstance(X, (list, tuple)) else X)
        try:
            H = jnp.asarray(H)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be an array (N, P), got {type(H).__name__}") from None
        H = H[:, None] if H.ndim == 1 else H
    if H.ndim != 2 or H.shape[0] != n:
        raise ValueError(f"{name} must be (N, P) with N = {n} rows (one per input), got shape {H.shape}")
    check_finite(H, name)
    return H



@validated
def marginal_spectral_gp(name: Annotated[str, InstanceOf(str, what="a string (the observed site's name)")],
                         gps: _GPS, X: _X, y: Annotated[Any, OrNone(ArrayOf(read=False))],
                         noise_scale: PositiveScalar, *, mean_basis: _BASIS = None,
                         mean_prior: Annotated[Any, OrNone(InstanceOf(Distribution, what="a NumPyro prior"))] = None,
                         X_new: Annotated[Any, OrNone(_X.__metadata__[0])] = None,
                         mean_basis_new: Annotated[Any, OrNone(ArrayOf(rank=(1, 2), read=False))] = None,
                         exact: Flag = False,
                         max_exact_rows: MaybeCount = MAX_EXACT_ROWS) -> Optional[dict[str, jax.Array]]:
    r"""Observe y as Gaussian noise around one or several spectral GPs (and a parametric mean), with the
    inducing variables integrated out exactly; under ``Predictive`` with ``X_new``, draw each GP there.

    The observed site ``name`` has the density
    :math:`\mathcal N(\mathbf y\mid H\bar{\boldsymbol\beta}, \sum_j Q^{(j)}_{ff} + HBH^\top + \sigma^2 I)`
    (module docstring): the marginal of :func:`~ppl_sparsegp.spectral_gp`'s model plus
    ``dist.Normal(f, noise)``, so NUTS samples only the hyperparameters. Per gradient it costs O(N M'² +
    M'³) with M' = Σ features + P, and O(M'³) with no N when every GP's Kuf is free of the
    hyperparameters (VFF with X inside its box, the periodic kernel's Fourier features; X, y and the mean
    basis data, not computed from sampled values: y and an array basis from NumPy, or the basis a function).

    :param name: the observed site (and the prefix of ``<name>_noise``, ``<name>_new``, ``<name>_beta``).
    :param gps: a ``(feature, kernel)`` pair, a list of pairs (GPs named ``<name>_gp0``, ...) or a dict
        ``{gp name: (feature, kernel)}``; each kernel may be a template (its priors are sampled as
        ``<gp name>_kernel_<field>``), each feature is concrete.
    :param X: inputs (N, D), or (N,) for one input dimension, shared by every GP.
    :param y: observations (..., N); leading axes are outputs of an enclosing ``numpyro.plate`` (each
        its own GPs and mean weights, the hyperparameters shared; a y without the plate's axis is refused:
        broadcast it yourself where every output sees the same data). None: y is sampled (prior predictive).
    :param noise_scale: the noise standard deviation σ > 0 (a scale, not a variance), a scalar: a number, a
        value sampled by the model, or a NumPyro distribution with positive support (sampled as ``<name>_noise``).
    :param mean_basis: optional H (N, P) (or (N,)): the parametric mean Hβ, e.g.
        ``lambda t: jnp.stack([jnp.ones_like(t), t], -1)`` for a linear trend: a function ``H(X) -> (N, P)``
        of the inputs as passed ((N,) or (N, D)), evaluated at X (and at X_new) when the model is traced,
        under ``jax.ensure_compile_time_eval``, so jax.numpy on the data gives numbers, not tracers, and the
        statistics path holds under NUTS; or the array H (N, P), built with NumPy: an array computed with
        jax.numpy inside a model run under ``jit`` (NUTS, SVI) is a tracer even from constant data, which
        the library cannot evaluate (it warns, naming the function form). A basis that uses sampled values
        is traced either way and keeps the O(N M'²) path.
    :param mean_prior: the Gaussian prior of β (``dist.Normal`` with P entries, or
        ``dist.MultivariateNormal``); required with ``mean_basis``. β is integrated out too.
    :param X_new: inputs at which to draw each GP from its exact conditional given y and the
        hyperparameters (sites ``<gp name>_new`` per GP and ``<name>_new``, their sum plus
        ``mean_basis_new @ β``; with a mean, ``<name>_beta`` the weights' draw). Needs a random key
        (``numpyro.infer.Predictive`` or ``handlers.seed``) and y.
    :param mean_basis_new: H at X_new (N_new, P), with the P columns of ``mean_basis``: needed with X_new
        only for an array ``mean_basis`` (a function is evaluated at X_new); where given it is used.
    :param exact: the exact GP instead (the user's reference): the same sites with the dense covariance
        :math:`\sum_j K^{(j)}_{ff} + HBH^\top + \sigma^2 I`
        (:class:`~ppl_sparsegp.approximations.exact_marginal.ExactMarginalGaussian`),
        O(N³) per gradient (N up to a few thousand: run it on a subsample); the features are ignored (a
        pair may be ``(None, kernel)``) and the draws at ``X_new`` come from the exact conditional.
    :param max_exact_rows: with ``exact=True``, the most rows N the dense covariance is built for (default
        10 000: an N × N float64 matrix of 0.8 GB, its Cholesky factor as much again, O(N³) per gradient);
        more raise a ``ValueError`` naming N, the memory and the alternatives. None: no cap.
    :returns: None, or with ``X_new`` a dict ``{gp name: f_new, name: the sum}`` of arrays (..., N_new).
    :raises ValueError: for bad shapes or values (naming the argument; ``mean_basis(X)`` for the function's
        value), a mean basis without its prior or whose width differs from the prior's or mean_basis_new's,
        X_new without y or a random key.

    **Pointwise log-likelihood.** The model does not factorise over observations: for ArviZ's
    ``log_likelihood`` group, :func:`~ppl_sparsegp.diagnostics.from_mcmc` stores the leave-one-out
    terms :math:`\log p(y_i\mid\mathbf y_{-i},\theta)` of each draw (:meth:`MarginalGaussian.loo_log_prob`),
    which PSIS-LOO (``az.loo``) takes as the pointwise values of a non-factorised model [3].
    """
    _require_model("marginal_spectral_gp")
    forced, X, y, mean_basis = pilot_rows(X, y, mean_basis)  # the pilot's exact GP (exact_marginals)
    exact, max_exact_rows = (True, None) if forced else (exact, max_exact_rows)
    X_given = X  # a callable mean_basis is evaluated at the inputs as passed
    named = _named_gps(name, gps)
    own_model_checks.check_marginal_gps(name, named, exact=exact)
    X, y, s2 = _checked_data(name, X, y, noise_scale)
    if exact:
        check_exact_size(name, named, X, max_exact_rows)
        return _exact_model(name, named, X, y, s2, (mean_basis, mean_prior, mean_basis_new), X_given, X_new)

    parts, gp_models = _gp_parts(named, X)
    H, beta_bar, L = _mean_weights(mean_basis, mean_prior, X_given, X.shape[0])
    if H is not None:
        with jax.ensure_compile_time_eval():  # Hᵀ stays concrete under jit, so the statistics path holds
            Ht = H.T
        parts.append(Part(None, None, Ht, L))

    constant = (y is not None and all(is_concrete(p.basis) for p in parts) and is_concrete(y))
    _warn_lost_statistics(y, parts, H, callable(mean_basis))
    stats = data_statistics(parts, y, H) if constant else None
    batch = () if y is None else y.shape[:-1]
    marginal = MarginalGaussian(parts, s2, beta_bar=beta_bar, stats=stats, y=y, batch_shape=batch)
    gps_info = [(gp_name, feature, getattr(kernel, "nu", None)) for gp_name, feature, kernel, _ in gp_models]
    kernels = {gp_name: kernel for gp_name, _, kernel, _ in gp_models}  # for choose_features
    numpyro.sample(name, marginal, obs=y,  # for refinement_check and choose_features
                   infer={"ppl_sparsegp_gps": gps_info, "ppl_sparsegp_kernels": kernels, "ppl_sparsegp_inputs": X})
    if X_new is None:
        return None
    return _draw_new(name, marginal, parts, gp_models, y, X_new, beta_bar, (mean_basis, mean_basis_new))


def _checked_data(name, X, y, noise_scale):
    """X as (N, D) inputs, y checked against it, and σ² (``noise_scale`` sampled first when it is a prior)."""
    X = _as_inputs(X, "X")
    N = X.shape[0]
    if N == 0:
        raise ValueError("X has no rows: marginal_spectral_gp needs at least one observation")
    dtype = jnp.result_type(X.dtype, float)
    if isinstance(noise_scale, Distribution):
        noise_scale = numpyro.sample(f"{name}_noise", check_positive_prior(noise_scale,
                                                                          f"noise_scale (site '{name}_noise')"))
    check_positive(noise_scale, "noise_scale")
    own_model_checks.check_noise_shape(noise_scale)
    s2 = jnp.asarray(noise_scale, dtype) ** 2
    if y is not None:
        with jax.ensure_compile_time_eval():  # data stay concrete inside a trace (for the statistics)
            y = jnp.asarray(y)
        if y.ndim < 1 or y.shape[-1] != N:
            raise ValueError(f"y must have N = {N} entries on its last axis (one per row of X), got shape {y.shape}")
        check_finite(y, "y")
        own_model_checks.check_observations_in_plates(y, name)
    return X, y, s2


def _gp_parts(named, X):
    """One :class:`~.marginal_gaussian.Part` per GP (Kuu, Kuf's scale and basis) and
    [(gp name, feature, kernel, Kuu)]."""
    parts, gp_models = [], []
    for gp_name, feature, kernel in named:
        feature = current_feature(feature)
        kernel = instantiate(kernel, f"{gp_name}_kernel_") if free_leaves(kernel) else kernel
        Xg = feature.check_inputs(X)
        own_model_checks.check_lengthscale_dims(kernel, Xg.shape[1], f"gps[{gp_name!r}]")
        Kmm = Kuu(feature, kernel)
        # concrete data: evaluate the basis now at any size (past constant_kuf's cap, which bounds a Kuf
        # embedded in the program): only the statistics enter the per-gradient program (measured at
        # N = 100 003, M' = 404: 7.8 s per gradient with the basis in the program, 30 ms without)
        with jax.ensure_compile_time_eval() if is_concrete(Xg) else contextlib.nullcontext():
            scale, basis = kuf_basis(feature, kernel, Xg)
        parts.append(Part(Kmm, scale, basis))
        gp_models.append((gp_name, feature, kernel, Kmm))
    return parts, gp_models


def _mean_weights(mean_basis, mean_prior, X, n):
    """(H (N, P), β̄ (P,), L (P, P)) of the parametric mean, or three Nones without one (X as passed, n = N)."""
    if mean_basis is None and mean_prior is None:
        return None, None, None
    if mean_basis is None or mean_prior is None:
        raise ValueError("a parametric mean needs both mean_basis (N, P), or a function of the inputs giving "
                         "it, and mean_prior (a Gaussian on the P weights)")
    H = _basis_matrix(mean_basis, X, n, "mean_basis")
    beta_bar, L = _mean_prior(mean_prior, H.shape[1], jnp.result_type(H.dtype, float))
    return H, beta_bar, L


def _mean_basis_new(mean_basis, mean_basis_new, X_new, n_new, P):
    """H at X_new (N_new, P): ``mean_basis_new`` where given (P columns), else the callable mean_basis."""
    if mean_basis_new is None and not callable(mean_basis):
        raise ValueError("X_new with a parametric mean needs mean_basis_new (N_new, P), H at X_new, or mean_basis "
                         "as a function of the inputs, e.g. mean_basis=lambda t: jnp.stack([jnp.ones_like(t), t], -1)")
    Hn = _basis_matrix(mean_basis if mean_basis_new is None else mean_basis_new, X_new, n_new,
                       "mean_basis" if mean_basis_new is None else "mean_basis_new")
    if Hn.shape[1] != P:
        raise ValueError(f"mean_basis_new has {Hn.shape[1]} columns where mean_basis has {P}: it must be the same "
                         "basis at X_new (or leave it out and pass mean_basis as a function of the inputs)")
    return Hn


def _draw_key(y):
    """The PRNG key for the draws at X_new, which are drawn given y (both needed, else a clear error)."""
    if y is None:
        raise ValueError("X_new needs the observations y: the GPs at X_new are drawn given y")
    key = numpyro.prng_key()
    if key is None:
        raise ValueError("marginal_spectral_gp with X_new draws the GPs: run the model under "
                         "numpyro.infer.Predictive or numpyro.handlers.seed")
    return key


def _draw_new(name, marginal, parts, gp_models, y, X_new, beta_bar, mean):
    """The GPs' draws at X_new given y (sites ``<gp name>_new``, ``<name>_beta``, ``<name>_new``); ``mean``
    is (mean_basis, mean_basis_new)."""
    key = _draw_key(y)
    v = marginal.posterior_weights(y, key)  # (..., M')
    X_new, X_new_given = _as_inputs(X_new, "X_new"), X_new
    P = None if beta_bar is None else beta_bar.shape[0]
    Hn = None if P is None else _mean_basis_new(*mean, X_new_given, X_new.shape[0], P)
    out, start, total = {}, 0, 0.0
    for (gp_name, feature, kernel, Kmm), part in zip(gp_models, parts):
        Xn = feature.warn_outside(feature.check_inputs(X_new, "X_new"), "X_new", kernel=kernel)
        vj = v[..., start:start + part.cols]
        start += part.cols
        out[gp_name] = numpyro.deterministic(f"{gp_name}_new", _project(feature, kernel, Xn, vj, True, Kmm, False))
        total = total + out[gp_name]
    if Hn is not None:
        beta = numpyro.deterministic(f"{name}_beta", beta_bar + v[..., start:] @ parts[-1].L.T)
        total = total + beta @ Hn.T
    out[name] = numpyro.deterministic(f"{name}_new", total)
    return out


def _exact_model(name, named, X, y, noise_variance, mean, X_given, X_new):
    """``marginal_spectral_gp(..., exact=True)``: the dense covariance's site and, with X_new, the exact
    conditional draws (:mod:`~ppl_sparsegp.approximations.exact_marginal`); the same site names. ``mean``
    is (mean_basis, mean_prior, mean_basis_new), X_given the inputs as passed."""
    mean_basis, mean_prior, mean_basis_new = mean
    kernels = [(gp_name, instantiate(kernel, f"{gp_name}_kernel_") if free_leaves(kernel) else kernel)
               for gp_name, _, kernel in named]
    H, beta_bar, L = _mean_weights(mean_basis, mean_prior, X_given, X.shape[0])
    C = exact_covariance([k for _, k in kernels], X, noise_variance, H, L)
    loc = 0.0 if H is None else H @ beta_bar
    batch = () if y is None else y.shape[:-1]
    numpyro.sample(name, ExactMarginalGaussian(C, loc, batch_shape=batch), obs=y)
    if X_new is None:
        return None
    key = _draw_key(y)
    X_new, X_new_given = _as_inputs(X_new, "X_new"), X_new
    Hn = None if H is None else _mean_basis_new(mean_basis, mean_basis_new, X_new_given, X_new.shape[0], H.shape[1])
    fs, beta = exact_conditional_draw([k for _, k in kernels], X, X_new, C, y - loc, key, H=H, L=L,
                                      beta_bar=beta_bar)
    out, total = {}, 0.0
    for (gp_name, _), f in zip(kernels, fs):
        out[gp_name] = numpyro.deterministic(f"{gp_name}_new", f)
        total = total + f
    if Hn is not None:
        beta = numpyro.deterministic(f"{name}_beta", beta)
        total = total + beta @ Hn.T
    out[name] = numpyro.deterministic(f"{name}_new", total)
    return out


def _warn_lost_statistics(y, parts, H, basis_is_callable):
    """Warn when only y or the mean basis, traced, keeps the model off the statistics path. jax.numpy inside
    a model run under jit makes an array computed from constant data a tracer, which the library cannot
    evaluate (measured at N = 449, M' = 72 and 140: 1.51x and 2.69x the hand-written density's gradient);
    a callable basis is evaluated at compile time, so it is traced only where it uses traced values."""
    gp_parts = parts[:-1] if H is not None else parts
    if y is None or not all(is_concrete(p.basis) for p in gp_parts):
        return
    why = []
    if not is_concrete(y):
        why.append("y is traced (computed with jax.numpy inside the model, or from sampled values): compute it "
                   "with NumPy or outside the model")
    if H is not None and not is_concrete(H) and basis_is_callable:
        why.append("mean_basis(X) is traced: the function uses a sampled value or an array computed with "
                   "jax.numpy inside the model (traced under jit); expected if the mean depends on sampled "
                   "values, else build what it uses from its argument or with NumPy")
    elif H is not None and not is_concrete(H):
        why.append("mean_basis is traced: an array computed with jax.numpy inside a model run under jit (NUTS, "
                   "SVI) is traced even from constant data, and cannot be evaluated; pass the basis as a function "
                   "of the inputs, e.g. mean_basis=lambda t: jnp.stack([jnp.ones_like(t), t], -1), which is "
                   "evaluated at X when the model is traced (or build the array with NumPy), unless it depends "
                   "on sampled values")
    if why:
        warn_user(f"marginal_spectral_gp: each gradient costs O(N M'²) instead of O(M'³) from statistics "
                  f"computed once, because {'; and '.join(why)}")
