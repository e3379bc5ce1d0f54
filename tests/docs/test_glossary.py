"""One name per concept (``docs/glossary.md``): no public signature uses a retired name, and the glossary
page lists every name this test enforces.

Walks every public module of ``ppl_sparsegp`` (no underscore in its dotted path), every name in its
``__all__``, and for a class its constructor and its public methods (those defined in ``ppl_sparsegp``);
reads each parameter list with :func:`inspect.signature`. NumPyro's own API is exempt: an override of
``Distribution.sample(self, key, sample_shape)`` keeps NumPyro's parameter name."""
import importlib
import inspect
import pathlib
import pkgutil
import re

import numpyro.distributions as dist
import pytest

import ppl_sparsegp

GLOSSARY = pathlib.Path(__file__).resolve().parents[2] / "docs" / "glossary.md"

# retired parameter name -> the one name that replaces it (the glossary's "retired names" table)
RETIRED = {
    "noise": "noise_scale",  # or noise_variance, for what it is
    "s2": "noise_variance",
    "key": "rng_key",
    "seed": "rng_key",
    "maxiter": "num_steps",
    "steps": "num_steps",
    "n_features": "num_features",
    "num_inducing": "num_features",
    "M": "num_features",
    "m": "num_features",
    "data_box": "lower",  # and upper: a box is lower/upper
}
# the names of the glossary's table that the signatures use (each must be on the page)
ENFORCED = ("noise_scale", "noise_variance", "rng_key", "num_steps", "num_features", "num_frequencies",
            "max_degree", "max_features", "nu")


def _public_modules():
    yield ppl_sparsegp
    for info in pkgutil.walk_packages(ppl_sparsegp.__path__, "ppl_sparsegp."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        yield importlib.import_module(info.name)


def _callables():
    """(qualified name, callable) for every public callable: functions, classes, their public methods."""
    seen = set()
    for mod in _public_modules():
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if obj is None or id(obj) in seen or inspect.ismodule(obj):
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                yield f"{obj.__module__}.{obj.__qualname__}", obj
                done = set()
                for klass in obj.__mro__:  # inherited methods too (from private bases as well)
                    if not klass.__module__.startswith("ppl_sparsegp"):
                        continue
                    for attr, value in vars(klass).items():
                        if attr.startswith("_") or attr in done:
                            continue
                        done.add(attr)
                        func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                        if inspect.isfunction(func) and func.__module__.startswith("ppl_sparsegp"):
                            exempt = attr == "sample" and issubclass(obj, dist.Distribution)  # NumPyro's API
                            if not exempt:
                                yield f"{obj.__module__}.{obj.__qualname__}.{attr}", func
            elif callable(obj) and getattr(obj, "__module__", "").startswith("ppl_sparsegp"):
                yield f"{obj.__module__}.{name}", obj


def _parameters(obj):
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


def test_walk_reaches_the_public_surface():
    """The walk sees the families, the approximations and their methods (a walk that sees nothing passes
    everything)."""
    names = {q for q, _ in _callables()}
    for expected in ("ppl_sparsegp.features.fourier.FourierFeatures.from_data",
                     "ppl_sparsegp.approximations.sparse.SparseGP.elbo",
                     "ppl_sparsegp.likelihoods.Gaussian.variational_expectation",
                     "ppl_sparsegp.approximations.marginal.marginal_spectral_gp"):
        assert expected in names
    assert len(names) > 200


def test_no_public_signature_uses_a_retired_name():
    offenders = [f"{q}({p}): use {RETIRED[p]}" for q, obj in _callables() for p in _parameters(obj) if p in RETIRED]
    assert not offenders, "retired parameter names (docs/glossary.md):\n" + "\n".join(sorted(offenders))


def test_feature_domains_are_lower_upper():
    """A box is ``lower``/``upper`` (the glossary's domains): no public callable of ``ppl_sparsegp.features``
    takes a bare ``a`` or ``b`` (FourierFeatures' box was ``a, b``), and the two families with a box take
    ``lower`` and ``upper``."""
    offenders = [f"{q}({p})" for q, obj in _callables() if q.startswith("ppl_sparsegp.features.")
                 for p in _parameters(obj) if p in ("a", "b")]
    assert not offenders, "use lower/upper for a box:\n" + "\n".join(offenders)
    for family in (ppl_sparsegp.FourierFeatures, ppl_sparsegp.SphericalHarmonicFeatures):
        assert {"lower", "upper"} <= set(_parameters(family)), family.__name__


def test_from_data_takes_a_kernel_not_nu():
    """``from_data(X, kernel, ...)``: the kernel template's class gives ν; no family takes ``nu=`` or a
    bare ``lengthscale`` as its second argument."""
    offenders = []
    for q, obj in _callables():
        if q.endswith(".from_data"):
            params = [p for p in _parameters(obj) if p != "cls"]
            if params[:2] != ["X", "kernel"] or "nu" in params:
                offenders.append(f"{q}{tuple(params)}")
    assert not offenders, "from_data(X, kernel, *, ...):\n" + "\n".join(offenders)


@pytest.fixture(scope="module")
def glossary():
    return GLOSSARY.read_text()


def test_glossary_lists_every_enforced_name(glossary):
    table, _, retired = glossary.partition("## Retired names")
    assert retired, "docs/glossary.md needs a '## Retired names' section"
    for name in ENFORCED:
        assert re.search(rf"^\|\s*[^|]*\|\s*`{name}`", table, re.M), f"{name} is not a row of the glossary's table"
    for old, new in RETIRED.items():
        assert re.search(rf"`{old}`[^\n]*`{new}`", retired), f"the retired names do not give `{old}` -> `{new}`"
