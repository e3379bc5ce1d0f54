"""The approximations: NumPyro model/guide pairs on one shared base, one file each.

* :mod:`.base`: templates → sample sites, validation, point guides (:class:`GPModel`);
* :mod:`.variational`: the q(u) families (full, diagonal, block-diagonal, two-Kronecker);
* :mod:`.sparse`: :class:`SparseGP` (SVGP under SVI, the MCMC formulation under NUTS; any likelihood,
  ``num_latent_gps``);
* :mod:`.collapsed`: :class:`CollapsedGP` (the Titsias bound, on data or on sufficient statistics) and the
  exact GP marginal likelihood;
* :mod:`.spectrum`: :class:`SparseSpectrumGP` (random or learnt frequencies);
* :mod:`.decoupled`: :class:`OrthogonallyDecoupledGP` (a cheap basis U and inducing points V for the
  residual orthogonal to it; SOLVE-GP, Tiao et al. 2023);
* :mod:`.primitives`: ``spectral_gp``, ``inducing_prior``, ``inducing_guide`` for people's own models;
* :mod:`.marginal`: ``marginal_spectral_gp``, Gaussian observations with the inducing variables integrated out;
  :mod:`.marginal_gaussian`: its site distribution :class:`MarginalGaussian` and the algebra;
* :mod:`.pilot`: ``choose_features``, the features of a user's model from a pilot fit to the data;
* :mod:`.spherical_fit`: :func:`fit_spherical`, spherical features on millions of rows (one-pass statistics).
"""
from .base import GPModel
from .collapsed import CollapsedGP, collapsed_elbo, exact_log_marginal_likelihood
from .decoupled import OrthogonallyDecoupledGP
from .map_estimate import map_lbfgs
from .marginal import marginal_spectral_gp
from .marginal_gaussian import MarginalGaussian
from .pilot import choose_features
from .primitives import inducing_guide, inducing_prior, spectral_gp
from .sparse import SparseGP
from .spectrum import SparseSpectrumGP
from .spherical_fit import SphericalFit, fit_spherical
from .variational import block_diagonal_covariance, diagonal_covariance, full_covariance, two_kronecker_covariance

__all__ = ["GPModel", "SparseGP", "OrthogonallyDecoupledGP", "CollapsedGP", "SparseSpectrumGP", "collapsed_elbo",
           "exact_log_marginal_likelihood", "map_lbfgs", "spectral_gp", "inducing_prior", "inducing_guide",
           "marginal_spectral_gp", "MarginalGaussian", "choose_features",
           "fit_spherical", "SphericalFit",
           "full_covariance", "diagonal_covariance", "block_diagonal_covariance", "two_kronecker_covariance"]
