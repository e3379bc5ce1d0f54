"""The base class of inducing features, the :func:`refined_features` context and the constant-Kuf rule.

A family is a subclass plus its registrations in the dispatchers of :mod:`ppl_sparsegp.covariances`
(``Kuu``, ``Kuf``, and where its structure demands ``conditional`` and ``sufficient_statistics``), in its
own file under ``features/``, imported in ``features/__init__.py`` (else its registrations never run).
The float32 warnings are :mod:`~ppl_sparsegp.features.float32`."""
from __future__ import annotations

import contextlib
from typing import Annotated, Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..kernels import Kernel, Matern12, Matern32, Matern52, Periodic
from ..parameters import Module, Param, is_concrete
from ..validation import (
    AKernel,
    AnyOf,
    ArrayOf,
    Check,
    Inputs,
    InstanceOf,
    Integer,
    InvalidArgument,
    MaybeCount,
    OrNone,
    PositiveInt,
    Tolerance,
    WrongArgumentType,
    validated,
)
from .float32 import Float32Warning  # noqa: F401  (re-exported: public here before)

__all__ = ["InducingFeature", "OutsideDomainWarning", "Float32Warning", "TooManyFeatures", "refined_features"]


class SequenceOf(Check):
    """A non-empty list or tuple whose every element ``element`` allows (a family's parts, e.g. one
    feature per input column); ``what`` names it in messages."""

    def __init__(self, element: Check, what: str):
        self.element, self.allowed = element, what

    def problem(self, value):
        if not isinstance(value, (list, tuple)):
            return WrongArgumentType, f"of type {type(value).__name__}, not a list or tuple"
        if not value:
            return InvalidArgument, "empty"
        bad = [i for i, v in enumerate(value) if self.element.problem(v) is not None]
        return (WrongArgumentType, f"element {bad[0]} is a {type(value[bad[0]]).__name__}") if bad else None

    def bad_values(self):
        return [3, "x", [], [3]]


#: a lengthscale of a size rule: a positive number (or one per dimension) or its prior
Lengthscale = Annotated[Any, AnyOf(ArrayOf(rank=(0, 1), positive=True),
                                   InstanceOf("numpyro.distributions.Distribution", what="a NumPyro prior"))]
#: ℓ_max of a size rule: None (from the lengthscale) or a :data:`Lengthscale`
MaybeLengthscale = Annotated[Any, OrNone(Lengthscale.__metadata__[0])]


class _FloatDtype(Check):
    """None or a floating dtype (``jnp.float32``, ``"float64"``, ``x.dtype``)."""

    allowed = "None or a floating dtype (e.g. jnp.float32)"

    def problem(self, value):
        if value is None:
            return None
        try:
            dtype = np.dtype(value)
        except TypeError:
            return WrongArgumentType, f"of type {type(value).__name__}, not a dtype"
        return None if jnp.issubdtype(dtype, jnp.floating) else (InvalidArgument, f"not a floating dtype ({dtype})")

    def bad_values(self):
        return ["no such dtype", 3, "int32"]


FloatDtype = Annotated[Any, _FloatDtype()]


def template_lengthscale(kernel):
    """The lengthscale a size rule reads from a kernel template: a number or array as given, a prior (a
    NumPyro distribution) as given, a :class:`~ppl_sparsegp.Param` at its initial value."""
    value = kernel.lengthscale
    return value.init if isinstance(value, Param) else value


def matern_template(kernel, where):
    """(ν, lengthscale) of a Matérn kernel template for the VFF size rule; a clear error for another kernel."""
    if not isinstance(kernel, (Matern12, Matern32, Matern52)):
        hint = (" (the periodic kernel: FourierFeatures(a, a + period, M), sized by resized or harmonics_needed)"
                if isinstance(kernel, Periodic) else "")
        raise ValueError(f"{where}: kernel must be a Matern12, Matern32 or Matern52 kernel (its class gives ν, "
                         f"its lengthscale ℓ, a number or a prior), got {type(kernel).__name__}{hint}; e.g. "
                         "Matern32(1.0, 0.3) or Matern52(1.0, ell_prior)")
    return float(kernel.nu), template_lengthscale(kernel)


class OutsideDomainWarning(UserWarning):
    """Predictions asked for where the features resolve nothing (e.g. outside VFF's box): there the
    projected process reverts to the prior, which the exact GP does not."""


class TooManyFeatures(ValueError):
    """A size rule (:meth:`InducingFeature.resized`, :func:`~ppl_sparsegp.choose_features`) needs more features
    than ``max_features`` allows. ``wanted`` is the size the rule asked for (None where it stopped searching
    at the cap: more than ``max_features``), ``max_features`` the cap.

    :param message: what was asked, what the rule needs and the fix.
    :param wanted: the number of features the rule wants, or None (more than ``max_features``).
    :param max_features: the cap.
    """

    @validated
    def __init__(self, message: Annotated[str, InstanceOf(str, what="a message (a string)")],
                 wanted: Annotated[int | None, OrNone(Integer(1))] = None,
                 max_features: MaybeCount = None):
        super().__init__(message)
        self.wanted, self.max_features = wanted, max_features


def check_feature_cap(wanted: int, max_features, what: str):
    """Raise :class:`TooManyFeatures` when ``wanted`` features exceed ``max_features`` (None: no cap),
    naming ``what`` (the rule and its inputs) and the O(M'³) cost."""
    if max_features is not None and wanted > max_features:
        raise TooManyFeatures(f"{what} needs M' = {wanted} features, more than max_features = {max_features} "
                              f"(an M' x M' Cholesky per gradient: O(M'^3))", wanted, max_features)


CONSTANT_KUF_MAX = 2**25  # entries of Kuf (256 MiB in float64) up to which it may be a constant of a program


def constant_kuf(X, num_features):
    """Context for computing a Kuf that does not depend on the hyperparameters (VFF inside its box): for
    concrete data of at most :data:`CONSTANT_KUF_MAX` entries, evaluated now, even inside a trace (NUTS,
    SVI), so that the compiled program receives it as a constant instead of recomputing it per gradient
    (XLA does not hoist it out of the sampler's loop; measured for a Poisson ``spectral_gp`` with 61
    features: 10.7 → 1.4 ms per gradient at N = 20 000, 205 → 18 at N = 200 000, compilation +0.7 s
    there). XLA embeds such a constant in the program (compiling and holding a copy), hence the cap;
    past it, or for traced data, Kuf is computed in the program, at about 12× the time per gradient
    (measured at N = 200 000 with the cap lowered: 184 against 16 ms)."""
    if is_concrete(X) and X.shape[0] * num_features <= CONSTANT_KUF_MAX:
        return jax.ensure_compile_time_eval()
    return contextlib.nullcontext()


_REFINEMENT = []  # the active refined_features contexts (how many refinements each)


@contextlib.contextmanager
@validated  # inside: the generator function's own globals resolve the hint; checked when the context is made
def refined_features(times: Annotated[int, PositiveInt()] = 1):
    """Run models with refined features: inside, :func:`~ppl_sparsegp.spectral_gp` and
    :func:`~ppl_sparsegp.marginal_spectral_gp` replace each feature by :meth:`InducingFeature.refined`
    (``times`` times), so a user's model runs unchanged with a finer approximation. The refinement check
    (:func:`~ppl_sparsegp.diagnostics.refinement_check`) compares the posterior under it with the fit's.
    The features are replaced when the model is traced: build (trace, compile) the model inside.

    :param times: refinements to apply (≥ 1).
    """
    if isinstance(times, bool) or not isinstance(times, int) or times < 1:
        raise ValueError(f"times must be a positive integer, got {times!r}")
    _REFINEMENT.append(times)
    try:
        yield
    finally:
        _REFINEMENT.pop()


def current_feature(feature):
    """``feature``, refined as the active :func:`refined_features` contexts ask (itself outside them)."""
    for _ in range(sum(_REFINEMENT)):
        feature = feature.refined()
    return feature


class InducingFeature(Module):
    """Base class of inducing features (inter-domain or inducing points)."""

    #: The kernel's fields that the family's Kuf depends on beyond the feature itself (spherical
    #: harmonics: the input mapping's ``lengthscale`` and ``bias``). Precomputed statistics are refused
    #: while any of them is free (a prior or a parameter), since the statistics would be for one value.
    kuf_kernel_fields: tuple = ()

    #: Whether the family's functions move with the kernel's lengthscale, as random Fourier features do
    #: (every frequency scales with 1/ℓ). With a sampled lengthscale the weights and ℓ are then tangled
    #: and NUTS mixes poorly, so :func:`~ppl_sparsegp.spectral_gp` warns.
    moves_with_lengthscale: bool = False

    #: Whether Kuu and Kuf are the covariances of inducing variables u = L[f] of the GP prior itself (an
    #: inter-domain transform or point values), so that the joint covariance [[Kuu, Kuf], [Kfu, Kff]] is
    #: positive semi-definite: Kff − Qff ⪰ 0 and the collapsed bound lies below log p(y). Weight-space
    #: features (random Fourier features) approximate the kernel instead and set it False.
    covariance_of_prior: bool = True

    #: Whether the family's Kuf depends on the kernel only through an input map (the non-empty
    #: :attr:`kuf_kernel_fields`) and its registered ``sufficient_statistics`` makes one pass over chunks
    #: of rows with that map fixed (``chunk_size``), never forming Kuf: the three stages of
    #: :func:`~ppl_sparsegp.fit_spherical` (the map from a subsample, one pass, the rest at O(M³)).
    one_pass_with_fixed_map: bool = False

    def refined(self) -> "InducingFeature":
        """A finer feature of the same family (the refinement check's alternative): VFF doubles its
        highest frequency on the same box. Families without a rule raise ``NotImplementedError``."""
        raise NotImplementedError(f"{type(self).__name__} has no refinement rule (refined()): the refinement "
                                  "check is available for FourierFeatures and their additive/Kronecker combinations")

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """The features of this family, keeping their domain (VFF's box, a centre, an input scale), that
        leave at most ``tolerance`` of ``kernel``'s prior variance unresolved at the inputs X: the size rule
        of the family's ``from_data`` applied to a concrete kernel (the one
        :func:`~ppl_sparsegp.choose_features` finds the data need). None where the family has no size
        rule for this kernel (the features are then kept as given). Families with a rule override.

        :param X: the training inputs, (N, D) (concrete).
        :param kernel: a concrete kernel (its lengthscales those to resolve).
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param max_features: the largest M' the rule may return (None: only the family's own limit); the
            search stops there (a tiny tolerance cannot make it build a huge feature set).
        :returns: an :class:`InducingFeature` of the same family, or None.
        :raises TooManyFeatures: (a ``ValueError``) when the rule needs more than ``max_features``, naming
            the size it wants where the rule knows it.
        """
        return None

    @property
    def num_features(self) -> int:
        """M, the number of inducing variables."""
        raise NotImplementedError

    def __len__(self):
        return self.num_features

    def check_kernel(self, kernel: Kernel) -> None:
        """Refuse a kernel (template or value) this family cannot use for every value its free
        hyperparameters may take (from its structure, so also under jit). Families override."""

    @property
    def monte_carlo(self) -> bool:
        """Whether ``conditional`` estimates this feature's Kuf by Monte Carlo when given a ``key``
        (the approximations then pass one inside an ELBO). Families override."""
        return False

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        """Validate inputs for this feature (domain checks); returns X. Families override.

        :param X: the inputs, (N, D).
        :param name: the argument's name, for the messages.
        """
        return X

    def adequacy_advice(self, lengthscales: Optional[ArrayLike], X: ArrayLike,
                        kernel: Union[Kernel, Callable[[Any], Kernel]], tolerance: float) -> str:
        """The fix :func:`~ppl_sparsegp.diagnostics.adequacy` proposes when these features miss too much
        of the prior variance at the data. Families with a rule override (VFF: from the posterior's
        lengthscales; inducing points).

        :param lengthscales: the posterior draws of the lengthscale, or None where the draws hold none.
        :param X: the training inputs, (N, D).
        :param kernel: the kernel (template or concrete), or a user's callable ``draw -> kernel``.
        :param tolerance: the check's tolerance for the median residual fraction.
        :returns: the advice, one clause.
        """
        return "increase the number of features"

    def check_free_hyperparameters(self, kernel: Kernel, what: str) -> None:
        """Refuse a kernel template whose free hyperparameters (priors, Params) this family cannot follow,
        before a model samples them (the own-model primitives' entry check): VFF with a periodic kernel
        fixes the period (the box is one period). Families with such a rule override; the default accepts.

        :param kernel: the kernel (template or concrete).
        :param what: the argument's name for the message (e.g. ``"gps['trend']"``).
        :raises ValueError: naming ``what``, the hyperparameter and the fix.
        """

    @property
    def inducing_inputs(self):
        """The (M, D) input locations when the inducing variables are values of f there (inducing
        points; their Kuf is k(Z, X), so Kuf at Z and X is one kernel call), else None."""
        return None

    def refinement_note(self, finer: "InducingFeature", nu: Optional[float]) -> str:
        """What the refinement check's summary adds after "M → M' features" for these features and their
        refinement ``finer`` (VFF: the lengthscales each resolves); "" by default.

        :param finer: :meth:`refined` of these features (as the check applied it).
        :param nu: the Matérn order of the GP's kernel, or None.
        """
        return ""

    def refinement_advice(self, name: str, shortest: Optional[float], nu: Optional[float]):
        """``(features, advice)`` for the next fit of the GP ``name`` after a failed refinement check
        (:func:`~ppl_sparsegp.diagnostics.refinement_check`), or None where the family has no rule (the
        check then proposes to refit with the refined features). VFF: the same box with the frequencies
        that resolve ``shortest``.

        :param name: the GP's name (its lengthscale site is ``{name}_kernel_lengthscale``).
        :param shortest: the refined posterior's 5% lengthscale quantile, or None where unknown.
        :param nu: the Matérn order of the GP's kernel, or None.
        :returns: ``(InducingFeature, str)`` or None.
        """
        return None

    def warn_outside(self, X: ArrayLike, name: str = "X_new", *, kernel: Optional[Kernel] = None):
        """Warn (:class:`OutsideDomainWarning`) when concrete prediction inputs lie where the features
        resolve nothing, naming the fix; returns X. The documented choice is a warning, not an error:
        near the edge the prediction is still usable, and the caller may want the prior there. Families
        with a bounded domain override (VFF: its box).

        :param X: the prediction inputs, (N, D).
        :param name: the argument's name, for the message.
        :param kernel: the kernel, where the family's domain depends on it (e.g. its lengthscale), or None.
        """
        return X
