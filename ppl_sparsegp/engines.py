r"""The library's fitting loops on NumPyro's engines: :func:`fit_svi` (SVI in compiled blocks with
non-finite and divergence detection and NumPyro's progress bar) and :func:`fit_nuts` (NUTS with the
library's defaults), for the library's approximations and a user's own model alike; the command-line
runner (``python -m inference fit``) and the benchmarks call them.

**Divergence** (:class:`SVIDivergenceError`). A step size that is too large (Adam's ``lr``; the
natural-gradient γ of a mean-field or block q without the line search, whose step is a Jacobi iteration
on a coupled posterior: :mod:`ppl_sparsegp.optim.natural_gradients`) makes a *finite* loss grow
geometrically (measured: 812 → 3·10¹⁷ in 30 steps): NaN/inf checks never see it. :func:`fit_svi` watches
the loss in its compiled blocks of steps, on statistics that are scale-free and robust to the noise of a
minibatch or Monte Carlo ELBO:

* the loss's **scale** :math:`s = \max(|\ell_1|, |\ell^*|, \hat\sigma)`: the first step's loss
  :math:`\ell_1`, the best block median so far :math:`\ell^*` (the first loss included), and the loss's
  step-to-step noise :math:`\hat\sigma` (1.4826 × the median absolute deviation of the differences of
  consecutive losses, over √2: the trend of a block cancels in them) of the first block, so that a loss
  near zero is judged by its noise;
* **growth**: the median of a block exceeds the best by more than ``divergence_factor`` × s (default 10³:
  three orders of magnitude of the loss's own size), in two consecutive blocks or in the last one; a
  block median ignores isolated spikes, and a minibatch ELBO's noise is a fraction of s, never 10³ s;
* **end far worse than the start**: the median of the last block (at least 5 steps) exceeds
  :math:`\ell_1` by more than s and more than 3 noise levels of the whole run (a fit that ends worse than
  it began by more than the loss's own magnitude has failed, whatever its path).

Either raises :class:`SVIDivergenceError` with the step, the losses so far, the params at the best block
(the last good ones) and a message naming the likely cause (the step size: ``lr`` or the
natural-gradient γ) and the fix. ``divergence_factor=None`` turns the watch off.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.infer import MCMC  # the hints name it (get_type_hints resolves them)
from numpyro.infer.svi import SVIRunResult

from .approximations.base import GPModel
from .optim import NaturalGradient
from .parameters import as_rng_key
from .validation import (
    AnyOf,
    Count,
    Flag,
    InstanceOf,
    Integer,
    IsCallable,
    MaybeCount,
    OneOf,
    OrNone,
    Positive,
    Real,
    RngKey,
    validated,
)

#: what fit_svi and fit_nuts run: a model function or an approximation (its .model and .guide)
_MODEL = AnyOf(IsCallable(), InstanceOf("ppl_sparsegp.approximations.base.GPModel",
                                        what="an approximation (e.g. a SparseGP)"))
_KWARGS = OrNone(InstanceOf(dict, what="a dict of the model's keyword arguments"))

__all__ = ["NonFiniteLossError", "SVIDivergenceError", "fit_svi", "fit_nuts", "EXTRA_FIELDS"]

#: The NUTS statistics :func:`fit_nuts` records per draw (MCMC's ``extra_fields``).
EXTRA_FIELDS = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size",
                "potential_energy")


class NonFiniteLossError(FloatingPointError):
    """SVI stopped at the first step whose loss or params are not finite (NaN or ±inf).

    :ivar step: that step (1-based); :ivar names: the params that are not finite after it (constrained
        or unconstrained value); :ivar loss: its loss; :ivar params: the params before it (all finite);
        :ivar losses: the losses of the steps before it, (step − 1,).
    """

    def __init__(self, message: str, *, step: int, names: list[str], loss: float, params: dict[str, jax.Array],
                 losses: np.ndarray) -> None:
        super().__init__(message)
        self.step, self.names, self.loss, self.params, self.losses = step, names, loss, params, losses


class SVIDivergenceError(FloatingPointError):
    """SVI stopped because its (finite) loss diverged: it grew by orders of magnitude over its best, or
    ended far worse than it started (module docstring: the rule).

    :ivar step: the last step run (1-based); :ivar losses: the losses of steps 1..step, (step,); :ivar params: the
        params at the end of the best block (the last good ones; the initial params when no block
        improved on the first loss); :ivar best_step: the step those params are from (0: the start).
    """

    def __init__(self, message: str, *, step: int, losses: np.ndarray, params: dict[str, jax.Array],
                 best_step: int) -> None:
        super().__init__(message)
        self.step, self.losses, self.params, self.best_step = step, losses, params, best_step


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class _DivergenceWatch:
    """The divergence rule of the module docstring, fed one block of losses at a time (host side)."""

    def __init__(self, factor, num_steps, init_params):
        self.factor, self.num_steps = factor, num_steps
        self.start = self.best = self.scale = None
        self.best_step, self.best_params, self.flagged = 0, init_params, False

    def update(self, block, end, params, losses, svi, lr):
        """Check the block of losses ending at step ``end``; raise SVIDivergenceError when the rule fires."""
        median = float(np.median(block))
        if self.start is None:
            self.start = self.best = float(block[0])
            self.noise = max(_noise(block), np.finfo(block.dtype).tiny)
        self.scale = max(abs(self.start), abs(self.best), self.noise)
        grown = median - self.best > self.factor * self.scale
        last = end >= self.num_steps
        if grown and (self.flagged or last):
            when = "at the start" if self.best_step == 0 else f"by step {self.best_step}"
            what = (f"the loss grew from its best, {self.best:.6g} ({when}), to a median of "
                    f"{median:.6g} over steps {end - len(block) + 1}-{end}: more than {self.factor:.0e} times "
                    f"its scale {self.scale:.3g}")
            raise self._error(what, end, params, losses, svi, lr)
        self.flagged = grown
        if median < self.best:
            self.best, self.best_step, self.best_params = median, end, params
        if last:
            self._check_end(block, end, params, losses, svi, lr)

    def _check_end(self, block, end, params, losses, svi, lr):
        """The end check: the run's last losses far above its first."""
        tail = losses[-max(len(block), 5):]  # at least 5 losses: a median robust to one outlier
        final = float(np.median(tail))
        if final - self.start > max(self.scale, 3 * _noise(losses)):  # the noise of the whole run
            what = (f"the loss ended far worse than it started: a median of {final:.6g} over steps "
                    f"{end - len(tail) + 1}-{end} against {self.start:.6g} at step 1 (best {self.best:.6g})")
            raise self._error(what, end, params, losses, svi, lr)

    def _error(self, what, end, params, losses, svi, lr):
        message = f"SVI diverged at step {end} of {self.num_steps}: {what}. {_cause_and_fix(svi.optim, lr)}"
        return SVIDivergenceError(message, step=end, losses=losses.copy(), params=self.best_params,
                                  best_step=self.best_step)


def _noise(block):
    """The step-to-step noise of a block of losses: 1.4826 × MAD of consecutive differences / √2."""
    if len(block) < 3:
        return 0.0
    d = np.diff(block)
    return 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)


def _cause_and_fix(optim, lr):
    """The likely cause of a divergence (a step size) and its fix, for the optimiser that ran."""
    if isinstance(optim, NaturalGradient) and not optim.line_search:
        return ("Likely cause: the natural-gradient step size γ (NaturalGradient's gamma, the runner's "
                "--gamma): for a mean-field or block-diagonal q the step is a Jacobi iteration that "
                "overshoots on a coupled posterior at γ near 1. Fix: leave gamma at its default (γ halved "
                "until the step's loss does not rise: drop --gamma), or pass line_search=True, or a smaller "
                "γ (e.g. gamma_ramp())")
    if isinstance(optim, NaturalGradient):
        return ("Likely cause: the learning rate of the optimiser NaturalGradient alternates with (its q "
                "steps cannot raise the loss: they are line-searched). Fix: lower it, e.g. "
                "NaturalGradient(gp, Adam(lr / 10)) (the runner's --lr)")
    rate = f"lr = {lr:g}" if lr is not None else f"the step size of {type(optim).__name__}"
    return (f"Likely cause: the learning rate ({rate}). Fix: lower it, e.g. by a factor of 10 (fit_svi's lr "
            f"or the optimiser's step size; the runner's --lr)")


@validated
def fit_svi(model_or_gp: Annotated[Any, _MODEL], *args, num_steps: Count, rng_key: RngKey, lr: Positive = 0.01,
            optim: Annotated[Any, OrNone(InstanceOf("ppl_sparsegp.numpyro_internals.NumPyroOptim", tuple,
                                                    what="a NumPyro optimiser (e.g. numpyro.optim.Adam(0.01) or "
                                                         "NaturalGradient(gp)) or an optax one"))] = None,
            elbo: Annotated[Any, OrNone(InstanceOf("numpyro.infer.elbo.ELBO",
                                                   what="a NumPyro ELBO (e.g. TraceMeanField_ELBO())"))] = None,
            guide: Optional[Callable[..., Any]] = None, progress: Flag = False,
            model_kwargs: Annotated[Any, _KWARGS] = None,
            block_size: MaybeCount = None,
            divergence_factor: Annotated[Any, OrNone(Real(1.0, None, low_open=True))] = 1e3
            ) -> tuple[SVIRunResult, float]:
    """SVI of ``gp.model`` / ``gp.guide`` (or of the model function ``model_or_gp`` with ``guide``) on
    ``*args``: ``num_steps`` steps of ``optim`` (default ``Adam(lr)``) on ``elbo`` (default
    ``TraceMeanField_ELBO``), NumPyro's :class:`~numpyro.infer.SVI` underneath.

    The steps run in compiled blocks of ``block_size`` (default ``max(num_steps // 20, 1)``, NumPyro's
    progress interval) with ``lax.scan`` (the data enter as arguments, not as constants); after each block
    the losses are copied into one preallocated array and the NumPyro-style progress bar (``init loss``,
    ``avg. loss [i-j]``) advances, so memory does not grow with the steps. Inside a block every step checks
    that its loss and every param (constrained and unconstrained) are finite; the first step that is not
    is not applied, the run stops after its block and :class:`NonFiniteLossError` names the step and the
    params that went non-finite (and carries the last finite params). After each block the divergence
    watch (module docstring) checks the block's losses.

    :param model_or_gp: an approximation with ``.model`` and ``.guide`` (e.g. a
        :class:`~ppl_sparsegp.SparseGP`), or a NumPyro model function (then pass ``guide``).
    :param args: the model's positional arguments (e.g. ``X (N, D), y (N,)``).
    :param num_steps: the SVI steps (a positive int).
    :param rng_key: a JAX PRNG key, or an int (``jax.random.PRNGKey(rng_key)``).
    :param lr: Adam's learning rate when ``optim`` is None (> 0).
    :param optim: a NumPyro optimiser (e.g. :class:`~ppl_sparsegp.optim.NaturalGradient`); default ``Adam(lr)``.
    :param elbo: a NumPyro ELBO (default ``TraceMeanField_ELBO()``).
    :param guide: the guide (default ``model_or_gp.guide``).
    :param progress: show NumPyro's progress bar.
    :param model_kwargs: keyword arguments of the model and guide (e.g. ``batch_size``).
    :param block_size: steps per compiled block (a positive int).
    :param divergence_factor: the growth over the loss's scale that counts as a divergence (> 1; default
        10³); None: no divergence watch.
    :returns: ``(SVIRunResult, seconds)``: params, the final SVI state and the losses; the wall-clock time
        of the run, compilation included.
    :raises NonFiniteLossError: at the first non-finite step.
    :raises SVIDivergenceError: when the loss diverges (the message names the step size to lower).
    :raises ValueError: for a ``num_steps`` or ``block_size`` that is not a positive int, an ``lr`` that is
        not positive, a ``divergence_factor`` not above 1, or no guide.
    """
    from numpyro import optim as optimisers
    from numpyro.infer import SVI, TraceMeanField_ELBO
    from numpyro.infer.svi import SVIRunResult

    num_steps, block, model, guide = _svi_arguments(model_or_gp, guide, num_steps, block_size, lr, optim,
                                                    divergence_factor)
    kwargs = dict(model_kwargs or {})
    svi = SVI(model, guide, optim if optim is not None else optimisers.Adam(lr),
              elbo if elbo is not None else TraceMeanField_ELBO())
    t0 = time.perf_counter()
    state = svi.init(as_rng_key(rng_key), *args, **kwargs)
    names = sorted(svi.get_params(state))
    run_block = jax.jit(_block_runner(svi, names, block, kwargs))
    watch = (None if divergence_factor is None else
             _DivergenceWatch(float(divergence_factor), num_steps, svi.get_params(state)))
    losses = None
    bar = _progress_bar(num_steps) if progress else None
    done = 0
    try:
        while done < num_steps:
            active = min(block, num_steps - done)
            state, block_losses, bad_step, bad_params = run_block(state, active, args)
            block_losses, bad_step = np.asarray(jax.device_get(block_losses)), int(bad_step)
            if losses is None:  # one array for the whole run: nothing grows per step
                losses = np.empty(num_steps, dtype=block_losses.dtype)
            if bad_step >= 0:
                losses[done:done + bad_step] = block_losses[:bad_step]
                raise _non_finite(svi, state, names, done + bad_step + 1, num_steps, float(block_losses[bad_step]),
                                  np.asarray(bad_params), losses[:done + bad_step].copy())
            losses[done:done + active] = block_losses[:active]
            done += active
            if bar is not None:
                bar.update(active)
                bar.set_postfix_str(f"init loss: {losses[0]:.4f}, avg. loss [{done - active + 1}-{done}]: "
                                    f"{float(np.mean(block_losses[:active])):.4f}", refresh=False)
            if watch is not None:
                watch.update(block_losses[:active], done, svi.get_params(state), losses[:done], svi,
                             lr if optim is None else None)
    finally:
        if bar is not None:
            bar.close()
    result = SVIRunResult(svi.get_params(state), state, jnp.asarray(losses))
    jax.block_until_ready(result.params)
    return result, time.perf_counter() - t0


def _svi_arguments(model_or_gp, guide, num_steps, block_size, lr, optim, divergence_factor):
    """fit_svi's checks: ``(num_steps, block, model, guide)``."""
    num_steps = _positive_int("num_steps", num_steps)
    block = min(max(num_steps // 20, 1) if block_size is None else _positive_int("block_size", block_size), num_steps)
    if optim is None and not (isinstance(lr, (int, float, np.floating)) and np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if divergence_factor is not None and not (np.isfinite(divergence_factor) and divergence_factor > 1):
        raise ValueError(f"divergence_factor must be a number > 1 (or None: no divergence watch), "
                         f"got {divergence_factor!r}")
    model = getattr(model_or_gp, "model", model_or_gp)
    guide = getattr(model_or_gp, "guide", None) if guide is None else guide
    if guide is None:
        raise ValueError("fit_svi: no guide: pass a model with .model and .guide (e.g. a SparseGP) or guide=")
    return num_steps, block, model, guide


def _block_runner(svi, names, block, kwargs):
    """``(state, active, args) -> (state, losses, bad_step, bad_params)``: ``block`` steps (the first
    ``active`` of them); none is applied from the first step whose loss or params are not finite."""
    def not_finite(state):
        """Per param (in ``names`` order): True when its constrained or unconstrained value has NaN/inf."""
        free, constrained = svi.optim.get_params(state.optim_state), svi.get_params(state)
        return jnp.stack([~(jnp.all(jnp.isfinite(free[n])) & jnp.all(jnp.isfinite(constrained[n])))
                          for n in names])

    def run_block(state, active, args):
        def body(carry, i):
            state, bad_step, bad_params = carry
            new, loss = svi.update(state, *args, **kwargs)
            flags = not_finite(new)
            live = (i < active) & (bad_step < 0)
            bad = live & (~jnp.isfinite(loss) | jnp.any(flags))
            state = lax.cond(live & ~bad, lambda old, upd: upd, lambda old, upd: old, state, new)
            return (state, jnp.where(bad, i, bad_step), jnp.where(bad, flags, bad_params)), loss

        init = (state, jnp.asarray(-1, jnp.int32), jnp.zeros(len(names), bool))
        (state, bad_step, bad_params), losses = lax.scan(body, init, jnp.arange(block, dtype=jnp.int32))
        return state, losses, bad_step, bad_params

    return run_block


def _progress_bar(total):
    import tqdm

    return tqdm.tqdm(total=total)


def _non_finite(svi, state, names, step, num_steps, loss, flags, losses):
    """The NonFiniteLossError of step ``step`` (1-based); ``state`` is the state before it."""
    bad = [n for n, f in zip(names, flags) if f]
    what = f"the loss is {loss}" if not np.isfinite(loss) else f"the loss is {loss:.6g}"
    if bad:
        what += f" and after it these params are not finite: {', '.join(bad)}"
    else:
        what += " (the params are still finite)"
    last = f"; the last finite loss was {losses[-1]:.6g} at step {step - 1}" if len(losses) else ""
    message = (f"SVI stopped at step {step} of {num_steps}: {what}{last}. Lower the learning rate (--lr), or "
               f"check the data, the priors and the initial values for values that overflow")
    return NonFiniteLossError(message, step=step, names=bad, loss=loss, params=svi.get_params(state),
                              losses=losses)


@validated
def fit_nuts(model: Callable[..., Any] | GPModel, *args, rng_key: RngKey, num_warmup: Annotated[int, Integer(0)],
             num_samples: Count,
             num_chains: Count = 1, target_accept_prob: Annotated[float, Real(0.0, 1.0, low_open=True, high_open=True)]
             = 0.8, max_tree_depth: Count = 10, dense_mass: Flag = False,
             init_strategy: Annotated[Any, OrNone(IsCallable())] = None,
             chain_method: Annotated[Any, OrNone(OneOf("parallel", "sequential", "vectorized"))] = None,
             extra_fields: Annotated[Any, InstanceOf(tuple, list, what="a tuple of field names")] = EXTRA_FIELDS,
             progress: Flag = False, model_kwargs: Annotated[Any, _KWARGS] = None) -> tuple[MCMC, float]:
    """NUTS on ``model`` (a model function, or an approximation: its ``.model``) with ``*args``, through
    NumPyro's :class:`~numpyro.infer.MCMC`.

    :param model: a NumPyro model function or an object with ``.model``.
    :param args: the model's positional arguments (e.g. ``X (N, D), y (N,)``).
    :param rng_key: a JAX PRNG key, or an int (``jax.random.PRNGKey(rng_key)``).
    :param num_warmup: warm-up iterations per chain (an int >= 0).
    :param num_samples: draws per chain (a positive int).
    :param num_chains: chains (a positive int).
    :param target_accept_prob: NUTS's target acceptance probability, in (0, 1).
    :param max_tree_depth: the most tree doublings per iteration (a positive int).
    :param dense_mass: adapt a dense mass matrix (else diagonal).
    :param init_strategy: default ``init_to_median(num_samples=15)``.
    :param chain_method: default ``"parallel"`` when there is a device per chain, else ``"sequential"``.
    :param extra_fields: the statistics recorded per draw (default :data:`EXTRA_FIELDS`).
    :param progress: show NumPyro's progress bar.
    :param model_kwargs: keyword arguments of the model.
    :returns: ``(MCMC, seconds)``: the wall-clock time of ``mcmc.run``, compilation included.
    :raises ValueError: for counts out of range or a ``target_accept_prob`` outside (0, 1).
    """
    from numpyro.infer import MCMC, NUTS, init_to_median

    if isinstance(num_warmup, bool) or not isinstance(num_warmup, (int, np.integer)) or num_warmup < 0:
        raise ValueError(f"num_warmup must be an int >= 0, got {num_warmup!r}")
    num_samples = _positive_int("num_samples", num_samples)
    num_chains = _positive_int("num_chains", num_chains)
    max_tree_depth = _positive_int("max_tree_depth", max_tree_depth)
    if not (isinstance(target_accept_prob, (int, float, np.floating)) and 0 < target_accept_prob < 1):
        raise ValueError(f"target_accept_prob must be in (0, 1), got {target_accept_prob!r}")
    if chain_method is None:
        chain_method = "parallel" if jax.local_device_count() >= num_chains else "sequential"
    kernel = NUTS(getattr(model, "model", model), target_accept_prob=target_accept_prob,
                  max_tree_depth=max_tree_depth, dense_mass=bool(dense_mass),
                  init_strategy=init_to_median(num_samples=15) if init_strategy is None else init_strategy)
    mcmc = MCMC(kernel, num_warmup=int(num_warmup), num_samples=num_samples, num_chains=num_chains,
                chain_method=chain_method, progress_bar=progress)
    t0 = time.perf_counter()
    mcmc.run(as_rng_key(rng_key), *args, extra_fields=tuple(extra_fields), **(model_kwargs or {}))
    jax.block_until_ready(mcmc.get_samples())
    return mcmc, time.perf_counter() - t0
