"""The shared feature module: inducing features and the ``Kuu`` / ``Kuf`` dispatch.

A feature family is a :class:`InducingFeature` subclass plus registrations::

    @Kuu.register(MyFeatures, Matern32)
    def _(feature, kernel): return DiagPlusLowRank(...)

    @Kuf.register(MyFeatures, Matern32)
    def _(feature, kernel, X): return ...          # (M, N) array

Lookup walks the method resolution orders of the feature and kernel types (feature first), in the
manner of GPflow's ``covariances`` dispatch. The approximations only ever call ``Kuu``, ``Kuf`` and
:func:`ppl_sparsegp.conditionals.conditional`, so a new family needs no change elsewhere.
"""
from __future__ import annotations

from .._module import Module

__all__ = ["InducingFeature", "Dispatcher", "Kuu", "Kuf"]


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

    def check_inputs(self, X, name: str = "X"):
        """Validate inputs for this feature (domain checks); returns X. Families override."""
        return X


class Dispatcher:
    """Multiple dispatch on ``(type(feature), type(kernel))`` by method resolution order."""

    def __init__(self, name: str):
        self.name = name
        self.registry: dict = {}

    def register(self, feature_type, kernel_type):
        def decorator(fn):
            self.registry[(feature_type, kernel_type)] = fn
            return fn
        return decorator

    def dispatch(self, feature, kernel):
        for F in type(feature).__mro__:
            for K in type(kernel).__mro__:
                fn = self.registry.get((F, K))
                if fn is not None:
                    return fn
        supported = sorted({f"({F.__name__}, {K.__name__})" for F, K in self.registry
                            if isinstance(feature, F)})
        raise NotImplementedError(
            f"{self.name} is not defined for feature {type(feature).__name__} with kernel "
            f"{type(kernel).__name__}; supported kernels for this feature: "
            f"{', '.join(supported) or 'none'}")

    def __call__(self, feature, kernel, *args, **kwargs):
        return self.dispatch(feature, kernel)(feature, kernel, *args, **kwargs)


Kuu = Dispatcher("Kuu")
Kuu.__doc__ = "Kuu(feature, kernel) -> LinearOperator: covariance of the inducing variables."
Kuf = Dispatcher("Kuf")
Kuf.__doc__ = "Kuf(feature, kernel, X) -> (M, N) array: cross-covariance cov(u, f(X))."
