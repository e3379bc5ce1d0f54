r"""The fit file: :func:`save_fit`, :func:`load_fit`, :func:`load_metadata` (the format: the package
docstring of :mod:`ppl_sparsegp.saving`; the object tree's encoding: ``ppl_sparsegp.saving.encoding``).
Their public home is :mod:`ppl_sparsegp.saving`, whose ``__all__`` lists them (this file has none, so the API
reference documents them there).

References:
    1. NumPy, ``numpy.lib.format``: the ``.npy`` / ``.npz`` formats (dtype-exact, pickle-free arrays).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Annotated, Any

import jax
import numpy as np

from ..approximations.base import GPModel
from ..approximations.common import require_params
from ..diagnostics.traces import check_draws_match_model
from ..validation import InstanceOf, IsCallable, OrNone, Path, validated, warn_user
from .encoding import Decoder, Encoder, FitFileError, first_difference, library_version, same, state

FORMAT = "ppl_sparsegp.fit"
#: the version this library writes; it reads every version up to this one
FORMAT_VERSION = 1
HEADER = "fit.json"


def _check_params(params, who: str) -> dict:
    if not isinstance(params, Mapping):
        raise TypeError(f"{who}: params must be a dict (svi_result.params), got {type(params).__name__}")
    for k, v in params.items():
        if not isinstance(k, str):
            raise TypeError(f"{who}: params keys must be strings, got {k!r}")
        if not isinstance(v, (jax.Array, np.ndarray, np.generic, int, float)) or isinstance(v, jax.core.Tracer):
            raise TypeError(f"{who}: params[{k!r}] must be an array, got {type(v).__name__}")
    return dict(params)


def _own_model(model, samples, model_args):
    """An own model's fit: its draws ``{site: (draws, ...)}`` and the arguments prediction needs, checked."""
    if not callable(model) or not isinstance(samples, Mapping) or isinstance(getattr(model, "__self__", None), GPModel):
        raise TypeError(f"save_fit: gp must be an approximation (SparseGP, CollapsedGP, SparseSpectrumGP; itself, not "
                        f"its .model) or the NumPyro model function of an own-model fit with its samples {{site: "
                        f"(draws, ...)}} (mcmc.get_samples()), got {type(model).__name__} and {type(samples).__name__}")
    counts = {k: int(np.shape(v)[0]) if np.ndim(v) else 0 for k, v in _check_params(samples, "save_fit").items()}
    if len(set(counts.values())) > 1 or 0 in counts.values():
        raise ValueError(f"save_fit: samples needs the same number of draws (≥ 1) on every site, got {counts}")
    if model_args is not None and not isinstance(model_args, Mapping):
        raise TypeError(f"save_fit: model_args must be a dict {{argument name: value}}, "
                        f"got {type(model_args).__name__}")
    return samples, dict(model_args or {})



def _versions() -> dict:
    import numpyro

    return {"ppl_sparsegp": library_version(), "jax": jax.__version__, "numpyro": numpyro.__version__}


_GP = InstanceOf(GPModel, type(lambda: None), what="an approximation (SparseGP, CollapsedGP, SparseSpectrumGP; itself, "
                 "not its .model) or an own model function with its samples")
_PARAMS = InstanceOf(Mapping, what="a dict: svi_result.params, or for a model function its samples {site: (draws, "
                     "...)} (mcmc.get_samples())")


@validated
def save_fit(path: Path, gp: Annotated[Any, _GP], params: Annotated[dict, _PARAMS], *,
             metadata: Annotated[dict | None, OrNone(InstanceOf(dict))] = None,
             model_args: Annotated[dict | None, OrNone(InstanceOf(Mapping, what="a dict {argument name: value}"))]
             = None) -> str:
    """Write the approximation ``gp`` and the fitted ``params`` to the ``.npz`` file ``path``.

    :param path: the file to write (any suffix; written atomically: a failed save leaves no file).
    :param gp: a :class:`~ppl_sparsegp.GPModel` (SparseGP, CollapsedGP, SparseSpectrumGP); a collapsed
        model holding training data (``gp.with_data(X, y)``) or precomputed statistics keeps them. Or an
        own model's function (``spectral_gp`` inside): its name is kept, not its code; :func:`load_fit`
        returns ``(model_args, samples)`` for ``Predictive(model, samples)(key, **model_args)``.
    :param params: the params of an SVI fit of ``gp.guide`` (``svi_result.params``) or of a MAP fit
        (``{"<site>_map": value}``); every param of the guide must be there. For a model function: its
        draws (``mcmc.get_samples()``); ``model_args``: the arguments prediction passes it (a dict).
    :param metadata: JSON-serialisable information to keep with the fit (steps, loss, data set, ...);
        read it back with :func:`load_metadata`.
    :returns: the path written.
    :raises FitFileError: when something in ``gp`` cannot be described (a user-defined q family, a class
        outside ppl_sparsegp and numpyro.distributions) or the description does not rebuild the same
        approximation.
    :raises ValueError: when ``params`` lacks a param of ``gp.guide``; ``TypeError`` for wrong types.
    """
    own = not isinstance(gp, GPModel)
    params, model_args = _own_model(gp, params, model_args) if own else (_check_params(params, "save_fit"), None)
    if not own:
        require_params(gp, "save_fit", params)
    try:
        meta_json = json.loads(json.dumps(metadata if metadata is not None else {}, allow_nan=True))
    except (TypeError, ValueError) as e:
        raise TypeError(f"save_fit: metadata must be JSON-serialisable (numbers, strings, lists, dicts): {e}") from None
    if not isinstance(meta_json, dict):
        raise TypeError(f"save_fit: metadata must be a dict, got {type(metadata).__name__}")

    enc = Encoder()
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(),
              "model": enc(model_args, "model_args") if own else enc(gp, "model"),
              "params": {k: enc(v, f"params.{k}") for k, v in params.items()}, "metadata": meta_json}
    if own:
        header["own_model"] = f"{getattr(gp, '__module__', '')}.{getattr(gp, '__qualname__', type(gp).__name__)}"
    text = json.dumps(header, allow_nan=True)
    # the round trip, in memory, before anything is written: a fit that saves also loads, identically
    back_gp, back_params = _decode(json.loads(text), enc.arrays, "save_fit (round-trip check)")
    before, after = (model_args, back_gp) if own else (state(gp, back_gp), state(back_gp, gp))
    if not same(before, after):
        name = first_difference(before, after)
        raise FitFileError(f"save_fit: {'model_args' if own else type(gp).__name__}.{name} does not survive the round "
                           f"trip through the fit description; the fit cannot be saved faithfully")
    if not same(params, back_params):
        raise FitFileError(f"save_fit: params[{first_difference(params, back_params)!r}] does not survive the "
                           f"round trip")

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fit-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{HEADER: np.array(text)}, **enc.arrays)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> the permissions of an ordinary new file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def _read(path):
    """(header dict, arrays dict) of a fit file, with the format checks."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no fit file at {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:  # not a zip / npz at all
        raise FitFileError(f"{path} is not a fit file written by save_fit (not a NumPy .npz archive: {e})") from None
    if HEADER not in arrays:
        raise FitFileError(f"{path} has no {HEADER!r} header: not a fit file written by save_fit")
    try:
        header = json.loads(str(arrays.pop(HEADER)[()]))
    except (ValueError, TypeError) as e:
        raise FitFileError(f"{path}: the {HEADER!r} header is not valid JSON ({e}): a damaged file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FitFileError(f"{path}: the header does not say format {FORMAT!r}: not a fit file written by save_fit")
    version = header.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FitFileError(f"{path}: the header's format_version is {version!r}, not a positive integer: a damaged "
                           f"file")
    if version > FORMAT_VERSION:
        raise FitFileError(f"{path} has fit format version {version}, newer than this ppl_sparsegp "
                           f"({library_version()}) can read (up to {FORMAT_VERSION}; the file was written by "
                           f"{header.get('versions', {}).get('ppl_sparsegp', 'an unknown version')}): upgrade "
                           f"ppl_sparsegp to load it")
    missing = [k for k in ("model", "params", "metadata", "versions") if k not in header]
    if missing:
        raise FitFileError(f"{path}: the header lacks {', '.join(repr(k) for k in missing)} (a damaged or "
                           f"hand-edited file)")
    return header, arrays


def _decode(header, arrays, source):
    written_by = f"ppl_sparsegp {header.get('versions', {}).get('ppl_sparsegp', '(unknown version)')}"
    dec = Decoder(arrays, source, written_by)
    gp = dec(header["model"], "model")
    if "own_model" in header:  # an own model's fit: (model_args, samples)
        return gp, {k: dec(v, f"params.{k}") for k, v in header["params"].items()}
    if not isinstance(gp, GPModel):
        raise FitFileError(f"{source}: model describes a {type(gp).__name__}, not an approximation")
    if not isinstance(header["params"], dict):
        raise FitFileError(f"{source}: params is not a JSON object")
    params = {k: dec(v, f"params.{k}") for k, v in header["params"].items()}
    try:
        require_params(gp, "load_fit", params)
    except ValueError as e:
        raise FitFileError(f"{source}: the params do not match the approximation's guide: {e}") from None
    return gp, params


@validated
def load_fit(path: Path, *,
             model: Annotated[Any, OrNone(IsCallable())] = None) -> tuple[GPModel | dict, dict]:
    """Read a fit written by :func:`save_fit`: ``(gp, params)`` such that ``gp.predict(X_new,
    params=params)`` equals the saved approximation's prediction; for an own model's fit
    ``(model_args, samples)``, with ``Predictive(model, samples)(key, **model_args)`` equal to the saved
    fit's (the model function comes from the user's code).

    Every module read is held to its constructor's value checks (a positive field positive, every value
    finite), so an edited header cannot load a kernel of negative variance.

    :param path: the fit file.
    :param model: for an own model's fit, the model function it will predict with: its sample sites are
        checked against the fit's draws (a site of the fit the model lacks is refused, naming the sites,
        rather than drawn from its prior by ``Predictive``).
    :returns: ``(gp, params)``: the approximation and its params dict (arrays); for an own model's fit
        ``(model_args, samples)``: the saved arguments dict and the draws ``{site: (draws, ...)}``.

    Arrays come back with the dtypes they were saved with (a float64 fit in a process without
    ``jax_enable_x64`` is rounded to float32 by JAX: a warning says so).

    :raises FileNotFoundError: when there is no file at ``path``.
    :raises FitFileError: (a ``ValueError``) for a file that is not a fit, one of a newer format version,
        one lacking a key, or describing a class that no longer exists (or a module whose fields
        changed), a module whose values its constructor refuses, or params that do not match the
        approximation's guide, or (with ``model``) draws of sites the model does not have; the message
        names which.
    """
    header, arrays = _read(path)
    if not jax.config.jax_enable_x64 and any(a.dtype in (np.float64, np.complex128, np.int64)
                                             for a in arrays.values()):
        warn_user(f"{os.fspath(path)} holds 64-bit arrays but jax_enable_x64 is off: JAX rounds them to 32 "
                  f"bits, so predictions differ from the saved fit's; call "
                  f"jax.config.update('jax_enable_x64', True) before load_fit", UserWarning)
    gp, params = _decode(header, arrays, os.fspath(path))
    if model is not None and "own_model" in header:
        try:
            check_draws_match_model(model, gp, params, header["own_model"])
        except ValueError as e:
            raise FitFileError(f"{os.fspath(path)}: {e}") from None
    return gp, params


@validated
def load_metadata(path: Path) -> dict:
    """The header of a fit file without building anything: ``metadata`` (as given to :func:`save_fit`),
    ``format_version``, ``versions`` (ppl_sparsegp, jax, numpyro that wrote it) and ``approximation``
    (the class path)."""
    header, _ = _read(path)
    model = header["model"]
    return {"metadata": header["metadata"], "format_version": header["format_version"],
            "versions": header["versions"], "model_function": header.get("own_model"),
            "approximation": model.get("__object__") if isinstance(model, dict) else None}
