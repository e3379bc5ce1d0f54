"""Plots written to PNG files: trace plots, a 1-D fit with its band, learned spectral densities, the
residual check's per-draw shares."""
from __future__ import annotations

import os
import warnings
from typing import Annotated, Any

import jax
import numpy as np

from ..validation import ArrayOf, Count, InstanceOf, Key, Names, OrNone, Path, SequenceOf, Tolerance, validated
from ._arviz import az

_VALUES = Annotated[Any, ArrayOf(rank=(1, 2))]
_MAYBE_VALUES = Annotated[Any, OrNone(ArrayOf(rank=(1, 2)))]
_TEXT = Annotated[str, InstanceOf(str, what="a string")]

__all__ = ["plot_trace", "plot_fit_1d", "plot_spectral_density", "plot_adequacy"]

_CHECK = InstanceOf(dict, what="the dict that diagnostics.adequacy(...) returned")


@validated
def plot_trace(idata: Annotated[Any, InstanceOf("arviz.InferenceData", what="an arviz.InferenceData")],
               var_names: Annotated[Any, Names()], path: Path) -> str:
    """``az.plot_trace`` of ``var_names`` written to the PNG ``path``.

    :param idata: an InferenceData; ``var_names``: the posterior variables to plot.
    :param path: the PNG file to write.
    :returns: the path."""
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        axes = az.plot_trace(idata, var_names=var_names, compact=True)
    fig = np.ravel(axes)[0].figure
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@validated
def plot_fit_1d(path: Path, x: _VALUES, y: _VALUES, x_pred: _VALUES, mean: _VALUES, sd: _VALUES, *,
                x_test: _MAYBE_VALUES = None, y_test: _MAYBE_VALUES = None,
                title: Annotated[str | None, OrNone(InstanceOf(str, what="a string"))] = None, xlabel: _TEXT = "x",
                ylabel: _TEXT = "y",
                shade: Annotated[Any, OrNone(SequenceOf(ArrayOf(rank=1, shape=(2,)), min_len=0))] = None) -> str:
    """Data, held-out data and the predictive mean ± 2 sd on a 1-D grid, written to the PNG ``path``.

    :param path: the PNG file to write.
    :param x: training inputs (N,); ``y``: training targets (N,).
    :param x_pred: the grid (P,); ``mean``, ``sd``: the predictive mean and sd on it (P,).
    :param x_test: optional held-out inputs; ``y_test``: their targets.
    :param title: the plot's title; ``xlabel``, ``ylabel``: the axes' labels.
    :param shade: optional list of ``(lo, hi)`` x-intervals to shade (e.g. removed segments).
    :returns: the path.
    :raises ValueError: when x and y, x_pred, mean and sd, or x_test and y_test differ in size.
    """
    _same_sizes(x=x, y=y)
    _same_sizes(x_pred=x_pred, mean=mean, sd=sd)
    if (x_test is None) != (y_test is None):
        raise ValueError("plot_fit_1d: x_test and y_test go together; pass both or neither")
    if x_test is not None:
        _same_sizes(x_test=x_test, y_test=y_test)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x_pred, mean, sd = (np.ravel(np.asarray(a)) for a in (x_pred, mean, sd))
    for lo, hi in shade or ():
        ax.axvspan(lo, hi, color="0.9", zorder=0)
    ax.fill_between(x_pred, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.25, label="mean ± 2 sd")
    ax.plot(x_pred, mean, color="C0", lw=1.5, label="predictive mean")
    ax.plot(np.ravel(x), np.ravel(y), "k.", ms=3, label="training data")
    if x_test is not None:
        ax.plot(np.ravel(x_test), np.ravel(y_test), ".", color="C3", ms=3, label="held-out data")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=100)
    return path


def _same_sizes(**arrays):
    sizes = {k: int(np.size(v)) for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"plot_fit_1d: {', '.join(sizes)} must have the same number of values, got {sizes}")


@validated
def plot_spectral_density(frequencies: Annotated[Any, ArrayOf(rank=(2, 3, 4, 5))],
                          prior: Annotated[Any, InstanceOf("numpyro.distributions.Distribution",
                                                           what="the frequency prior (a NumPyro distribution)")],
                          path: Annotated[Any, OrNone(Path.__metadata__[0])] = None, *, max_dims: Count = 4,
                          rng_key: Annotated[Any, OrNone(Key(allow_int=False))] = None):
    """Histogram of learned frequencies (pooled over particles) against the prior, per input dimension.

    :param frequencies: (..., D) learned unit-lengthscale frequencies (any leading dims, pooled).
    :param prior: the frequency prior, a NumPyro distribution (its samples give the reference histogram).
    :param path: write a PNG there (else return the figure).
    :param max_dims: plot at most this many input dimensions.
    :param rng_key: key of the prior draws (default ``PRNGKey(0)``).
    :returns: the path, or the matplotlib figure when ``path`` is None.
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    W = np.asarray(frequencies).reshape(-1, np.shape(frequencies)[-1])
    if prior.event_shape and prior.event_shape[-1] != W.shape[1]:
        raise ValueError(f"plot_spectral_density: the frequencies have D = {W.shape[1]} input dimensions, the prior's "
                         f"draws {prior.event_shape[-1]} (event shape {prior.event_shape}); pass the prior of these "
                         "frequencies (e.g. gp.feature.frequencies)")
    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    ref = np.asarray(prior.sample(key, (max(1, 20000 // int(np.prod(prior.event_shape[:-1] or (1,)))),)))
    ref = ref.reshape(-1, W.shape[1])
    D = min(W.shape[1], max_dims)
    fig, axes = plt.subplots(1, D, figsize=(3.2 * D, 2.8), squeeze=False)
    for d, ax in enumerate(axes[0]):
        lo, hi = np.quantile(np.concatenate([W[:, d], ref[:, d]]), [0.005, 0.995])
        bins = np.linspace(lo, hi, 40)
        ax.hist(ref[:, d], bins=bins, density=True, histtype="step", color="k", label="prior")
        ax.hist(W[:, d], bins=bins, density=True, alpha=0.6, label="learned")
        ax.set_xlabel(f"$\\omega_{d}$ (unit lengthscale)")
    axes[0][0].legend()
    axes[0][0].set_ylabel("density")
    fig.tight_layout()
    if path is None:
        return fig
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@validated
def plot_adequacy(check: Annotated[Any, _CHECK], path: Path, *, tolerance: Tolerance = 0.05) -> str:
    """The residual check of :func:`~ppl_sparsegp.diagnostics.adequacy` drawn: a histogram of the share of
    the prior variance at the data that the features miss, one value per posterior draw, with the median
    (what the check judges), the 95% quantile and the tolerance, written to the PNG ``path``.

    The share of draw s is :math:`r_s = \\sum_n (k_{nn} - [Q_{ff}]_{nn}) / \\sum_n k_{nn}` (see
    :func:`~ppl_sparsegp.diagnostics.adequacy`); the check passes when the median is at most ``tolerance``.

    :param check: the dict :func:`~ppl_sparsegp.diagnostics.adequacy` returned (its ``residual_fraction``
        (draws,), ``median``, ``q95`` and ``ok``).
    :param path: the PNG file to write.
    :param tolerance: the tolerance the check was run with (``adequacy``'s default 0.05), drawn as a line.
    :returns: the path.
    :raises ValueError: ``check`` lacks ``residual_fraction`` (not a result of ``adequacy``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if "residual_fraction" not in check:
        raise ValueError("plot_adequacy: check has no 'residual_fraction': pass the dict that "
                         "diagnostics.adequacy(...) returned (refinement_check's result has no per-draw shares)")
    r = 100 * np.ravel(np.asarray(check["residual_fraction"], dtype=float))
    fig = Figure(figsize=(6.4, 2.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    hi = max(float(r.max()), 100 * tolerance) * 1.1
    ax.hist(r, bins=np.linspace(0.0, hi, 30), color="C0", alpha=0.7, label=f"{r.size} posterior draws")
    ax.axvline(100 * float(check["median"]), color="C0", lw=2, label="median (judged)")
    ax.axvline(100 * float(check["q95"]), color="C0", lw=1, ls="--", label="95% quantile")
    ax.axvline(100 * tolerance, color="C3", lw=2, ls=":", label=f"tolerance {100 * tolerance:g}%")
    ax.set_xlabel("prior variance at the data the features miss (%)")
    ax.set_ylabel("draws")
    ax.set_title("residual check: " + ("passes" if check.get("ok") else "fails"), fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=100)
    return path
