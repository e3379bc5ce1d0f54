"""ppl_sparsegp: large-scale Gaussian processes in NumPyro through spectral and inter-domain features.

Architecture (floors run bottom-up; a module imports only from lower floors and, inside its own folder,
from siblings that do not import it back, which ``tests/test_layers.py`` checks; the file list is
``docs/architecture.md``, which a test keeps complete):

* −1: :mod:`.validation` (the declared argument checks every public callable runs: ``Annotated`` hints read
  by ``@validated``; they import nothing of the package);
* 0: :mod:`.numpyro_internals` (the only use of private JAX/NumPyro APIs), :mod:`.parameters` (templates: a number is
  fixed, a distribution a prior, :class:`Param` a point estimate), :mod:`.sharding` (data meshes,
  per-device blocks), :mod:`.datasets`;
* 1: :mod:`.linalg` (structured PSD operators), :mod:`.grid`, :mod:`.likelihoods`, :mod:`.covariances`
  (the ``Kuu``/``Kuf``/``conditional``/``sufficient_statistics`` dispatchers);
* 2: :mod:`.kernels` (stationary, periodic, zonal and sphere kernels, sums and products),
  :mod:`.gaussian` (the structured Gaussian and its KL);
* 3: :mod:`.groups`; 4: :mod:`.conditionals` (the default q(u) → q(f));
* 5: :mod:`.features` (one file per family, registering into the dispatchers);
* 6: :mod:`.approximations` (model/guide pairs on one base; q families; primitives for own models),
  :mod:`.optim` (natural-gradient steps for q(u) inside SVI, AdamW, schedules);
* 7: :mod:`.stein` (Stein particle inference), :mod:`.engines` (the SVI loop with non-finite and
  divergence detection, the NUTS helper); 8: :mod:`.diagnostics` (every ArviZ call, metrics, plots);
  9: :mod:`.saving` (saving and loading fits).

A new feature family is one file in ``features/``: a :class:`~ppl_sparsegp.features.InducingFeature`
subclass, its ``Kuu``/``Kuf`` registrations (and a ``conditional`` or ``sufficient_statistics``
registration where its structure allows something faster), its import in ``features/__init__.py`` (else
the registrations never run), its entry in ``features/registry.py`` (``FAMILIES``: the cross-family tests
run on it, and a test fails for a family left out) and its tests; ``features/integral_transform.py`` is the
example. The approximations do not change: what they ask of a family is an attribute or method of the class.
"""
from . import (  # noqa: F401
    datasets,
    diagnostics,
    engines,
    groups,
    kernels,
    likelihoods,
    linalg,
    numpyro_internals,
    optim,
    stein,
    validation,
)
from ._version import __version__  # noqa: F401  (re-exported: ppl_sparsegp.__version__)
from .approximations import (
    CollapsedGP,
    GPModel,
    OrthogonallyDecoupledGP,
    SparseGP,
    SparseSpectrumGP,
    block_diagonal_covariance,
    choose_features,
    collapsed_elbo,
    diagonal_covariance,
    exact_log_marginal_likelihood,
    fit_spherical,
    full_covariance,
    inducing_guide,
    inducing_prior,
    map_lbfgs,
    marginal_spectral_gp,
    spectral_gp,
    two_kronecker_covariance,
)
from .conditionals import conditional
from .covariances import Kuf, Kuu, SufficientStatistics, sufficient_statistics
from .engines import fit_nuts, fit_svi
from .features import (
    ActivationFeatures,
    AdditiveFeatures,
    AdditiveOrthogonal,
    FourierFeatures,
    HarmonicFeatures,
    HermiteFeatures,
    ImportanceFourierFeatures,
    InducingFeature,
    InducingPoints,
    IntegralTransformFeatures,
    KroneckerFeatures,
    RandomFourierFeatures,
    SphericalHarmonicFeatures,
    TrigonometricFeatures,
)
from .features.base import refined_features
from .gaussian import StructuredNormal, gaussian_kl
from .grid import Grid
from .kernels import (
    Additive,
    ArcCosine,
    ChordalMatern,
    Matern12,
    Matern32,
    Matern52,
    Periodic,
    Product,
    SphereEmbedded,
    SquaredExponential,
)
from .likelihoods import Bernoulli, Gaussian, Poisson, RobustMax, Softmax, StudentT
from .parameters import Param, debug_checks, stack_modules

__all__ = [
    # kernels
    "SquaredExponential", "Matern12", "Matern32", "Matern52", "Periodic", "Additive", "Product", "SphereEmbedded",
    "ArcCosine", "ChordalMatern",
    # likelihoods
    "Gaussian", "Poisson", "Bernoulli", "StudentT", "Softmax", "RobustMax",
    # features and their dispatchers
    "InducingFeature", "InducingPoints", "FourierFeatures", "AdditiveFeatures", "KroneckerFeatures",
    "HermiteFeatures", "TrigonometricFeatures", "AdditiveOrthogonal", "HarmonicFeatures",
    "RandomFourierFeatures", "ImportanceFourierFeatures", "SphericalHarmonicFeatures", "IntegralTransformFeatures",
    "ActivationFeatures", "Kuu", "Kuf", "conditional", "sufficient_statistics",
    "SufficientStatistics",
    # q families
    "full_covariance", "diagonal_covariance", "block_diagonal_covariance", "two_kronecker_covariance",
    # approximations
    "GPModel", "SparseGP", "OrthogonallyDecoupledGP", "CollapsedGP", "SparseSpectrumGP",
    # primitives for own models
    "spectral_gp", "inducing_prior", "inducing_guide", "marginal_spectral_gp", "choose_features", "refined_features",
    # reference functions
    "collapsed_elbo", "exact_log_marginal_likelihood", "map_lbfgs", "fit_spherical",
    # fitting loops on NumPyro's engines
    "fit_svi", "fit_nuts",
    # templates, structured Gaussian, grids
    "Param", "StructuredNormal", "gaussian_kl", "Grid", "debug_checks", "stack_modules",
    # modules
    "numpyro_internals", "datasets", "diagnostics", "engines", "groups", "kernels", "likelihoods", "linalg", "optim",
    "stein", "validation",
]
