"""The API reference, generated from ``__all__``: one page per public module of ``ppl_sparsegp``.

Every public module (no path component starting with ``_``) that has an ``__all__`` gets a page. Each name
of every ``__all__`` is documented exactly once, on the page of its *home*: the most specific public module
whose ``__all__`` lists the same object (for a class or function, the module that defines it when that
module lists it). So a name that is re-exported (``ppl_sparsegp.SparseGP`` is
``ppl_sparsegp.approximations.sparse.SparseGP``) has one entry, which the cross-reference resolver in
``conf.py`` finds under every public path. A new public name needs no edit of the docs: add it to its
module's ``__all__``. ``tests/docs/test_docs_api.py`` checks that every name is covered.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path

PACKAGE = "ppl_sparsegp"

# the reference's sections, in order: (title, module prefixes); a module goes to the section with the longest
# matching prefix, a module matching none goes to "Other modules". Each section is a page of its own (the
# sidebar shows the sections, each module under its section), the package's page stands alone.
SECTIONS = [
    ("The package", ["ppl_sparsegp"]),
    ("Kernels, likelihoods and templates", ["ppl_sparsegp.kernels", "ppl_sparsegp.likelihoods",
                                            "ppl_sparsegp.parameters", "ppl_sparsegp.validation", "ppl_sparsegp.grid",
                                            "ppl_sparsegp.groups"]),
    ("Features", ["ppl_sparsegp.features"]),
    ("Approximations, q families and primitives", ["ppl_sparsegp.approximations"]),
    ("Optimisers: natural gradients, AdamW, schedules", ["ppl_sparsegp.optim"]),
    ("Diagnostics", ["ppl_sparsegp.diagnostics"]),
    ("Fitting loops: SVI and NUTS", ["ppl_sparsegp.engines"]),
    ("Stein particle inference", ["ppl_sparsegp.stein"]),
    ("Fits, sharding and data", ["ppl_sparsegp.saving", "ppl_sparsegp.sharding", "ppl_sparsegp.datasets"]),
    ("Internals: dispatchers, structured linear algebra, NumPyro internals",
     ["ppl_sparsegp.covariances", "ppl_sparsegp.conditionals", "ppl_sparsegp.gaussian", "ppl_sparsegp.linalg",
      "ppl_sparsegp.numpyro_internals"]),
]

# the curated page ahead of the reference: the names a user needs first, as they are imported
MOST_USED = [
    ("A GP in your own NumPyro model", ["ppl_sparsegp.spectral_gp", "ppl_sparsegp.marginal_spectral_gp",
                                        "ppl_sparsegp.inducing_guide", "ppl_sparsegp.choose_features"]),
    ("Features: the inducing variables", ["ppl_sparsegp.FourierFeatures", "ppl_sparsegp.AdditiveFeatures",
                                          "ppl_sparsegp.KroneckerFeatures", "ppl_sparsegp.InducingPoints",
                                          "ppl_sparsegp.SphericalHarmonicFeatures"]),
    ("Kernels and likelihoods", ["ppl_sparsegp.Matern32", "ppl_sparsegp.SquaredExponential",
                                 "ppl_sparsegp.Gaussian", "ppl_sparsegp.Poisson", "ppl_sparsegp.Param"]),
    ("Whole-model approximations and fitting", ["ppl_sparsegp.SparseGP", "ppl_sparsegp.CollapsedGP",
                                                "ppl_sparsegp.map_lbfgs", "ppl_sparsegp.optim.NaturalGradient",
                                                "ppl_sparsegp.features.fourier_statistics.fourier_statistics"]),
    ("Diagnostics and saving", ["ppl_sparsegp.diagnostics.from_mcmc", "ppl_sparsegp.diagnostics.adequacy",
                                "ppl_sparsegp.diagnostics.refinement_check", "ppl_sparsegp.diagnostics.predict",
                                "ppl_sparsegp.saving.load_fit"]),
]


def public_modules() -> list[str]:
    """Every public module of the package that has an ``__all__``, sorted by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = importlib.import_module(PACKAGE)
        names = [PACKAGE] + [m.name for m in pkgutil.walk_packages(root.__path__, PACKAGE + ".")
                             if not any(part.startswith("_") for part in m.name.split("."))]
        return sorted(n for n in names if hasattr(importlib.import_module(n), "__all__"))


def _listed(module: str) -> dict:
    mod = importlib.import_module(module)
    return {name: getattr(mod, name) for name in mod.__all__}


def kind(obj) -> str:
    """The autodoc directive for an object."""
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "autoclass"
    if callable(obj):  # functions, jitted functions, custom_vjp functions, dispatchers
        return "autofunction"
    return "autodata"


def homes() -> dict[tuple[str, str], str]:
    """``{(module, name): home module}`` for every name of every public ``__all__`` that is not a module."""
    modules = public_modules()
    listed = {m: _listed(m) for m in modules}
    out = {}
    for module in modules:
        for name, obj in listed[module].items():
            if inspect.ismodule(obj):
                continue
            candidates = [m for m in modules if name in listed[m] and listed[m][name] is obj]
            defining = getattr(obj, "__module__", None)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and defining in candidates:
                out[(module, name)] = defining
            else:
                out[(module, name)] = max(candidates, key=lambda m: (m.count("."), m))
    return out


def pages() -> dict[str, list[tuple[str, str]]]:
    """``{module: [(name, directive), ...]}``: what each module's page documents (its home names, in the
    order of its ``__all__``)."""
    modules = public_modules()
    home = homes()
    out = {m: [] for m in modules}
    for module in modules:
        objs = _listed(module)
        for name in importlib.import_module(module).__all__:
            if home.get((module, name)) == module:
                out[module].append((name, kind(objs[name])))
    return out


def _private_base_members(cls) -> list[str]:
    """Public, documented members a class inherits from the package's private bases (``_PerDimension``
    gives ``AdditiveFeatures.from_data``): autodoc's ``:members:`` leaves them out, these pages list them."""
    names = []
    for klass in cls.__mro__[1:]:
        if klass.__name__.startswith("_") and klass.__module__.startswith(PACKAGE + "."):
            for name, value in vars(klass).items():
                if (not name.startswith("_") and name not in vars(cls) and name not in names
                        and inspect.getdoc(getattr(cls, name, None))):
                    names.append(name)
    return names


def title(module: str) -> str:
    """A module page's title: its name below the package (short enough for a heading on one line)."""
    return module if module == PACKAGE else module[len(PACKAGE) + 1:]


def _page(module: str, entries: list[tuple[str, str]], reexports: list[tuple[str, str]]) -> str:
    lines = [title(module), "=" * len(title(module)), "", f".. automodule:: {module}", "   :no-members:", ""]
    if entries:
        lines += [".. rubric:: Contents", "", ".. autosummary::", "   :nosignatures:", ""]
        lines += [f"   {name}" for name, _ in entries] + [""]
    if reexports:
        lines += [".. rubric:: Also importable from here", ""]
        lines += [f"* :py:obj:`{name} <{home}.{name}>` (documented in :py:mod:`{home}`)"
                  for name, home in reexports] + [""]
    for name, directive in entries:
        lines += [f".. {directive}:: {module}.{name}"]
        if directive == "autoclass":
            lines += ["   :members:", "   :show-inheritance:"]
            cls = getattr(importlib.import_module(module), name)
            extra = _private_base_members(cls)
            if extra:  # documented inside the class body, as its own members are
                lines += [""] + [f"   .. {'automethod' if callable(getattr(cls, m)) else 'autoattribute'}:: "
                                 f"{module}.{name}.{m}" for m in extra]
        if directive == "autodata":
            lines += ["   :no-value:"]
        lines += [""]
    return "\n".join(lines)


def _write(path: Path, text: str):
    if not path.exists() or path.read_text() != text:  # unchanged pages keep their timestamps
        path.write_text(text)


def generate(outdir) -> list[str]:
    """Write ``<module>.rst`` for every public module and ``index.md`` into ``outdir``; return the
    modules. Pages of modules that no longer exist are removed."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    content = pages()
    home = homes()
    modules = list(content)
    for module in modules:
        mod = importlib.import_module(module)
        reexports = sorted({(name, home[(module, name)]) for name in mod.__all__
                            if (module, name) in home and home[(module, name)] != module})
        _write(outdir / f"{module}.rst", _page(module, content[module], reexports))
    for old in outdir.glob("*.rst"):
        if old.stem not in content:
            old.unlink()
    for old in outdir.glob("section_*.md"):
        old.unlink()
    sections = SECTIONS + [("Other modules", [""])]

    def section(module):
        best = max(((len(p), i) for i, (_, prefixes) in enumerate(sections) for p in prefixes
                    if module == p or p == "" or module.startswith(p + ".")), default=(0, len(sections) - 1))
        return sections[best[1]][0] if module != PACKAGE else sections[0][0]

    index = ["# API reference", "",
             ("Start with the {doc}`most used names <most_used>`. The reference is generated from the docstrings: "
              "one page per public module, every name of every `__all__` documented once, on the page of the "
              "module that defines it (re-exports link there)."), "",
             "```{toctree}", ":maxdepth: 1", "", "most_used", PACKAGE]
    body = []
    for k, (name, _) in enumerate(sections[1:], start=1):
        members = [m for m in modules if m != PACKAGE and section(m) == name]
        if not members:
            continue
        slug = "section_" + re.sub(r"[^a-z]+", "_", name.split(":")[0].split(",")[0].lower()).strip("_")
        index.append(slug)
        body += [f"## {name}", ""] + [f"* {{doc}}`{m} <{m}>`" for m in members] + [""]
        _write(outdir / f"{slug}.md", "\n".join([f"# {name}", "", "```{toctree}", ":maxdepth: 1", ""]
                                                  + members + ["```", ""]))
    index += ["```", ""] + body
    _write(outdir / "most_used.md", most_used(home))
    _write(outdir / "index.md", "\n".join(index))
    return modules


def most_used(home=None) -> str:
    """The curated page: :data:`MOST_USED`'s names in tables (name, first docstring line), linked to their
    entries; a name that is not public raises (so the list cannot go stale)."""
    home = homes() if home is None else home
    lines = ["# Most used", "",
             ("The names a user needs first, as they are imported (`import ppl_sparsegp as psg`: "
              "`psg.spectral_gp`, `psg.diagnostics.adequacy`, ...). Everything else is in the full reference."), ""]
    for group, names in MOST_USED:
        lines += [f"## {group}", "", "```{eval-rst}", ".. autosummary::", "   :nosignatures:", ""]
        for dotted in names:
            module, _, name = dotted.rpartition(".")
            if (module, name) not in home:
                raise ValueError(f"apigen.MOST_USED: {dotted} is not a public name (not in {module}.__all__)")
            lines.append(f"   ~{home[(module, name)]}.{name}")
        lines += ["```", ""]
    return "\n".join(lines)
