"""Adam with decoupled weight decay (:class:`AdamW`) and per-parameter step sizes, as a NumPyro optimiser
(the optimiser of Stein random feature regression, :mod:`ppl_sparsegp.stein`)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
from numpyro.optim import Adam

from ..validation import AnyOf, IsCallable, NonNegative, Positive, Real, validated

_DECAY_RATE = Annotated[float, Real(0.0, 1.0, high_open=True)]

__all__ = ["AdamW"]

#: AdamW's state: ``(step, (params, m, v))``, each of the three a dict by param name
AdamWState = tuple[jax.Array, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]


class AdamW(Adam):
    r"""Adam with decoupled weight decay [1] and optional per-parameter step sizes:
    :math:`\theta \leftarrow \theta - \eta_{\text{name}}(\hat m/(\sqrt{\hat v}+\epsilon) + \lambda\theta)`
    (optax's ``chain(scale_by_adam(), add_decayed_weights(λ), scale(-η))``, the authors' optimiser).

    A :class:`numpyro.optim.Adam` whose public ``init``, ``update`` and ``get_params`` (the methods SVI,
    SteinVI and :func:`~ppl_sparsegp.stein.svgd` call; ``eval_and_update`` goes through them) implement the
    rule above, as numpyro's own ``ClippedAdam`` overrides ``update``. The state is ``(step, (params, m, v))`` with
    params a dict by name.

    :param step_size: η for every parameter, or a callable ``name -> η`` (by the param's name).
    :param weight_decay: λ (default 0: plain Adam).
    :param b1: the decay rate of the first-moment average m (default 0.9).
    :param b2: the decay rate of the second-moment average v (default 0.999).
    :param eps: ε, added to :math:`\sqrt{\hat v}` in the denominator (default 1e-8).

    References:
        1. Loshchilov, Hutter (2019), Decoupled weight decay regularization (AdamW).
    """

    @validated
    def __init__(self, step_size: Annotated[Any, AnyOf(Positive.__metadata__[0], IsCallable())],
                 weight_decay: NonNegative = 0.0, b1: _DECAY_RATE = 0.9, b2: _DECAY_RATE = 0.999,
                 eps: Positive = 1e-8) -> None:
        # the parent's jax rule is never used: init, update and get_params below replace it
        super().__init__(1.0, b1=b1, b2=b2, eps=eps)
        self.lr = step_size if callable(step_size) else (lambda name: step_size)
        self.weight_decay, self.b1, self.b2, self.eps = weight_decay, b1, b2, eps

    def init(self, params: dict[str, Any]) -> AdamWState:
        """The state ``(0, (params, m = 0, v = 0))`` for ``params`` ``{name: array or pytree}``."""
        zeros = jax.tree.map(jnp.zeros_like, params)
        return jnp.array(0), (params, zeros, zeros)

    def update(self, g: dict[str, Any], state: AdamWState, value: Optional[jax.Array] = None) -> AdamWState:
        """One AdamW step with the gradients ``g`` (a dict like the params): the rule of the class docstring.
        ``value`` (the loss, passed by ``eval_and_update``) is unused."""
        i, (params, m, v) = state
        b1, b2, eps, weight_decay = self.b1, self.b2, self.eps, self.weight_decay
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g ** 2, v, g)
        t = i + 1
        new = {}
        for name in params:
            m_hat = jax.tree.map(lambda x: x / (1 - b1 ** t), m[name])
            v_hat = jax.tree.map(lambda x: x / (1 - b2 ** t), v[name])
            new[name] = jax.tree.map(
                lambda p, a, b: p - self.lr(name) * (a / (jnp.sqrt(b) + eps) + weight_decay * p),
                params[name], m_hat, v_hat)
        return i + 1, (new, m, v)

    def get_params(self, state: AdamWState) -> dict[str, Any]:
        """The params ``{name: array or pytree}`` held in ``state``."""
        return state[1][0]
