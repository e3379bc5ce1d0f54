"""The API reference covers every public name: each name of the ``__all__`` of ``ppl_sparsegp`` and of
every public submodule has an autodoc entry in the pages ``docs/_ext/apigen.py`` generates (the ones the
Sphinx build renders), and a name added to an ``__all__`` gets its entry with no edit of the docs.

Only the generator runs here (no Sphinx: the fast suite does not install the docs extra); whether each
entry's docstring parses is the CI docs build's job (``make docs-fast``, warnings as errors)."""
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import ppl_sparsegp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
import apigen  # noqa: E402

DIRECTIVE = re.compile(r"^\s*\.\. auto(class|function|data|method|attribute)::\s+(\S+)", re.M)


def _public_modules():
    names = ["ppl_sparsegp"] + [m.name for m in pkgutil.walk_packages(ppl_sparsegp.__path__, "ppl_sparsegp.")
                                if not any(p.startswith("_") for p in m.name.split("."))]
    return [importlib.import_module(n) for n in names]


def _resolve(path):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def _documented(outdir):
    """ids of the objects with an autodoc entry, and the pages written."""
    pages = {p.stem: p.read_text() for p in Path(outdir).glob("*.rst")}
    ids = {id(_resolve(path)) for text in pages.values() for _, path in DIRECTIVE.findall(text)}
    return ids, pages


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("api")
    apigen.generate(out)
    return out


def test_every_public_name_has_an_api_entry(generated):
    ids, pages = _documented(generated)
    missing, no_page = [], []
    for module in _public_modules():
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                if hasattr(obj, "__all__") and obj.__name__ not in pages:
                    no_page.append(obj.__name__)
            elif id(obj) not in ids:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"public names without an API entry: {missing}"
    assert not no_page, f"public modules without an API page: {no_page}"
    assert len(ids) > 180  # the reference is not empty: 207 distinct objects today (re-exports count once)


def test_every_page_is_in_the_index(generated):
    """Every module page is in the toctree of the index or of a section page the index lists; the
    internal modules are in their own section, not among the user-facing ones."""
    index = (generated / "index.md").read_text()
    sections = {p.stem: p.read_text() for p in generated.glob("section_*.md")}
    assert sections and all(f"\n{s}\n" in index for s in sections)
    trees = index + "".join(sections.values())
    pages = sorted(p.stem for p in generated.glob("*.rst"))
    assert pages and all(f"\n{page}\n" in trees for page in pages)
    assert "ppl_sparsegp.diagnostics.adequacy" in pages  # one page per concept of diagnostics
    assert "\nppl_sparsegp.linalg.dense\n" in sections["section_internals"]
    assert "\nmost_used\n" in index


def test_most_used_names_resolve(generated):
    """The curated page lists about twenty public names, each linked to its one entry."""
    text = (generated / "most_used.md").read_text()
    names = re.findall(r"^   ~(\S+)$", text, re.MULTILINE)
    assert 18 <= len(names) <= 24, names
    ids, _ = _documented(generated)
    assert all(id(_resolve(n)) in ids for n in names)


def test_a_new_public_name_gets_an_entry_without_a_docs_edit(tmp_path, monkeypatch):
    kernels = importlib.import_module("ppl_sparsegp.kernels")

    def brand_new_kernel_helper(x):
        """A public function added by a later change."""
        return x

    brand_new_kernel_helper.__module__ = kernels.__name__
    monkeypatch.setattr(kernels, "brand_new_kernel_helper", brand_new_kernel_helper, raising=False)
    monkeypatch.setattr(kernels, "__all__", [*kernels.__all__, "brand_new_kernel_helper"])
    apigen.generate(tmp_path)
    page = (tmp_path / "ppl_sparsegp.kernels.rst").read_text()
    assert ".. autofunction:: ppl_sparsegp.kernels.brand_new_kernel_helper" in page
    ids, _ = _documented(tmp_path)
    assert id(brand_new_kernel_helper) in ids


def test_no_source_file_has_an_invalid_escape():
    """A docstring's LaTeX in a non-raw string loses its backslashes (``\\alpha`` becomes a bell character,
    ``\\boldsymbol`` a backspace; ``\\mathbf`` warns at import since Python 3.12): every file compiles with
    escape warnings as errors, and no string constant holds a bell, backspace, form feed or vertical tab."""
    import ast
    import pathlib
    import warnings

    root = pathlib.Path(__file__).resolve().parents[2]
    files = [p for d in ("ppl_sparsegp", "models", "inference") for p in (root / d).rglob("*.py")]
    assert len(files) > 50
    for path in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error", SyntaxWarning)  # Python >= 3.12
            warnings.simplefilter("error", DeprecationWarning)  # Python 3.11
            tree = compile(path.read_text(), str(path), "exec", ast.PyCF_ONLY_AST)
        bad = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and any(c in node.value for c in "\a\b\f\v")]
        assert not bad, f"{path.relative_to(root)}: control characters in strings at lines {bad} (use r\"\"\"...)"
