"""Model traces for the diagnostics: the one helper that :mod:`~ppl_sparsegp.diagnostics.inference_data`
(the pointwise terms of ``marginal_spectral_gp``) and :mod:`~ppl_sparsegp.diagnostics.refinement` share,
below both so that no import circle closes between them."""
from __future__ import annotations

from numpyro import handlers


def model_trace(model, draw, args, kwargs):
    """The trace of ``model(*args, **kwargs)`` with the sites in ``draw`` substituted (seeded, blocked)."""
    with handlers.block(), handlers.seed(rng_seed=0), handlers.substitute(data=draw):
        return handlers.trace(model).get_trace(*args, **kwargs)
