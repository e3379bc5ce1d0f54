"""The base class of inducing features. A family is a subclass plus its registrations in the
dispatchers of :mod:`ppl_sparsegp.covariances` (``Kuu``, ``Kuf``, and where its structure demands
``conditional`` and ``sufficient_statistics``), in its own file under ``features/``."""
from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..parameters import Module

__all__ = ["InducingFeature", "OutsideDomainWarning", "Float32Warning"]


class OutsideDomainWarning(UserWarning):
    """Predictions asked for where the features resolve nothing (e.g. outside VFF's box): there the
    projected process reverts to the prior, which the exact GP does not."""


class Float32Warning(UserWarning):
    """A float32 computation past the limit where it was measured to hold against float64 (the README's
    float32 table, ``inference/benchmarks/float32.py``): the result is finite but off."""


def warn_float32(dtype, limited: bool, message: str):
    """Warn (:class:`Float32Warning`) when ``dtype`` is float32 and the family is past its measured limit
    (``limited``); ``message`` names the limit, what was measured beyond it and the fix. At trace time
    under jit the warning is raised once per compilation."""
    if limited and jnp.dtype(dtype) == jnp.float32:
        warnings.warn(message + "; use float64 (jax_enable_x64 with float64 inputs and hyperparameters)",
                      Float32Warning, stacklevel=4)


class InducingFeature(Module):
    """Base class of inducing features (inter-domain or inducing points)."""

    @property
    def num_features(self) -> int:
        """M, the number of inducing variables."""
        raise NotImplementedError

    def __len__(self):
        return self.num_features

    def check_kernel(self, kernel):
        """Refuse a kernel (template or value) this family cannot use for every value its free
        hyperparameters may take (from its structure, so also under jit). Families override."""

    @property
    def monte_carlo(self) -> bool:
        """Whether ``conditional`` estimates this feature's Kuf by Monte Carlo when given a ``key``
        (the approximations then pass one inside an ELBO). Families override."""
        return False

    def check_inputs(self, X, name: str = "X"):
        """Validate inputs for this feature (domain checks); returns X. Families override."""
        return X

    def warn_outside(self, X, name: str = "X_new"):
        """Warn (:class:`OutsideDomainWarning`) when concrete prediction inputs lie where the features
        resolve nothing, naming the fix; returns X. The documented choice is a warning, not an error:
        near the edge the prediction is still usable, and the caller may want the prior there. Families
        with a bounded domain override (VFF: its box)."""
        return X
