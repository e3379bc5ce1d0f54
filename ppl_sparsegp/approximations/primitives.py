r"""A spectral GP prior primitive for people's own NumPyro models.

``f = spectral_gp("f", feature, kernel, X)`` adds the inducing variables of any feature family as one
sample site and returns the latent function at X, the way ``numpyro.contrib.hsgp`` does for its basis::

    def model(X, y=None):
        ell = numpyro.sample("ell", dist.Gamma(2.0, 2.0))
        feature = FourierFeatures(lower=-1, upper=2, num_frequencies=30)
        f = spectral_gp("f", feature, Matern32(lengthscale=ell), X)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

For SVI on such a model, :func:`inducing_guide` is the matching q over the same site, to be placed in
the user's guide (the SVGP of [2] on the user's own model)::

    # an autoguide for the user's other sites
    auto = AutoNormal(handlers.block(model, hide=["f_v"]))

    def guide(X, y=None):
        auto(X, y)
        # q(v) = N(m, LLᵀ), params f_v_loc, f_v_scale_tril
        inducing_guide("f", feature, Matern32())

    # TraceMeanField_ELBO: the analytic KL for f_v
    svi = SVI(model, guide, numpyro.optim.Adam(0.005), TraceMeanField_ELBO())

Whitened, the guide's kernel only gives Kuu's structure (any concrete kernel of the family will do).
Tested on a heteroscedastic two-GP model against NUTS (``tests/approximations/test_primitives.py``): with 20 000 steps
the posterior means at the data are within 0.08 NUTS sd (median) for f; 3 000 steps leave f 1.8 sd off
where the noise is small, so watch the loss settle.

Whitened (default): :math:`\mathbf v\sim\mathcal N(0, I_{M'})`, :math:`\mathbf u = R\mathbf v`;
centred: :math:`\mathbf u\sim\mathcal N(0, K_{uu})`. The returned f is
:math:`K_{fu}K_{uu}^{-1}\mathbf u`, the projected process [1, §2.4.3]; ``return_variance=True`` also returns
the residual :math:`k_{nn} - [K_{fu}K_{uu}^{-1}K_{uf}]_{nn}`, which an expected log-likelihood can use.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes.
    2. Hensman, Matthews, Ghahramani (2015), Scalable variational Gaussian process classification.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpyro

from ..conditionals import conditional
from ..covariances import Kuu
from ..features.base import current_feature
from ..gaussian import StructuredNormal
from ..linalg import Identity, LinearOperator
from ..parameters import free_leaves, instantiate, is_concrete
from ..sharding import map_rows
from ..validation import AKernel, AName, Flag, validated, warn_user
from . import own_model_checks
from .common import DataInputs, MaybeInputs, MaybeOperator, PrimitiveFeature, as_inputs, project, require_model
from .variational import QFamily, resolve_q_family

__all__ = ["inducing_prior", "inducing_guide", "spectral_gp"]


@validated
def inducing_prior(name: AName, feature: PrimitiveFeature, kernel: AKernel, *, whiten: Flag = True,
                   Kmm: MaybeOperator = None) -> tuple[jax.Array, LinearOperator]:
    r"""Sample the inducing variables: site ``f"{name}_v"`` (whitened) or ``f"{name}_u"`` (centred).

    Whitened, :math:`\mathbf v\sim\mathcal N(0, I_{M'})` (with :math:`\mathbf u = R\mathbf v`, R the square
    root of Kuu); centred, :math:`\mathbf u\sim\mathcal N(0, K_{uu})` (module docstring). Both are a
    :class:`~ppl_sparsegp.gaussian.StructuredNormal`, so the KL to a structured q stays analytic. The site
    records ``(name, feature, nu)`` in its ``infer`` dict for
    :func:`~ppl_sparsegp.diagnostics.refinement.refinement_check`.

    :param name: prefix of the sample site: ``<name>_v`` (whitened) or ``<name>_u`` (centred).
    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (concrete, not a template).
    :param kernel: a concrete kernel (its hyperparameters may be values sampled by the model); only used
        to compute Kuu when ``Kmm`` is not given.
    :param whiten: sample v ~ N(0, I) of size ``Kmm.sqrt_cols`` (default) or u ~ N(0, Kuu) of size
        ``Kmm.size``.
    :param Kmm: the feature's Kuu (a :class:`~ppl_sparsegp.linalg.LinearOperator`) if the caller already
        has it; default ``Kuu(feature, kernel)``.
    :returns: ``(value, Kmm)``: the sampled site value, shape (M',) (or the enclosing plates' batch shape
        followed by M'), and the Kuu operator used.
    :raises NotImplementedError: when the feature family registers no Kuu for the kernel.
    """
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    dtype = Kmm.dtype
    infer = {"ppl_sparsegp_gps": [(name, feature, getattr(kernel, "nu", None))]}  # for refinement_check
    if whiten:
        prior = StructuredNormal(jnp.zeros(Kmm.sqrt_cols, dtype), Identity(Kmm.sqrt_cols, dtype=dtype))
        return numpyro.sample(f"{name}_v", prior, infer=infer), Kmm
    return numpyro.sample(f"{name}_u", StructuredNormal(jnp.zeros(Kmm.size, dtype), Kmm), infer=infer), Kmm




@validated
def spectral_gp(name: AName, feature: PrimitiveFeature, kernel: AKernel, X: DataInputs, *, X_new: MaybeInputs = None,
                whiten: Flag = True,
                return_variance: Flag = False, batched_kernel: Flag = False):
    r"""Add a latent GP with the given inducing features to the current model; return f(X).

    Contract: the returned f is the projected process :math:`K_{fu}K_{uu}^{-1}\mathbf u` (a deterministic
    function of the inducing site, as HSGP's basis expansion is); ``return_variance=True`` also returns the
    residual :math:`k_{nn} - [K_{fu}K_{uu}^{-1}K_{uf}]_{nn}` for a likelihood that integrates it (an
    expected log-likelihood). Every feature family works, for the kernels it registers ``Kuu``/``Kuf``
    for (another kernel raises ``NotImplementedError`` naming the supported ones). Per gradient a sampled
    hyperparameter costs one ``Kuu`` factorisation (O(M) for VFF's diagonal + low rank, O(M³) for
    inducing points) and one M × N ``Kuf``.

    Pass X as the data are (a model argument, or an array built outside the model; a vector for 1-D
    inputs): features whose Kuf does not depend on the hyperparameters (VFF inside its box) then compute
    it once, as a constant of the compiled program. An X computed inside the model (``x[:, None]``
    there) is traced, and Kuf is recomputed at every gradient (measured, 1-D VFF, 61 features, N = 20 000:
    10.7 against 1.4 ms per gradient).

    Under NUTS with a sampled lengthscale, use features whose functions do not move with ℓ (VFF,
    inducing points, :class:`~ppl_sparsegp.features.ImportanceFourierFeatures`): with
    :class:`~ppl_sparsegp.features.RandomFourierFeatures` every frequency scales with 1/ℓ, so the weights
    and ℓ are tangled and the chain mixes poorly (measured: a quarter of the importance features' ESS
    for ℓ, its mean 0.8 posterior sd off).

    :param name: prefix of the sample sites: ``<name>_v`` (whitened) or ``<name>_u``, and, for a kernel
        template, ``<name>_kernel_<field>``.
    :param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (concrete, not a template).
    :param kernel: a kernel: concrete (its hyperparameters may be values sampled by the model) or a
        template whose fields are NumPyro distributions (sampled here as ``<name>_kernel_<field>``) or
        :class:`~ppl_sparsegp.parameters.Param` (``numpyro.param`` sites).
    :param X: inputs (N, D), or (N,) for one input dimension.
    :param X_new: optional inputs at which to predict with the same inducing variables (site
        ``<name>_new`` records f there, so ``numpyro.infer.Predictive`` of the model returns it per
        posterior draw); then the call returns ``(f, f_new)`` (with variances: ``((f, var), (f_new,
        var_new))``). Inputs outside a feature's domain raise, as for X; inputs where the features
        resolve nothing (outside VFF's box) warn with :class:`~ppl_sparsegp.features.base.OutsideDomainWarning`.
    :param whiten: sample v ~ N(0, I) with u = R v (default) or u ~ N(0, Kuu).
    :param return_variance: also return the residual variance.
    :param batched_kernel: one set of hyperparameters per output of the enclosing plate (below).

    **Several latent functions over one basis** (multi-output, hierarchical): call it inside
    ``numpyro.plate("outputs", K)``; the inducing site gets the plate's batch shape (K, M') and f comes
    back as (K, N), at the cost of one ``Kuf`` and one ``Kuu`` for all K (the hyperparameters are shared;
    give each output its own amplitude by scaling f with a per-output site; a kernel template inside the
    plate would sample one value per output, so it is refused: sample before the plate). With
    ``batched_kernel=True`` each output has its own hyperparameters: every kernel hyperparameter with a
    leading axis of the plate's size K holds one value per output (a scalar is shared; a template's
    priors sampled inside the plate give exactly that; for concrete values, per output and per
    dimension, :func:`~ppl_sparsegp.parameters.stack_modules` stacks K kernels), f is the per-output projection
    :math:`K_{fu}^{(k)}K_{uu}^{(k)-1}\mathbf u_k`, and the residual variance comes back (K, N). Whitened only
    (each output's Kuu is then only a factor in its projection). Features whose Kuf does not depend on
    the hyperparameters (VFF inside its box) still compute it once: it is not batched.
    """
    require_model("spectral_gp")
    _check_spectral_gp(name, feature, kernel, batched_kernel)
    feature = current_feature(feature)
    kernel = instantiate(kernel, f"{name}_kernel_") if free_leaves(kernel) else kernel
    _warn_tangled_lengthscale(feature, kernel)
    X = feature.check_inputs(as_inputs(X, "X"))
    if not batched_kernel:
        own_model_checks.check_lengthscale_dims(kernel, X.shape[1], "spectral_gp")
    if batched_kernel:
        project = _batched_projection(name, feature, kernel, whiten)
    else:
        value, Kmm = inducing_prior(name, feature, kernel, whiten=whiten)
        project = partial(_project_rows, feature, kernel, value=value, whiten=whiten, Kmm=Kmm,
                          need_var=return_variance)
    mean, var = project(X)
    out = (mean, var) if return_variance else mean
    if X_new is None:
        return out
    X_new = feature.warn_outside(feature.check_inputs(as_inputs(X_new, "X_new"), "X_new"), "X_new", kernel=kernel)
    mean_new, var_new = project(X_new)
    numpyro.deterministic(f"{name}_new", mean_new)
    return out, ((mean_new, var_new) if return_variance else mean_new)


def _check_spectral_gp(name, feature, kernel, batched_kernel):
    """The entry checks (:mod:`.own_model_checks`): the pair, a name not taken, a template outside plates."""
    own_model_checks.check_pair(feature, kernel, "spectral_gp")
    own_model_checks.check_new_sites(
        [f"{name}_v", f"{name}_u"] + own_model_checks.template_sites(kernel, f"{name}_kernel_"), name)
    own_model_checks.check_template_outside_plates(kernel, f"{name}_kernel_", batched=batched_kernel, shared_only=False)


def _warn_tangled_lengthscale(feature, kernel):
    """Random Fourier features scale their frequencies with 1/ℓ: with a lengthscale that is sampled (a
    traced value) NUTS does not mix (measured: R-hat 1.85, bulk ESS 3 for ℓ), so say so (a family says
    it by :attr:`~ppl_sparsegp.features.InducingFeature.moves_with_lengthscale`)."""
    ls = getattr(kernel, "lengthscale", None)
    if feature.moves_with_lengthscale and ls is not None and not is_concrete(ls):
        warn_user("spectral_gp with RandomFourierFeatures and a sampled lengthscale: the frequencies scale "
                  "with 1/ℓ, so the weights and ℓ are tangled and NUTS mixes poorly (measured: R-hat 1.85, "
                  "bulk ESS 3 for ℓ); use ImportanceFourierFeatures.from_proposal(kernel at ℓ_min, ...), whose "
                  "frequencies stay put (fine to ignore for SVI or MAP of ℓ)", UserWarning)


def _batched_projection(name, feature, kernel, whiten):
    """Sample the inducing site for one set of hyperparameters per output of the enclosing plate(s);
    return ``X -> (mean, var)``, each (K, N), the per-output projections (vmapped over the outputs)."""
    if not whiten:
        raise ValueError("batched_kernel=True needs whiten=True (a centred prior would need one Kuu per "
                         "output in the inducing site's distribution)")
    leaves = jax.tree.leaves(kernel)
    K = next((jnp.shape(v)[0] for v in leaves if jnp.ndim(v) >= 1), None)
    if K is None:
        raise ValueError("batched_kernel=True but no kernel hyperparameter has a leading output axis: "
                         "sample them inside the numpyro.plate (or pass shape (K,) values)")
    bad = [jnp.shape(v) for v in leaves if jnp.ndim(v) >= 1 and jnp.shape(v)[0] != K]
    if bad:
        raise ValueError(f"batched_kernel=True: every batched hyperparameter needs the same leading axis "
                         f"(the plate's size {K}), got shapes {[(K,)] + bad}")
    kernels = jax.tree.map(lambda v: jnp.broadcast_to(v, (K,) + jnp.shape(v)[1:]), kernel)  # scalars shared
    first = jax.tree.map(lambda v: v[0], kernels)
    value, _ = inducing_prior(name, feature, first, whiten=True)  # the structure (sqrt_cols) only
    if jnp.shape(value)[:1] != (K,):
        raise ValueError(f"batched_kernel=True needs spectral_gp inside a numpyro.plate of size {K} (the "
                         f"hyperparameters' leading axis); the inducing site has shape {jnp.shape(value)}")

    def one(k, v, Xs):
        return conditional(feature, k, Xs, v, whiten=True, Kmm=Kuu(feature, k))

    return lambda Xs: jax.vmap(one, in_axes=(0, 0, None))(kernels, value, Xs)


def _project_rows(feature, kernel, X, *, value, whiten, Kmm, need_var=True):
    """:func:`~.common.project` block by block where the rows of X live (one device's Kuf block when X is
    sharded over a data mesh: :func:`~ppl_sparsegp.sharding.map_rows`); the mean's row axis follows the
    inducing value's batch dimensions. Without ``need_var`` the variance is None (not computed)."""
    lead = jnp.ndim(value) - 1
    if not need_var:
        return map_rows(lambda Xs: project(feature, kernel, Xs, value, whiten, Kmm, False), X, out_rows=lead), None
    return map_rows(lambda Xs: project(feature, kernel, Xs, value, whiten, Kmm), X, out_rows=(lead, 0))




@validated
def inducing_guide(name: AName, feature: PrimitiveFeature, kernel: AKernel, *, whiten: Flag = True,
                   q_cov: QFamily = "auto", Kmm: MaybeOperator = None) -> jax.Array:
    """The variational q over :func:`inducing_prior`'s site, for the user's own guide: a Gaussian from a
    q family (``"auto"``, ``"full"``, ``"diag"``, ``"block-diag"``, ``"two-kron"`` or a callable, see
    :mod:`~ppl_sparsegp.approximations.variational`) with params ``<site>_loc`` etc., initialised at the
    prior. Under ``TraceMeanField_ELBO`` the KL to :func:`spectral_gp`'s prior is analytic.

    :param name: the name given to :func:`inducing_prior` / :func:`spectral_gp` in the model: the site is
        ``<name>_v`` (whitened) or ``<name>_u`` (centred), and the params are named after the site
        (``<site>_loc``, ``<site>_scale_tril``, ... as the family defines them).
    :param feature: the same feature as in the model (concrete).
    :param kernel: a concrete kernel (in a guide: point values of the hyperparameters, e.g. from
        ``numpyro.param``; only Kuu's structure and, centred, its value are used).
    :param whiten: as in the model: q over v, of size ``Kmm.sqrt_cols`` (default), or over u, of size
        ``Kmm.size``.
    :param q_cov: the covariance family of q (see
        :func:`~ppl_sparsegp.approximations.variational.resolve_q_family`): ``"auto"`` (chosen from Kuu's
        structure), ``"full"``, ``"diag"``, ``"block-diag"``, ``"two-kron"``, or a callable
        ``(site, dim, Kmm, whiten) -> (loc, covariance operator)``.
    :param Kmm: Kuu (a :class:`~ppl_sparsegp.linalg.LinearOperator`) if the caller already has it; default
        ``Kuu(feature, kernel)``.
    :returns: the sampled value of the site (v whitened, u centred), shape (M',).
    :raises ValueError: for a ``q_cov`` string that names no family.
    :raises NotImplementedError: when the feature family registers no Kuu for the kernel.
    """
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    site = f"{name}_v" if whiten else f"{name}_u"
    dim = Kmm.sqrt_cols if whiten else Kmm.size
    loc, cov = resolve_q_family(q_cov)(site, dim, Kmm, whiten)
    return numpyro.sample(site, StructuredNormal(loc, cov))
