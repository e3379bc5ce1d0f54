"""Concrete probabilistic models written with ppl_sparsegp, one file each.

Every ``models/<name>.py`` defines

* ``DESCRIPTION``: one line for ``python -m inference list``;
* ``add_arguments(parser)`` (optional): model-specific command-line flags;
* ``build(args) -> ModelSpec``: loads the data and returns the model with its defaults.

The runner (``python -m inference fit <name> --method svi|nuts|stein|map``) only uses :class:`ModelSpec`.
Imports run one way: ``inference → models → ppl_sparsegp``.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class ModelSpec:
    """What the runner needs to fit, diagnose and plot one model.

    :param name: model name.
    :param gp: the approximation: has ``model(X, y=None, **model_kwargs)``, ``guide`` and ``predict``.
    :param X: training inputs (N, D); ``y`` training targets (N,).
    :param X_test: optional held-out inputs; ``y_test`` their targets.
    :param model_kwargs: extra keyword arguments of ``gp.model`` / ``gp.guide`` (e.g. ``batch_size``).
    :param methods: the inference methods this model supports, first = default.
    :param defaults: per-method defaults, e.g. ``{"nuts": {"warmup": 500, "samples": 500}}``.
    :param var_names: hyperparameter sites to summarise (default: all sampled hyperparameters).
    :param plot: ``plot(spec, idata, path)`` writes a PNG (optional).
    :param evaluate: ``evaluate(spec, idata) -> dict`` of test metrics (optional).
    :param init: optional starting values of NUTS for some sites (``init_to_value``; the other sites
        start at the runner's default strategy), e.g. where the prior median is a bad start.
    :param extra: anything else a model wants to carry (scalers, grids).
    """

    name: str
    gp: Any
    X: Any
    y: Any
    X_test: Any = None
    y_test: Any = None
    model_kwargs: dict = field(default_factory=dict)
    methods: tuple = ("svi", "nuts")
    defaults: dict = field(default_factory=dict)
    var_names: list | None = None
    plot: Callable | None = None
    evaluate: Callable | None = None
    init: dict | None = None
    extra: dict = field(default_factory=dict)


def available() -> dict:
    """``{name: module}`` for every model file that defines ``build``."""
    out = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "build"):
            out[info.name] = module
    return out


def get(name: str):
    """The model module called ``name``; a clear error listing the known ones otherwise."""
    models = available()
    if name not in models:
        close = difflib.get_close_matches(name, models, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown model {name!r}; {hint}available models: {', '.join(sorted(models))}")
    return models[name]
