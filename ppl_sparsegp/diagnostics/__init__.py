r"""ArviZ diagnostics: every ArviZ call of the library lives here, one module per concept.

Inference results become :class:`arviz.InferenceData` with the groups

* ``posterior``: the hyperparameter sites and the inducing site (dim ``feature``);
* ``sample_stats``: for MCMC the sampler's extra fields in ArviZ's names (``diverging``, ``energy``,
  ``lp``, ``n_steps``, ``acceptance_rate``, ``step_size``, ``tree_depth``);
* ``log_likelihood``: the pointwise log likelihood (dim ``obs``). For :class:`~ppl_sparsegp.SparseGP`
  it is the per-observation term of the factor site ``y``,
  :math:`\ell_n = \mathbb E_{p(f_n\mid\mathbf u)}[\log p(y_n\mid f_n)]`, evaluated per draw [1]. The
  collapsed bound of :class:`~ppl_sparsegp.CollapsedGP` has no pointwise term: the group is omitted;
* ``posterior_predictive``: ``y`` (and the latent ``f``) drawn from the model with ``y=None``, one draw
  per posterior draw (for CollapsedGP from the per-draw predictive marginals
  :math:`\mathcal N(m_s, v_s + \sigma_s^2)`);
* for SVI (:func:`from_svi`) at large N the two pointwise groups hold a thinned, evenly spaced subset of
  the draws (at most :data:`MAX_POINTWISE` values per variable), each labelled by its posterior draw;
* ``observed_data`` (``y``) and ``constant_data`` (``X``, dims ``obs``, ``input``);
* for SVI, a group ``svi`` holding the optimised parameters and the loss (negative ELBO) trace (dim
  ``step``), so that :func:`predict` can use q(u) analytically after :func:`load`.

The modules: :mod:`~ppl_sparsegp.diagnostics.inference_data` (building InferenceData),
:mod:`~ppl_sparsegp.diagnostics.adequacy` (the adequacy check), :mod:`~ppl_sparsegp.diagnostics.summaries`
(summaries and files), :mod:`~ppl_sparsegp.diagnostics.prediction` (prediction from an InferenceData),
:mod:`~ppl_sparsegp.diagnostics.plots`, :mod:`~ppl_sparsegp.diagnostics.metrics` (predictive metrics) and
:mod:`~ppl_sparsegp.diagnostics.particles` (Stein particle results); every public name is importable from
``ppl_sparsegp.diagnostics`` itself.

:func:`adequacy` says, per posterior draw, how much of the prior variance at the data the features miss
(and the fix when too much); :func:`refinement_check` (:mod:`~ppl_sparsegp.diagnostics.refinement`) whether
the posterior moves when the features are refined, which a posterior the features displaced cannot pass;
:func:`mode_check` (:mod:`~ppl_sparsegp.diagnostics.modes`) whether the draws sit in the exact marginal's
main mode, found from dispersed starts (the refinement check is local: a minor mode passes it).
:func:`summary` (R-hat, ESS [2]), :func:`save` / :func:`load` (netCDF),
:func:`predict` and :func:`predictive_metrics` from an InferenceData, the metrics :func:`rmse`,
:func:`nlpd`, :func:`mixture_nlpd`, :func:`mixture_metrics`, :func:`categorical_nlpd`, the Stein particle
results (:func:`stein_inference_data`, :func:`stein_diagnostics`) and the plots :func:`plot_trace`,
:func:`plot_fit_1d`, :func:`plot_spectral_density`, :func:`plot_adequacy` complete the module.

References:
    1. Hensman, Matthews, Filippone, Ghahramani (2015), MCMC for variationally sparse Gaussian processes.
    2. Vehtari, Gelman, Simpson, Carpenter, Bürkner (2021), Rank-normalization, folding, and
       localization: an improved R-hat for assessing convergence of MCMC.
"""

from __future__ import annotations

from .adequacy import add_adequacy, adequacy
from .inference_data import MAX_POINTWISE, SVI_GROUP, from_mcmc, from_samples, from_svi  # noqa: F401  (re-exported)
from .metrics import categorical_nlpd, mixture_metrics, mixture_nlpd, nlpd, rmse
from .modes import mode_check
from .particles import stein_diagnostics, stein_inference_data
from .plots import plot_adequacy, plot_fit_1d, plot_spectral_density, plot_trace
from .prediction import fitted_params, posterior_samples, predict, predictive_metrics, svi_params  # noqa: F401  (re-exported)
from .refinement import refinement_check
from .summaries import load, save, summary

__all__ = ["from_samples", "from_mcmc", "from_svi", "summary", "save", "load", "posterior_samples",
           "svi_params", "predict", "predictive_metrics", "plot_trace", "plot_fit_1d",
           "adequacy", "add_adequacy", "refinement_check", "mode_check", "rmse", "nlpd",
           "mixture_nlpd", "mixture_metrics", "categorical_nlpd",
           "stein_inference_data", "stein_diagnostics", "plot_spectral_density", "plot_adequacy"]
