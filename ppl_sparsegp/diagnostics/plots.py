"""Plots written to PNG files: trace plots, a 1-D fit with its band, learned spectral densities."""
from __future__ import annotations

import os
import warnings

import jax
import numpy as np

from ._arviz import az

__all__ = ["plot_trace", "plot_fit_1d", "plot_spectral_density"]


def plot_trace(idata, var_names, path) -> str:
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


def plot_fit_1d(path, x, y, x_pred, mean, sd, *, x_test=None, y_test=None, title=None, xlabel="x",
                ylabel="y", shade=None) -> str:
    """Data, held-out data and the predictive mean ± 2 sd on a 1-D grid, written to the PNG ``path``.

    :param path: the PNG file to write.
    :param x: training inputs (N,); ``y``: training targets (N,).
    :param x_pred: the grid (P,); ``mean``, ``sd``: the predictive mean and sd on it (P,).
    :param x_test: optional held-out inputs; ``y_test``: their targets.
    :param title: the plot's title; ``xlabel``, ``ylabel``: the axes' labels.
    :param shade: optional list of ``(lo, hi)`` x-intervals to shade (e.g. removed segments).
    :returns: the path.
    """
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


def plot_spectral_density(frequencies, prior, path=None, *, max_dims: int = 4, rng_key=None):
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
