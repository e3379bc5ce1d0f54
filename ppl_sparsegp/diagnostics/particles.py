"""Stein particle results: an InferenceData of the particles and their convergence and diversity."""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np

from ..validation import ArrayOf, InstanceOf, OrNone, validated
from ._arviz import az

__all__ = ["stein_inference_data", "stein_diagnostics"]


@validated
def stein_inference_data(result: Annotated[Any, InstanceOf("ppl_sparsegp.stein.SteinResult",
                                                           what="a SteinResult (fit_msrfr, fit_stein)")],
                         gp: Annotated[Any, OrNone(InstanceOf("ppl_sparsegp.approximations.spectrum.SparseSpectrumGP"))]
                         = None, X: Annotated[Any, OrNone(ArrayOf(rank=(1, 2)))] = None,
                         y: Annotated[Any, OrNone(ArrayOf(rank=1))] = None, *,
                         attrs: Annotated[dict | None, OrNone(InstanceOf(dict))] = None) -> az.InferenceData:
    """ArviZ InferenceData of a Stein particle posterior (a :class:`~ppl_sparsegp.stein.SteinResult`).

    ``posterior``: particle sites with dims ``(chain=1, draw=1, particle, ...)`` (frequencies:
    ``particle, frequency, input_dim``) and the shared parameters without a particle dim;
    ``sample_stats``: ``stein_force`` (the force norm per step, dim ``step``) and, with gp/X/y (a
    :class:`~ppl_sparsegp.SparseSpectrumGP` and its training data), ``log_marginal_likelihood`` per
    particle. ``attrs`` (e.g. ``{"training_time_s": ...}``, timed by the caller) are stored on the
    posterior group.

    :param result: a :class:`~ppl_sparsegp.stein.SteinResult`.
    :param gp: optionally the :class:`~ppl_sparsegp.SparseSpectrumGP`; ``X``, ``y`` its training data.
    :param attrs: stored on the posterior group.
    :returns: an :class:`arviz.InferenceData`.
    :raises ValueError: when only some of gp, X and y are given (the per-particle evidence needs all three).
    """
    given = [n for n, v in (("gp", gp), ("X", X), ("y", y)) if v is not None]
    if given and len(given) < 3:
        raise ValueError(f"stein_inference_data: gp, X and y go together (the per-particle log marginal likelihood "
                         f"needs all three), got only {', '.join(given)}")

    def named_dims(name, value, particle):
        lead = ["particle"] if particle else []
        rest = list(jnp.shape(value))[1 if particle else 0:]
        if name in ("feature_frequencies", "omega") and len(rest) == 2:
            return lead + ["frequency", "input_dim"]
        return lead + [f"{name}_dim_{i}" for i in range(len(rest))]

    posterior, dims = {}, {}
    for name, v in result.particles.items():
        posterior[name] = np.asarray(v)[None, None]
        dims[name] = named_dims(name, v, True)
    for name, v in result.shared.items():
        if name in posterior or name.endswith("_map"):
            continue
        posterior[name] = np.asarray(v)[None, None]
        dims[name] = named_dims(name, v, False)
    stats = {"stein_force": np.asarray(result.losses)[None, None]}
    dims["stein_force"] = ["step"]
    if gp is not None and X is not None and y is not None:
        lml = jax.lax.map(lambda v: gp.log_marginal_likelihood(v, X, y), result.values())
        stats["log_marginal_likelihood"] = np.asarray(lml)[None, None]
        dims["log_marginal_likelihood"] = ["particle"]
    idata = az.from_dict(posterior=posterior, sample_stats=stats, dims=dims)
    idata.posterior.attrs["inference"] = "SteinVI (point-mass particles: SVGD)"
    idata.posterior.attrs.update(attrs or {})
    return idata


@validated
def stein_diagnostics(idata: Annotated[Any, InstanceOf("arviz.InferenceData", what="an arviz.InferenceData (from "
                                                                                   "stein_inference_data)")],
                      site: Annotated[str, InstanceOf(str, what="a site name (a string)")] = "feature_frequencies"
                      ) -> dict:
    """Convergence and diversity of a Stein particle posterior (from :func:`stein_inference_data`).

    :param idata: the InferenceData of :func:`stein_inference_data`.
    :param site: the particle site whose spread is measured.

    :returns: ``num_particles``; ``stein_force_initial`` / ``stein_force_final`` (norm of the update
        direction; it should fall and level off); ``particle_distance_min`` / ``_mean`` (root-mean-square
        difference per entry between two particles: near 0 means particles collapsed onto each other);
        with per-particle log marginal likelihoods, their ``lml_mean`` / ``lml_sd`` and ``lml_weight_ess``
        (effective number of particles if they were weighted by evidence: 1 = one particle dominates).
    """
    if "posterior" not in idata.groups() or site not in idata.posterior:
        have = list(idata.posterior.data_vars) if "posterior" in idata.groups() else []
        raise ValueError(f"stein_diagnostics: no particle site {site!r} in the posterior (it has {have}); pass "
                         "site= or the InferenceData of stein_inference_data")
    W = np.asarray(idata.posterior[site].values[0, 0])
    P = W.shape[0]
    flat = W.reshape(P, -1)
    d = np.sqrt(np.mean((flat[:, None] - flat[None]) ** 2, axis=-1))
    off = d[~np.eye(P, dtype=bool)]
    force = np.asarray(idata.sample_stats["stein_force"].values).reshape(-1)
    out = {"num_particles": int(P), "stein_force_initial": float(force[0]), "stein_force_final": float(force[-1]),
           "particle_distance_min": float(off.min()) if P > 1 else 0.0,
           "particle_distance_mean": float(off.mean()) if P > 1 else 0.0}
    if "log_marginal_likelihood" in idata.sample_stats:
        lml = np.asarray(idata.sample_stats["log_marginal_likelihood"].values).reshape(-1)
        w = np.exp(lml - lml.max())
        w /= w.sum()
        out.update(lml_mean=float(lml.mean()), lml_sd=float(lml.std()), lml_weight_ess=float(1.0 / np.sum(w ** 2)))
    return out
