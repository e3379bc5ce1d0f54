"""The entry checks of the own-model primitives (:func:`~ppl_sparsegp.spectral_gp`,
:func:`~ppl_sparsegp.marginal_spectral_gp`): a bad input is refused before any computation, with a
message that names the argument and the fix, instead of an error from JAX or NumPyro further down or a
silently wrong density (the table of ``tests/validation/test_bad_input.py``)."""
from __future__ import annotations

import jax.numpy as jnp
import numpyro
from numpyro import handlers
from numpyro.distributions import Distribution

from ..features.base import InducingFeature
from ..kernels import Kernel
from ..numpyro_internals import handler_stack
from ..parameters import Param, free_leaves, free_sites


def enclosing_plates() -> list:
    """``(name, size, dim)`` of the ``numpyro.plate`` contexts around the current call, innermost first."""
    return [(h.name, h.subsample_size, h.dim) for h in reversed(handler_stack())
            if isinstance(h, numpyro.plate)]


def check_pair(feature, kernel, what: str, *, exact: bool = False):
    """One GP's (feature, kernel): their types, in this order; the family's rule for the template's free
    hyperparameters (:meth:`~ppl_sparsegp.features.InducingFeature.check_free_hyperparameters`: VFF fixes a
    periodic kernel's period). With ``exact`` (the dense reference) the feature may be None."""
    if isinstance(feature, Kernel) and isinstance(kernel, InducingFeature):
        raise TypeError(f"{what}: got ({type(feature).__name__}, {type(kernel).__name__}) as (feature, kernel): "
                        "the feature comes first; swap them")
    if not isinstance(feature, InducingFeature) and not (exact and feature is None):
        raise TypeError(f"{what}: the feature must be an InducingFeature (FourierFeatures, InducingPoints, ...), "
                        f"got {type(feature).__name__}")
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{what}: the kernel must be a Kernel (e.g. Matern32(1.0, 0.3) or a template with "
                        f"priors), got {type(kernel).__name__}")
    if feature is not None:
        feature.check_free_hyperparameters(kernel, what)  # the family's rule (VFF: a periodic kernel's period)


def check_new_sites(sites, name: str):
    """Refuse a site that the model's trace already holds (two calls with one ``name``), before NumPyro's
    duplicate-site assertion."""
    for h in handler_stack():
        if isinstance(h, handlers.trace):
            taken = [s for s in sites if s in h.trace]
            if taken:
                raise ValueError(f"the model already has a site named {taken[0]!r}: two spectral_gp / "
                                 f"marginal_spectral_gp calls with the name {name!r}, or a site of your own of "
                                 f"that name? Give each call its own name")


def template_sites(kernel, prefix: str) -> list:
    """The sites a kernel template adds (its priors checked on the way, :func:`free_sites`)."""
    return list(free_sites(kernel, prefix)) if free_leaves(kernel) else []


def check_template_outside_plates(kernel, prefix: str, *, batched: bool, shared_only: bool):
    """A template's priors inside ``numpyro.plate`` are sampled once per output: right for
    ``batched_kernel=True``, a shape error or a wrong model otherwise (the hyperparameters are shared)."""
    plates = enclosing_plates()
    if not plates or batched or not free_leaves(kernel):
        return
    sites = ", ".join(template_sites(kernel, prefix))
    name, size, _ = plates[0]
    fix = ("" if shared_only else ", or pass batched_kernel=True for one set of hyperparameters per output")
    raise ValueError(f"the kernel template's priors ({sites}) would be sampled inside numpyro.plate({name!r}, "
                     f"{size}), one value per output, but the hyperparameters are shared by the outputs: sample "
                     f"them outside the plate (draw the values with numpyro.sample before the plate and pass a "
                     f"concrete kernel, e.g. Matern32(1.0, ell)){fix}")


def check_lengthscale_dims(kernel, D: int, what: str):
    """A lengthscale (sampled or given) with more entries than X has columns (a 2-D prior on 1-D features)."""
    ls = getattr(kernel, "lengthscale", None)
    if ls is None or isinstance(ls, (Distribution, Param)) or jnp.ndim(ls) == 0:
        return
    if jnp.size(ls) not in (1, D):
        raise ValueError(f"{what}: the kernel's lengthscale has shape {jnp.shape(ls)} but X has D = {D} input "
                         f"dimension(s): give one lengthscale (a scalar prior, e.g. dist.LogNormal(0.0, 1.0)) or one "
                         f"per input column (shape ({D},))")


def check_observations_in_plates(y, name: str):
    """y inside ``numpyro.plate``\\ s needs one row per output: a y of shape (N,) under a plate of K would be
    counted K times (the same log density per output)."""
    batch = tuple(jnp.shape(y)[:-1])
    for plate, size, dim in enclosing_plates():
        if len(batch) < -dim or batch[dim] != size:
            want = tuple(size if i == len(batch) + dim else b for i, b in enumerate(batch)) if len(batch) >= -dim \
                else (size,) + (1,) * (-dim - 1 - len(batch)) + batch
            want = want + (jnp.shape(y)[-1],)
            raise ValueError(f"y has shape {jnp.shape(y)} but {name!r} is observed inside numpyro.plate({plate!r}, "
                             f"{size}) (dim {dim}): each output needs its own row of y, or the same observations "
                             f"are counted {size} times. Give y of shape {want}; if every output sees the same "
                             f"observations, say so: y = jnp.broadcast_to(y, {want})")


def check_marginal_gps(name: str, named: list, *, exact: bool = False):
    """marginal_spectral_gp's GPs ``[(gp name, feature, kernel)]``: each pair, names that clash neither
    with the observed site nor with the model's other sites, templates outside plates."""
    sites = [name, f"{name}_noise"]
    for gp_name, feature, kernel in named:
        check_pair(feature, kernel, f"gps[{gp_name!r}]" if gp_name != f"{name}_gp0" else "gps", exact=exact)
        if gp_name == name:
            raise ValueError(f"the GP name {gp_name!r} is also the observed site's name {name!r} (their sites "
                             f"'{name}_new' would clash): name the GPs differently, e.g. gps={{'trend': (feature, "
                             f"kernel)}}, or the observed site")
        check_template_outside_plates(kernel, f"{gp_name}_kernel_", batched=False, shared_only=True)
        sites += template_sites(kernel, f"{gp_name}_kernel_")
    check_new_sites(sites, name)


def check_noise_shape(noise_scale):
    """σ is one number, shared by the observations and by the outputs of enclosing plates."""
    if jnp.shape(noise_scale):
        raise ValueError(f"noise_scale must be one standard deviation (a scalar, shared by every observation and "
                         f"output), got shape {jnp.shape(noise_scale)}; sample a noise prior outside any plate. For "
                         f"noise that varies with the input or the output, use spectral_gp with dist.Normal(f, noise) "
                         f"instead")
