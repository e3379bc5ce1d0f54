"""Model traces for the diagnostics: the one helper that :mod:`~ppl_sparsegp.diagnostics.inference_data`
(the pointwise terms of ``marginal_spectral_gp``) and :mod:`~ppl_sparsegp.diagnostics.refinement` share,
below both so that no import circle closes between them."""
from __future__ import annotations

from numpyro import handlers


def model_trace(model, draw, args, kwargs):
    """The trace of ``model(*args, **kwargs)`` with the sites in ``draw`` substituted (seeded, blocked)."""
    with handlers.block(), handlers.seed(rng_seed=0), handlers.substitute(data=draw):
        return handlers.trace(model).get_trace(*args, **kwargs)


def check_draws_match_model(model, model_args: dict, samples: dict, fitted: str = "the fit's model"):
    """Refuse draws for a model whose sample sites are not the draws' (``Predictive`` would draw each
    unmatched site from its prior, silently): a ``ValueError`` naming the draws' sites the model lacks and
    the model's latent sites without draws. ``model_args``: the model's keyword arguments; ``fitted``: the
    model the draws came from, for the message."""
    trace = model_trace(model, {}, (), dict(model_args))
    sites = {n for n, t in trace.items() if t["type"] in ("sample", "deterministic")}
    unknown = sorted(k for k in samples if k not in sites)
    if unknown:
        latent = sorted(n for n, t in trace.items()
                        if t["type"] == "sample" and not t["is_observed"] and n not in samples)
        name = f"{getattr(model, '__module__', '')}.{getattr(model, '__qualname__', type(model).__name__)}"
        raise ValueError(f"the fit's samples hold the site(s) {unknown}, which the model {name} does not have (its "
                         f"sites without draws: {latent}); Predictive would draw those from their prior. Pass the "
                         f"model the fit was made with ({fitted})")
