r"""Natural-gradient steps for the Gaussian q(u) of a sparse GP, alternating with any NumPyro optimiser
on every other parameter, inside NumPyro's own :class:`~numpyro.infer.SVI`.

Choice: an **optimiser object** that ``SVI`` accepts (:class:`NaturalGradient`, a subclass of NumPyro's optimiser
base class), not a separate ``fit`` loop. ``SVI.update`` hands its optimiser the
step's loss as a function of the (unconstrained) params, with the step's PRNG key (and so its minibatch
and Monte Carlo draws) fixed; that is all a natural-gradient step needs, so ``SVI.run``, ``SVI.update``,
``stable_update``, ``init_params``, the progress bar and every runner built on ``SVI`` work unchanged,
with any ELBO. :class:`AnalyticELBO` is the matching loss: the SVGP bound with the expectation over q(u)
in closed form (Gauss–Hermite where the likelihood has no closed form), so that the step is exact (a
Gaussian likelihood on the full batch lands on the optimal q in one step with γ = 1); with
``TraceMeanField_ELBO`` the step is a stochastic natural gradient (Monte Carlo over u).

**The step** [1, 2] (q(v) = N(m, S) over the M inducing coordinates, whitened or not). Natural parameters
:math:`\theta = (S^{-1}m, -\tfrac12 S^{-1})`, expectation parameters :math:`\eta = (m, S + mm^\top)`;
the natural gradient with respect to θ is the ordinary gradient with respect to η, so

.. math::
    S_{new}^{-1} = S^{-1} - 2\gamma\,\mathrm{sym}(\partial\mathcal L/\partial\eta_2), \qquad
    S_{new}^{-1}m_{new} = S^{-1}m + \gamma\,\partial\mathcal L/\partial\eta_1 .

:math:`\partial\mathcal L/\partial\eta` follows from one reverse-mode pass through the loss in (m, L),
L = chol S (the cost of one ordinary gradient), by the Cholesky map's derivative, with no factorisation;
then per trial γ one Cholesky of an M × M matrix (full q: M³/3; block-diagonal q: one per block,
batched; mean-field q: O(M)), one triangular inverse and one product of triangular factors
(``optim/natural_gradients_algebra.py``). Nothing here touches Kuu: its
structure is used by the loss (a diagonal Kuu costs no M³ there).

**Families.** Full (``q_cov="full"``), mean field (``"diag"``: per coordinate θ₁ = m/s², θ₂ = −1/(2s²)) and
block-diagonal with equal blocks (``"block-diag"``: one full natural parameter per block). Not supported:
``"two-kron"`` (S = ⊗LLᵀ + ⊗JJᵀ is not an exponential family: the step's new precision
:math:`S^{-1} - 2\gamma G` has no two-Kronecker form, so the natural parameters of the family do not
exist), and a block-diagonal q with unequal blocks (params ``<site>_scale_tril_<t>``; use Adam for it).

**Schedule.** ``gamma`` is a number or a callable ``step -> γ`` (:func:`gamma_ramp`: log-linear from
1e-4 to 0.1 as Salimbeni et al. [2, §4] for non-conjugate likelihoods; :func:`gamma_schedule`: the ramp,
then a Robbins–Monro decay, for minibatches). A step whose new precision is
not positive definite (its Cholesky is not finite) is rejected: q stays, and γ is halved for all later
steps (the failure GPflow#820 and gpytorch#1300 report for non-conjugate likelihoods above ~10³ points).

**The default step, per family** (why γ = 1 is exact only for a full q). For a Gaussian likelihood the
loss is quadratic in q: whitened, :math:`-\mathcal L = -b^\top m + \tfrac12 m^\top\Lambda m +
\tfrac12\mathrm{tr}(\Lambda S) - \tfrac12\log|S| + c` with :math:`\Lambda = I + AA^\top/\sigma^2`,
:math:`b = Ay/\sigma^2` [1]. *Full q*: ∂L/∂η = (b, −½Λ) − (S⁻¹m, −½S⁻¹), so the step is
θ ← (1 − γ)θ + γθ* with θ* the optimum: exact at γ = 1, and along the whole segment
:math:`\tfrac{d}{d\gamma}\mathrm{KL}(q_\gamma\|q^*) = -(1-\gamma)\,\delta^\top F\delta \le 0` (δ = θ* − θ,
F the Fisher matrix), so no γ ∈ (0, 1] raises the loss [1, 2]; the same holds per minibatch. *Mean-field
q* (and, blockwise, the *block-diagonal* q; D = diag(Λ), resp. its diagonal blocks): the ELBO's
gradient in a coordinate's η sees only that coordinate, so the step is the precision
P ← (1 − γ)P + γD and, once P = D, the mean :math:`m \leftarrow m + \gamma D^{-1}(b - \Lambda m)`: a
damped Jacobi iteration on Λm = b (natural-gradient VI on a factorised Gaussian is the parallel version
of coordinate ascent [5; 6, ch. 5]). It contracts only for γ < 2/λ_max(D⁻¹Λ), and λ_max(D⁻¹Λ) ranges over
[1, M/m] (m the block size) with the coupling of the posterior: γ = 1 diverges as soon as
λ_max(D⁻¹Λ) > 2 (correlated inducing variables, small noise), geometrically (measured: loss 812 → 3·10¹⁷
in 30 steps), and a fixed γ safe for every data set (2/M) is needlessly slow where the coupling is
weak. Hence the **default** (``gamma=None``): γ₀ = 1 for a Gaussian likelihood (the ramp otherwise) with a
**backtracking acceptance** (``line_search``): a trial step is kept only when the step's loss (the same
minibatch and Monte Carlo draws: SVI fixes the key) does not rise (beyond round-off) and its precision
is positive definite; else γ is halved and the step retried (up to ``max_halvings`` times; none kept: q
stays and the step counts as rejected). The halved factor is kept for the next steps and doubles back
(towards the schedule's γ) after each step accepted at its first trial. So the loss of every q step is
non-increasing whatever the family and likelihood; on a quadratic it converges (each accepted step is a
descent step of a contraction factor < 1 for the current direction), and for a full q with a Gaussian
likelihood the first trial (γ = 1) is always kept: the exact one-step optimum, as before. Cost: the
first trial's evaluation is the inner optimiser's loss and gradient at the new q (kept when the trial
is, so an accepted first trial costs nothing more); each later trial one forward evaluation of the loss
(≈ a third of a gradient), and the inner gradient is then taken at the q accepted. An explicit ``gamma``
takes the given steps as they are (``line_search=False`` unless asked);
:func:`~ppl_sparsegp.engines.fit_svi` stops such a run when its loss diverges. Not covered: the
two-Kronecker q (no natural parameters, below): Adam.

**Alternation.** Each ``SVI`` step first takes the natural-gradient step for q, then one step of the
inner optimiser (default ``Adam(0.01)``) on every other param (kernel, likelihood, mean, features) with
the gradient at the new q: two gradient evaluations per step. The state keeps its types (every array
strongly typed, as ``init`` makes it), so a jitted ``svi.update`` compiles once. For a Gaussian
likelihood with γ = 1 the inner optimiser so follows the gradient of the collapsed bound (q optimal at
each step).

References:
    1. Hensman, Fusi, Lawrence (2013), Gaussian processes for big data, UAI.
    2. Salimbeni, Eleftheriadis, Hensman (2018), Natural gradients in practice: non-conjugate
       variational inference in Gaussian process models, AISTATS.
    3. Khan, Lin (2017), Conjugate-computation variational inference: converting variational inference
       in non-conjugate models to inferences in conjugate models, AISTATS.
    4. Wainwright, Jordan (2008), Graphical models, exponential families, and variational inference,
       Found. Trends Mach. Learn. 1 (mean-field updates as coordinate ascent, ch. 5).
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from numpyro.infer.elbo import ELBO
from numpyro.optim import Adam

from ..numpyro_internals import NumPyroOptim, subsample_indices
from ..validation import (
    AnyOf,
    Boolean,
    Count,
    InstanceOf,
    IsCallable,
    MaybeCount,
    Names,
    NonNegativeInt,
    OrNone,
    Real,
    validated,
    with_fix,
)
from . import natural_gradients_algebra as alg

__all__ = ["AnalyticELBO", "NaturalGradient", "gamma_ramp", "gamma_schedule"]

#: a schedule's step size γ in (0, 1], at least 1e-12: a smaller one underflows (to 0 in float32: the ramp's
#: log-ratio is then infinite and γ_0 NaN; found by tests/validation/test_validation.py's property test)
Gamma = Annotated[float, Real(1e-12, 1.0)]
_SPARSE_GP = "ppl_sparsegp.approximations.sparse.SparseGP"
_DECOUPLED = "ppl_sparsegp.approximations.decoupled.OrthogonallyDecoupledGP"
_APPROXIMATION = InstanceOf(_SPARSE_GP, _DECOUPLED, what="a SparseGP or OrthogonallyDecoupledGP")
_OPTIM = "numpyro.optim._NumPyroOptim"


@validated
def gamma_ramp(start: Gamma = 1e-4, end: Gamma = 0.1, num_steps: Count = 10) -> Callable:
    r"""The step-size schedule of [2, §4]: γ rises log-linearly from ``start`` to ``end`` over
    ``num_steps`` steps, then stays at ``end``: :math:`\gamma_t = \min(\gamma_{end},
    \gamma_{start}(\gamma_{end}/\gamma_{start})^{t/T})`.

    :param start: γ at step 0 (> 0).
    :param end: the final γ, in (0, 1].
    :param num_steps: T, the length of the ramp (>= 1).
    :returns: a callable ``step -> γ`` (jax-traceable).
    :raises ValueError: for γ outside (0, 1] or ``num_steps`` < 1.
    """
    if not (0 < start <= 1 and 0 < end <= 1):
        raise ValueError(f"gamma_ramp: start and end must be in (0, 1], got start={start}, end={end}")
    if int(num_steps) < 1:
        raise ValueError(f"gamma_ramp: num_steps must be >= 1, got {num_steps}")
    ratio = jnp.log(end / start)

    def gamma(step):
        t = jnp.minimum(jnp.asarray(step, jnp.result_type(float)) / num_steps, 1.0)  # float64 under x64
        return start * jnp.exp(ratio * t)

    return gamma



@validated
def gamma_schedule(start: Gamma = 1e-4, peak: Gamma = 0.5, ramp_steps: Annotated[int, NonNegativeInt()] = 5,
                   tau: Annotated[float | None, OrNone(Real(1e-12, None))] = None,
                   kappa: Annotated[float, Real(0.5, 1.0, low_open=True)] = 1.0,
                   floor: Annotated[float, Real(0.0, 1.0)] = 0.0) -> Callable:
    r"""The step size for natural gradients on **minibatches**: the log-linear ramp of :func:`gamma_ramp`
    to ``peak``, then a Robbins–Monro decay [3, 4], so that the minibatch noise averages out of q(u)
    instead of staying in it (with a constant γ the iterate keeps a noise of variance ∝ γ around the
    optimum):

    .. math::
        \gamma_t = \begin{cases} \gamma_0\,(\gamma_{max}/\gamma_0)^{t/T} & t \le T \\
        \max\!\big(\gamma_{max}\,(1 + (t - T)/\tau)^{-\kappa},\ \gamma_{floor}\big) & t > T. \end{cases}

    With 1/2 < κ ≤ 1, Σγ_t = ∞ and Σγ_t² < ∞ (the Robbins–Monro conditions under which stochastic
    natural-gradient VI converges to the optimum [3, 4]). The default τ = 1/γ_max with κ = 1 gives
    :math:`\gamma_t = 1/(t - T + 1/\gamma_{max})`, the step of a running mean: for a Gaussian likelihood
    the natural parameters after step t are the mean of the minibatch optima since the ramp (the start
    weighted as 1/γ_max − 1 of them), so their noise falls as 1/t. Measured (2-D Bernoulli, N = 10⁵,
    M = 64, minibatches of 1 024, 10 seeds; ``inference/benchmarks/natural_gradients.py`` part (b)): the
    ELBO within 0.1 % of the best in 60-80 steps (Adam: 1 360-1 500) and (seed 0) within 0.003 % of the
    full-batch optimum after 2 000, where a constant γ = 0.1 stays 0.2-0.4 % below it.

    Without a ramp (``ramp_steps=0``, γ_max = 1: :math:`\gamma_t = 1/(t + 1)`) and a Gaussian likelihood,
    one pass over disjoint minibatches of one permutation of the rows leaves q at the optimum of all rows
    (the mean of the minibatch optima, each with its data term scaled by N/B): the benchmark's one-epoch
    method (part (a)). A ``floor`` keeps forgetting old minibatches while the hyperparameters still move
    (then the running mean averages q over stale hyperparameters); with a floor the Robbins–Monro
    conditions no longer hold and q keeps a minibatch noise ∝ γ_floor.

    On the full batch use :func:`gamma_ramp` (nothing to average; γ need not decay). The decay is for q
    at fixed (or settled) hyperparameters: while the inner optimiser still moves them, a running mean
    averages q over stale hyperparameters, and a constant γ (≈ 0.1) follows them better.

    :param start: γ at step 0, γ₀ (> 0).
    :param peak: γ at the end of the ramp, γ_max, in (0, 1].
    :param ramp_steps: T, the length of the ramp (>= 0; 0: no ramp, γ₀ unused, the decay from γ_max at t = 0).
    :param tau: the decay's time scale τ in steps (≥ 1e-12, so that no subnormal value is flushed to zero;
        default 1/γ_max).
    :param kappa: the decay's exponent κ, in (1/2, 1].
    :param floor: γ_floor, the least γ of the decay, in [0, γ_max] (default 0: none).
    :returns: a callable ``step -> γ`` (jax-traceable) for :class:`NaturalGradient`'s ``gamma``.
    :raises ValueError: for γ₀ or γ_max outside (0, 1], T < 0, τ <= 0, κ outside (1/2, 1] or γ_floor outside
        [0, γ_max].

    References:
        3. Robbins, Monro (1951), A stochastic approximation method, Ann. Math. Statist.
        4. Hoffman, Blei, Wang, Paisley (2013), Stochastic variational inference, JMLR 14 (step size
           :math:`(t + \tau)^{-\kappa}`, κ ∈ (1/2, 1]).
    """
    if isinstance(ramp_steps, bool) or int(ramp_steps) != ramp_steps or ramp_steps < 0:
        raise ValueError(f"gamma_schedule: ramp_steps must be an integer >= 0, got {ramp_steps!r}")
    ramp = gamma_ramp(start if ramp_steps else peak, peak, max(int(ramp_steps), 1))  # checks start and peak
    if not 0 <= float(floor) <= peak:
        raise ValueError(f"gamma_schedule: floor must be in [0, peak] = [0, {peak}], got {floor}")
    tau = 1.0 / peak if tau is None else float(tau)
    if not tau > 0:
        raise ValueError(f"gamma_schedule: tau must be > 0 (steps), got {tau}")
    if not 0.5 < float(kappa) <= 1:
        raise ValueError(f"gamma_schedule: kappa must be in (1/2, 1] (the Robbins-Monro conditions), "
                         f"got {kappa}")
    T, kappa = int(ramp_steps), float(kappa)

    def gamma(step):
        t = jnp.asarray(step, jnp.result_type(float))  # float64 under x64
        decay = jnp.maximum(peak * (1.0 + jnp.maximum(t - T, 0.0) / tau) ** (-kappa), floor)
        return jnp.where(t < T, ramp(step), decay) if T else decay

    return gamma

def _sites(target):
    """The q sites' prefixes: an approximation's ``natural_gradient_sites()`` (several q's, e.g. both
    parts of the orthogonally decoupled GP), a SparseGP (``site``, ``num_latent_gps``) or a name / list of
    names."""
    if isinstance(target, str):
        return (target,)
    if callable(getattr(target, "natural_gradient_sites", None)):
        return tuple(target.natural_gradient_sites())
    if hasattr(target, "site") and hasattr(target, "num_latent_gps"):
        if target.num_latent_gps == 1:
            return (target.site,)
        return tuple(f"{target.site}_{l}" for l in range(target.num_latent_gps))
    names = tuple(target)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"NaturalGradient: sites must be a SparseGP, a site name or a list of site names "
                         f"(e.g. 'f_v'), got {target!r}")
    return names


_SITES_FIX = ("pass the SparseGP whose guide SVI runs, or its inducing site name(s) (e.g. 'f_v'); a CollapsedGP "
              "integrates q(u) out, so it has no q(u) to step: fit its hyperparameters with map_lbfgs or Adam")

#: the steps at which a γ schedule is checked when NaturalGradient is built (0 … 10⁶, log-spaced)
_SCHEDULE_STEPS = sorted({0, 1, 2, 3, 5} | {int(round(10 ** (k / 4))) for k in range(25)})


def _check_schedule(gamma):
    """Refuse a γ schedule that leaves (0, 1] (or is not finite) at one of ``_SCHEDULE_STEPS``, naming the step:
    a γ ≤ 0 rejects every step (q never moves), a γ > 1 overshoots the natural-parameter step."""
    for step in _SCHEDULE_STEPS:
        try:
            with jax.ensure_compile_time_eval():
                value = float(jnp.asarray(gamma(jnp.asarray(step))))
        except (TypeError, jax.errors.ConcretizationTypeError):  # pragma: no cover - a schedule jax cannot run eagerly
            return
        if not (math.isfinite(value) and 0.0 < value <= 1.0 + 1e-9):  # 1 up to rounding (exp(log 1))
            raise ValueError(f"NaturalGradient: the gamma schedule gives γ = {value:g} at step {step}, outside (0, 1]: "
                             "a γ ≤ 0 rejects every natural-gradient step (q(u) never moves) and a γ > 1 overshoots "
                             "it; give a schedule in (0, 1] (gamma_ramp(), gamma_schedule()) or a number in (0, 1]")


def _strong(tree, like=None):
    """Every array of ``tree`` strongly typed, with the dtypes of ``like``'s (default its own): the state's
    types then never change between steps (a weak type or a dtype that moved recompiles a jitted step)."""
    like = tree if like is None else like
    return jax.tree.map(lambda a, b: jnp.asarray(a, jnp.asarray(b).dtype), tree, like)


def _rest_value_and_grad(fn, rest, q):
    """``((loss, aux), gradient in rest)`` of ``fn`` at ``{**rest, **q}`` (gradient None without rest)."""
    if not rest:
        return fn(q), None
    return jax.value_and_grad(lambda r: fn({**r, **q}), has_aux=True)(rest)


class NaturalGradient(NumPyroOptim):
    r"""An optimiser for :class:`~numpyro.infer.SVI`: a natural-gradient step for q(u), then a step of
    ``optim`` on every other param (module docstring: the step, its cost, the families).

    Use as::

        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, Adam(0.01)), AnalyticELBO(gp))
        result = svi.run(key, 100, X, y)

    :param sites: the :class:`~ppl_sparsegp.SparseGP` whose guide SVI runs (its q sites: one, or one per
        latent GP), an approximation with ``natural_gradient_sites()`` (the
        :class:`~ppl_sparsegp.OrthogonallyDecoupledGP`: both q's, stepped together), or the inducing site
        name(s) of :func:`~ppl_sparsegp.inducing_guide` (e.g. ``"f_v"``).
    :param optim: a NumPyro optimiser for the other params (default ``Adam(0.01)``).
    :param gamma: the step size: a number in (0, 1] or a callable ``step -> γ`` (:func:`gamma_ramp`,
        :func:`gamma_schedule`). Default: 1 for a model with a Gaussian likelihood (one step reaches the
        optimal q of a full q on the full batch), else ``gamma_ramp()``, both with the backtracking
        acceptance (``line_search``) that keeps every family's step from raising the loss (module
        docstring: a mean-field or block q overshoots at γ = 1); with minibatches pass ``gamma_schedule()``
        (a constant γ leaves the minibatch noise in q).
    :param line_search: keep a trial step only when the step's loss does not rise, else halve γ and retry
        (module docstring). Default (None): on for the default ``gamma``, off for a given one (its steps
        are taken as given).
    :param max_halvings: the most halvings of γ in one step with ``line_search`` (an int >= 1; default 30:
        γ down to ~1e-9 of the first trial), after which the step is rejected (q stays).
    :raises ValueError: for a γ outside (0, 1], a ``line_search`` that is not a bool or None, a
        ``max_halvings`` that is not an int >= 1, or (at ``SVI.init``) a guide without a full, diagonal or
        equal-block q over the sites.

    The state records ``rejected``, the number of steps rejected (by the positive-definiteness safeguard,
    or by the line search after ``max_halvings``; :meth:`rejected_steps`), and ``halvings``, the halvings
    of γ the line search made in all.
    """

    @validated
    def __init__(self, sites: Annotated[Any, with_fix(AnyOf(_APPROXIMATION, Names()), _SITES_FIX)],
                 optim: Annotated[Any, OrNone(InstanceOf(_OPTIM, what="a NumPyro optimiser (e.g. Adam(0.01))"))]
                 = None, *, gamma: Annotated[Any, OrNone(AnyOf(Real(0.0, 1.0, low_open=True), IsCallable()))] = None,
                 line_search: Annotated[bool | None, OrNone(Boolean())] = None, max_halvings: Count = 30):
        self.prefixes = _sites(sites)
        self.inner = Adam(0.01) if optim is None else optim
        if line_search is not None and not isinstance(line_search, bool):
            raise ValueError(f"NaturalGradient: line_search must be True, False or None (on for the default "
                             f"gamma), got {line_search!r}")
        if isinstance(max_halvings, bool) or not isinstance(max_halvings, int) or max_halvings < 1:
            raise ValueError(f"NaturalGradient: max_halvings must be an int >= 1, got {max_halvings!r}")
        self.line_search = (gamma is None) if line_search is None else line_search
        self.max_halvings = max_halvings
        if gamma is None:
            lik = getattr(sites, "likelihood", None)
            gamma = 1.0 if type(lik).__name__ == "Gaussian" else gamma_ramp()
        if not callable(gamma):
            if not 0 < float(gamma) <= 1:
                raise ValueError(f"NaturalGradient: gamma must be in (0, 1] or a schedule, got {gamma}")
            value = float(gamma)

            def gamma(step):
                return value

        self.gamma = gamma
        _check_schedule(self.gamma)
        self.update_with_value = False

    def _split(self, params):
        qnames = {k for p in self.prefixes for k in params
                  if k in (f"{p}_loc", f"{p}_scale_tril", f"{p}_scale")}
        return ({k: v for k, v in params.items() if k in qnames},
                {k: v for k, v in params.items() if k not in qnames})

    def init(self, params: dict) -> tuple:
        """State ``(step, (inner state, q params, {t, scale, rejected, halvings}))`` for the unconstrained
        params; every array of it strongly typed, as :meth:`eval_and_update` returns it (so a jitted
        ``svi.update`` compiles once)."""
        q, rest = self._split(params)
        for p in self.prefixes:
            alg.family(p, q)
        integer, real = jnp.result_type(int), jnp.result_type(float)
        ng = {"t": jnp.zeros((), integer), "scale": jnp.ones((), real), "rejected": jnp.zeros((), integer),
              "halvings": jnp.zeros((), integer)}
        return _strong((jnp.array(0), (self.inner.init(rest), q, ng)))  # as the step returns it

    def get_params(self, state: tuple) -> dict:
        _, (inner, q, _) = state
        return {**self.inner.get_params(inner), **q}

    def update(self, g: dict, state: tuple, value: Any = None):
        raise NotImplementedError("NaturalGradient needs the loss, not only its gradient: SVI calls "
                                  "eval_and_update; use svi.update / svi.run")

    @staticmethod
    @validated
    def rejected_steps(state: Annotated[Any, InstanceOf(tuple, what="SVI's svi_state.optim_state")]) -> int:
        """The number of natural-gradient steps rejected so far (SVI's ``svi_state.optim_state``)."""
        return int(state[1][2]["rejected"])

    @staticmethod
    @validated
    def halvings(state: Annotated[Any, InstanceOf(tuple, what="SVI's svi_state.optim_state")]) -> int:
        """The halvings of γ the line search made so far (0 without ``line_search``)."""
        return int(state[1][2]["halvings"])

    def _q_step(self, fn, rest, q, ng):
        """The natural-gradient step for every q site at the other params ``rest``, then the loss and the
        gradient in ``rest`` at the new q: ``(q_new, ng, ((loss, aux), grads))`` (grads None without rest)."""
        fams = {p: alg.family(p, q) for p in self.prefixes}
        moments = {p: alg.moments(fams[p], p, q) for p in self.prefixes}

        def loss_of_moments(moments):
            qp = {}
            for p in self.prefixes:
                qp.update(alg.to_params(fams[p], p, *moments[p]))
            return fn({**rest, **qp})

        (loss, _), g = jax.value_and_grad(loss_of_moments, has_aux=True)(moments)  # one gradient in (m, L)
        dirs = {p: alg.direction(fams[p], *moments[p], *g[p]) for p in self.prefixes}

        def candidate(gamma):
            new, ok = {}, jnp.isfinite(loss)
            for p in self.prefixes:
                m_new, F_new, ok_p = alg.step(fams[p], *moments[p], dirs[p], gamma)
                new.update(alg.to_params(fams[p], p, m_new, F_new))
                ok = ok & ok_p
            return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, q), ok  # rejected: q stays

        gamma = self.gamma(ng["t"]) * ng["scale"]
        if self.line_search:
            return self._searched_step(fn, rest, q, ng, loss, candidate, gamma)
        new, ok = candidate(gamma)
        ng = {**ng, "t": ng["t"] + 1, "scale": jnp.where(ok, ng["scale"], 0.5 * ng["scale"]),
              "rejected": ng["rejected"] + jnp.where(ok, 0, 1)}
        return new, ng, _rest_value_and_grad(fn, rest, new)

    def _searched_step(self, fn, rest, q, ng, loss, candidate, gamma):
        """The backtracking acceptance (module docstring): halve γ until the step's loss does not rise
        (within round-off) and the precision is positive definite; none in ``max_halvings``: q stays.
        The first trial's evaluation is the inner optimiser's gradient too (kept when it is accepted: no
        loss or gradient is evaluated twice); later trials evaluate the loss only."""
        tol = 64 * jnp.finfo(jnp.result_type(loss)).eps * (1 + jnp.abs(loss))

        def accepted(value, ok):
            return ok & jnp.isfinite(value) & (value <= loss + tol)

        def halve(carry):
            k, gamma, _, _ = carry
            new, ok = candidate(0.5 * gamma)
            return k + 1, 0.5 * gamma, new, accepted(fn({**rest, **new})[0], ok)

        new, ok = candidate(gamma)
        first = _rest_value_and_grad(fn, rest, new)
        ok = accepted(first[0][0], ok)
        k, _, new, ok = lax.while_loop(lambda c: ~c[3] & (c[0] < self.max_halvings), halve,
                                       (jnp.zeros((), ng["halvings"].dtype), gamma, new, ok))
        new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, q)
        at_new = lax.cond(k == 0, lambda: first, lambda: _rest_value_and_grad(fn, rest, new))
        scale = ng["scale"] * 0.5 ** k.astype(ng["scale"].dtype)
        scale = jnp.where(ok & (k == 0), jnp.minimum(2.0 * scale, 1.0), scale)  # doubles back after a first-trial step
        ng = {"t": ng["t"] + 1, "scale": scale, "rejected": ng["rejected"] + jnp.where(ok, 0, 1),
              "halvings": ng["halvings"] + k}
        return new, ng, at_new

    def eval_and_update(self, fn: Callable, state: tuple, forward_mode_differentiation: bool = False) -> tuple:
        """The natural-gradient step for q, then ``optim``'s step on the rest at the new q. The state
        returned has the dtypes, weak types and structure of the one given (one compilation)."""
        i, (inner, q, ng) = state
        rest = self.inner.get_params(inner)
        q_new, ng_new, ((out, aux), grads) = self._q_step(fn, rest, q, ng)
        if rest:
            inner = self.inner.update(grads, inner, value=out)
        return (out, aux), _strong((i + 1, (inner, q_new, ng_new)), like=state)  # as init made it

    def eval_and_stable_update(self, fn: Callable, state: tuple,
                               forward_mode_differentiation: bool = False) -> tuple:
        """:meth:`eval_and_update`, keeping the old state (and returning NaN) when the loss is not finite."""
        (out, aux), new = self.eval_and_update(fn, state, forward_mode_differentiation)
        ok = jnp.isfinite(out)
        new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state)
        return (jnp.where(ok, out, jnp.nan), aux), new


class AnalyticELBO(ELBO):
    r"""The SVGP loss of a :class:`~ppl_sparsegp.SparseGP` with the expectation over q(u) in closed form
    (:meth:`SparseGP.elbo <ppl_sparsegp.SparseGP.elbo>`: exact for Gaussian and Poisson, Gauss–Hermite
    otherwise, Monte Carlo for Softmax), plus the log prior of the hyperparameters (as
    ``TraceMeanField_ELBO`` of the model and the point guide has it, without its Monte Carlo noise):

    .. math:: -\Big[\tfrac{N}{|B|}\sum_{n\in B}\mathbb E_{q(f_n)}\log p(y_n\mid f_n)
        - \mathrm{KL}(q(\mathbf u)\,\|\,p(\mathbf u)) + \log p(\theta)\Big],

    B a minibatch of ``batch_size`` rows drawn without replacement from the step's key (all N rows for
    ``batch_size=None``), or, with ``num_data=N``, the rows (X, y) given: a minibatch the caller drew from a
    set of N rows (e.g. one block of a permutation per epoch). Takes the model's arguments
    ``(X, y, batch_size=None)`` and ``num_data=None``.

    :param gp: the SparseGP (``residual="expected"``).
    :raises ValueError: for a model without an analytic ELBO.
    """

    @validated
    def __init__(self, gp: Annotated[Any, _APPROXIMATION]):
        if not hasattr(gp, "elbo") or getattr(gp, "residual", "expected") != "expected":
            raise ValueError("AnalyticELBO needs a SparseGP with residual='expected' (its SVGP bound)")
        super().__init__(num_particles=1)
        self.gp = gp

    @validated
    def loss_with_mutable_state(self, rng_key: Any, param_map: dict, model: Callable, guide: Callable, X: Any,
                                y: Any, *, batch_size: MaybeCount = None, num_data: MaybeCount = None,
                                **kwargs: Any) -> dict:
        """The negative ELBO of the SparseGP at ``param_map`` (what ``SVI`` minimises), on a minibatch of
        ``batch_size`` rows (or the rows given, of a set of ``num_data``) scaled by N/B, with
        ``{"loss": value, "mutable_state": None}``.

        :raises ValueError: for both ``batch_size`` and ``num_data`` (one draws the minibatch, the other
            says it is drawn)."""
        gp = self.gp
        if batch_size is not None and num_data is not None:
            raise ValueError("AnalyticELBO: give batch_size (the loss draws each step's rows) or num_data (X, y "
                             "are a minibatch you drew from num_data rows), not both")
        N = X.shape[0] if num_data is None else num_data
        _check_rows(X.shape[0], batch_size, num_data)
        k_batch, k_mc = jax.random.split(rng_key)
        if batch_size is not None:
            idx = subsample_indices(N, batch_size, k_batch)  # as numpyro.plate draws them
            X, y = jnp.take(jnp.asarray(X), idx, axis=0), jnp.take(jnp.asarray(y), idx, axis=0)
        key = k_mc if gp.likelihood.monte_carlo else None
        elbo = gp.elbo(param_map, X, y, rng_key=key, num_data=N)
        values = gp.point_values(param_map)
        log_prior = sum(jnp.sum(prior.log_prob(values[site])) for site, prior in
                        gp.hyperparameter_sites().items())
        return {"loss": -(elbo + log_prior), "mutable_state": None}


def _check_rows(rows, batch_size, num_data):
    """Refuse a minibatch that cannot be one: ``num_data`` below the rows given (the data term would be
    scaled by N/B < 1), or ``batch_size`` above the rows to draw from."""
    if isinstance(num_data, int) and num_data < rows:
        raise ValueError(f"AnalyticELBO: num_data={num_data} is fewer than the {rows} rows of the minibatch given: "
                         "num_data is the size of the whole data set the minibatch was drawn from (N ≥ its rows)")
    if isinstance(batch_size, int) and batch_size > rows:
        raise ValueError(f"AnalyticELBO: batch_size={batch_size} is more than the {rows} rows of X: pass "
                         f"batch_size ≤ {rows}, or batch_size=None for all rows")
