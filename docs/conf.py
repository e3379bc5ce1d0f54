"""Sphinx configuration of the ppl_sparsegp site.

Generated at every build (not in git): ``api/`` (one page per public module, from ``__all__``: see
``_ext/apigen.py``) and ``examples/<name>.py`` (a copy of every ``notebooks/*.py``, executed by myst-nb
through jupytext at the tests' reduced size, ``QUICK=1``; ``PPL_SPARSEGP_DOCS_FULL=1``: at full size).
``PPL_SPARSEGP_DOCS_EXECUTE=0`` builds without executing anything (CI: ``make docs-fast``).
Nothing is fetched from the network (no intersphinx): references to other projects'
objects are ignored explicitly in ``nitpick_ignore_regex``.
"""
import importlib
import os
import re
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

import apigen  # noqa: E402

import ppl_sparsegp  # noqa: E402

project = "ppl_sparsegp"
author = "the ppl_sparsegp authors"
copyright = "2026, the ppl_sparsegp authors"
release = version = ppl_sparsegp.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_copybutton",
    "pagefigures",  # the figures the pages show, made by the build (_ext/pagefigures.py)
]
exclude_patterns = ["_build", "_ext", "_generated", "_figures", "conf.py", "jupyter_execute", ".jupyter_cache"]
templates_path = []

# --- the API reference --------------------------------------------------------------------------------
apigen.generate(DOCS / "api")
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # shapes and types are in the docstrings; signatures stay readable
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = True
autosummary_generate = False  # the pages are apigen's; autosummary only draws the tables
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
add_module_names = False
python_display_short_literal_types = True

# --- the examples: every notebook in notebooks/, by glob ---------------------------------------------
EXAMPLES = DOCS / "examples"
EXAMPLES.mkdir(exist_ok=True)
_AGG = re.compile(r"^matplotlib\.use\([\"']Agg[\"']\)[^\n]*\n", re.M)
_notebooks = sorted((ROOT / "notebooks").glob("*.py"))
for nb in _notebooks:
    # in a Jupyter kernel the figures display inline: the scripts' switch to the Agg backend is dropped
    text = _AGG.sub("", nb.read_text())
    target = EXAMPLES / nb.name
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
for stale in EXAMPLES.glob("*.py"):
    if not (ROOT / "notebooks" / stale.name).exists():
        stale.unlink()

nb_custom_formats = {".py": "nbreader.read_percent"}
EXECUTE = os.environ.get("PPL_SPARSEGP_DOCS_EXECUTE", "1") != "0"
nb_execution_mode = "cache" if EXECUTE else "off"
# the pines map and the guides' plots: their jobs run when executing, else the committed fallbacks
pagefigures_execute = EXECUTE
nb_execution_timeout = 1200
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_kernel_rgx_aliases = {".*": "python3"}
# the notebooks run at the reduced size of the tests (QUICK=1: seconds each, same code, outputs and plots);
# PPL_SPARSEGP_DOCS_FULL=1 executes them at full size (minutes each on a 2-core machine)
os.environ["QUICK"] = "0" if os.environ.get("PPL_SPARSEGP_DOCS_FULL") == "1" else "1"
# the notebooks write their PNGs to NOTEBOOK_OUT (default "."): keep them out of the source tree
os.environ.setdefault("NOTEBOOK_OUT", tempfile.mkdtemp(prefix="ppl_sparsegp_docs_"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# tqdm's "IProgress not found" (no ipywidgets in the kernel) is noise on every page that imports NumPyro
os.environ.setdefault("PYTHONWARNINGS", "ignore:IProgress not found")
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".py": "myst-nb"}

# --- math ------------------------------------------------------------------------------------------
# MathJax 3 ships inside the built site (sphinx-mathjax-offline, a docs dependency, copies it into
# _static/mathjax), so every formula renders without a network; PPL_SPARSEGP_MATHJAX names another
# MathJax 3 (a path or URL ending in tex-chtml.js) instead.
extensions.append("sphinx-mathjax-offline")
if os.environ.get("PPL_SPARSEGP_MATHJAX"):
    _mathjax = os.environ["PPL_SPARSEGP_MATHJAX"]
    mathjax_path = Path(_mathjax).as_uri() if _mathjax.startswith("/") else _mathjax

# --- HTML ------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"ppl_sparsegp {version}"
html_static_path = ["_static"]
html_css_files = ["tables.css"]
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

# --- cross-references: nitpicky, offline --------------------------------------------------------------
nitpicky = True
# other projects' objects (no intersphinx: the build never reaches the network) and docstring type words
nitpick_ignore_regex = [
    (r"py:.*", r"(arviz|az|numpyro|jax|jnp|np|numpy|xarray|xr|scipy|dask|pandas|matplotlib|optax)(\..*)?"),
    (r"py:.*", r"(Array|ArrayLike|PRNGKey|InferenceData|SVIRunResult|Figure|DataFrame)"),
    # private names (base classes named by show-inheritance, helpers a docstring points contributors to)
    (r"py:.*", r"(.*\.)?_[A-Za-z]\w*"),
    # NumPyro's Distribution API, named in the docstrings our distributions inherit from it
    (r"py:meth", r"(sample_with_intermediates|log_prob)"),
]


def _resolve_alias(app, env, node, contnode):
    """A reference to a public alias (``ppl_sparsegp.SparseGP``, ``ppl_sparsegp.diagnostics.from_svi``,
    a name relative to the current module) resolves to the one place the object is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    modname = node.get("py:module") or ""
    clsname = node.get("py:class") or ""
    candidates = [target] + ([f"{modname}.{target}"] if modname else [])
    if clsname:  # a method named inside its class's docstrings
        candidates.insert(0, f"{modname}.{clsname}.{target}")
    if modname:  # relative to the parent packages too (a module docstring naming its package's names)
        parts = modname.split(".")
        candidates += [".".join(parts[:i] + [target]) for i in range(len(parts) - 1, 0, -1)]
    if "." not in target:  # a bare name shown off its module's page (the "most used" tables): unique homes
        homes = {f"{home}.{name}" for (_, name), home in apigen.homes().items() if name == target}
        candidates += sorted(homes) if len(homes) == 1 else []
    domain = env.get_domain("py")
    for cand in candidates:
        obj = _lookup(cand)
        if obj is None:
            continue
        for canonical in _canonical(obj, cand):
            if canonical in domain.objects:
                return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", canonical, node, contnode)
    return None


def _lookup(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


_HOMES = None


def _canonical(obj, dotted):
    """The places apigen may document ``obj`` (or a method of it), most likely first."""
    global _HOMES
    if _HOMES is None:
        _HOMES = {}
        for (module, name), home in apigen.homes().items():
            _HOMES.setdefault(id(getattr(sys.modules[module], name)), f"{home}.{name}")
    out = []
    if id(obj) in _HOMES:
        out.append(_HOMES[id(obj)])
    owner, _, attr = dotted.rpartition(".")  # a method or attribute: the class's page plus the attribute
    parent = _lookup(owner) if owner else None
    if parent is not None and id(parent) in _HOMES:
        out.append(f"{_HOMES[id(parent)]}.{attr}")
    if getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):  # where it is defined
        out.append(f"{obj.__module__}.{obj.__qualname__}")
    return out


_PIPE = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"(``.*?``|:\w+:`[^`]*`|`[^`]*`)")


def _escape_pipes(app, what, name, obj, options, lines):
    """Absolute values written ``|x|`` in prose are not reST substitutions: escape the bars outside
    literals and roles (table rows, which start with a bar, are left alone)."""
    block = None  # the indentation of a ``.. math::`` directive whose body we are in
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if block is not None and line.strip() and indent <= block:
            block = None
        if line.lstrip().startswith(".. math::"):
            block = indent
        if block is not None or "|" not in line or line.lstrip().startswith(("|", "+")):
            continue
        if line.count("`") % 2:  # a role that spans lines: leave the line as it is
            continue
        parts = _CODE.split(line)
        lines[i] = "".join(part if k % 2 else _PIPE.sub(r"\\|", part) for k, part in enumerate(parts))


def setup(app):
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-process-docstring", _escape_pipes)
