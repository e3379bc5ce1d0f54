"""Step-dependent schedules: the cyclical annealing of SVGD's driving term (:func:`cyclical_annealing`)."""
from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp

from ..validation import ArrayOf, Count, NonNegative, validated

__all__ = ["cyclical_annealing"]


@validated
def cyclical_annealing(t: Annotated[Any, ArrayOf(read=False)], num_steps: Count, num_cycles: Count = 5,
                       power: NonNegative = 0.0) -> jax.Array:
    r""":math:`\gamma(t) = (\operatorname{mod}(t, T/c)/(T/c))^{s}` [1, §1.3]; ``power=0`` gives γ ≡ 1.

    The loss temperature of SVGD's driving term: within each of the c cycles it rises from 0 to nearly 1
    (for s > 0), so the particles first spread by repulsion, then follow the target.

    :param t: the step, 0-based (an int or an array; may be traced).
    :param num_steps: T, the number of steps of the run.
    :param num_cycles: c, the number of cycles over the run (period T/c, not necessarily an integer).
    :param power: s ≥ 0 (0: no annealing).
    :returns: γ(t), a float array of the shape of ``t``: in [0, 1) for s > 0, 1 everywhere for ``power=0``.

    References:
        1. Implementer's notes on Stein random features (``shared/notes/srf.md``, outside the repository):
           the authors' code-only details, this schedule among them.
    """
    period = num_steps / num_cycles
    return jnp.power(jnp.mod(jnp.asarray(t, dtype=jnp.result_type(float)), period) / period, power)


# --------------------------------------------------------------------------------------------------
