r"""Saved fits that predict: an approximation's configuration and its fitted params in one file.

A *fit* is what ``gp.predict`` needs: the approximation (its class and
constructor arguments: feature, kernel, likelihood, mean and options such as ``whiten``, ``q_cov``,
``name``; templates whose fields hold numbers, arrays, NumPyro priors or :class:`~ppl_sparsegp.Param`
objects with their constraints; the training data or statistics a collapsed model conditions on) and
the params dict of an SVI or MAP fit (``svi_result.params``; ``{"<site>_map": value}``).
:func:`save_fit` writes both into one ``.npz`` file and :func:`load_fit` rebuilds them, so that

.. math::

    \texttt{load\_fit(path)} = (g', \theta')\quad\Longrightarrow\quad
    g'.\texttt{predict}(X_*, \texttt{params}=\theta') = g.\texttt{predict}(X_*, \texttt{params}=\theta)

bit for bit (same float dtype; in a float32 process a float64 fit is rounded, with a warning).

**The file.** A NumPy ``.npz`` archive (read with ``allow_pickle=False``: no pickled objects) holding

* ``fit.json``: a JSON header ``{"format": "ppl_sparsegp.fit", "format_version": 1, "model": ...,
  "params": ..., "metadata": ..., "versions": ...}``; ``model`` describes the object tree: a
  :class:`~ppl_sparsegp.parameters.Module` as ``{"__module__": "ppl_sparsegp.kernels.Matern52",
  "fields": {...}}`` (its ``_params`` and ``_static`` fields), anything else built by its constructor
  as ``{"__object__": "numpyro.distributions.LogNormal", "args": {...}}`` (NumPyro distributions,
  transforms and constraints, :class:`~ppl_sparsegp.Param`, the approximation, groups, statistics), a
  NumPyro constraint singleton as ``{"__constraint__": "positive"}``, tuples as ``{"__tuple__": [...]}``
  and arrays as ``{"__array__": "array_3", "kind": "jax"}``;
* ``array_<i>``: those arrays, with their dtypes (float64 stays float64).

Loading instantiates only classes of ``ppl_sparsegp`` and ``numpyro.distributions`` (a
:class:`FitFileError` otherwise), and refuses, naming the problem, a file of a newer format version,
one with a missing key, a class that no longer exists, a module whose fields changed (a static field
added since, listed in the class's ``_static_defaults``, takes its default: e.g. a spherical
feature's ``vanishing``; a field renamed since, listed in ``_renamed_fields``, is read under its new
name: e.g. FourierFeatures' ``a, b``, now ``lower, upper``), or params that do not match the
approximation's guide. :func:`save_fit`
checks before writing that the description rebuilds the same approximation (every attribute equal), so
a fit that saves also loads.

Example::

    save_fit("fit.npz", gp, svi_result.params, metadata={"steps": 2000})
    gp, params = load_fit("fit.npz")          # in another process
    gp.predict(X_new, params=params)["y_mean"]

References:
    1. NumPy, ``numpy.lib.format``: the ``.npy`` / ``.npz`` formats (dtype-exact, pickle-free arrays).
"""
from .encoding import FitFileError
from .files import FORMAT, FORMAT_VERSION, load_fit, load_metadata, save_fit

__all__ = ["save_fit", "load_fit", "load_metadata", "FitFileError", "FORMAT", "FORMAT_VERSION"]
