"""Variational orthogonal features, by their former path: :mod:`~ppl_sparsegp.features.hermite` (Hermite
features), :mod:`~ppl_sparsegp.features.trigonometric` (trigonometric features and their Monte Carlo
estimators) and :class:`~ppl_sparsegp.features.AdditiveOrthogonal` (:mod:`~ppl_sparsegp.features.combinations`).
Kept because models, notebooks and benchmarks import ``ppl_sparsegp.features.orthogonal``."""
from .combinations import AdditiveOrthogonal
from .hermite import HermiteFeatures, hermite_unresolved, hermite_width
from .trigonometric import (
    BASES,
    ESTIMATORS,
    TrigonometricFeatures,
    mc_moments,
    monte_carlo_conditional,
    quadrature_nodes,
)

__all__ = ["HermiteFeatures", "TrigonometricFeatures", "AdditiveOrthogonal", "hermite_width", "hermite_unresolved",
           "mc_moments", "monte_carlo_conditional", "quadrature_nodes", "ESTIMATORS", "BASES"]
