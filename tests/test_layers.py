"""The architecture's rules: imports inside ppl_sparsegp run downwards only (the floors of the package
docstring), no two modules import each other (directly or round a longer circle, siblings included), and
``docs/architecture.md`` names every module file. Every import statement of every module (top level or
inside a function) is read from the source and checked against the floor table; a module may import
modules on lower floors and siblings in its own package that do not import it back, nothing on its own
floor or above."""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "ppl_sparsegp"

# unit -> floor. Ground floor first (its own order: nothing imports sideways), then features,
# approximations, Stein inference, diagnostics.
FLOORS = {
    "validation": -1,  # the argument checks: below the ground floor (they import nothing of the package)
    "_version": 0, "_quadrature": 0, "numpyro_internals": 0, "parameters": 0, "datasets": 0, "sharding": 0,
    "linalg": 1, "grid": 1, "likelihoods": 1, "covariances": 1,
    "kernels": 2, "gaussian": 2,
    "groups": 3,
    "conditionals": 4,
    "features": 5,
    "approximations": 6, "optim": 6,
    "stein": 7, "engines": 7,
    "diagnostics": 8,
    "saving": 9,
}


def _unit(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def _imported_units(path: pathlib.Path):
    """(line, unit) for every import of a ppl_sparsegp module in the file."""
    package = path.relative_to(ROOT.parent).with_suffix("").parts
    if package[-1] == "__init__":
        package = package[:-1]
    else:
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = list(base) + (node.module.split(".") if node.module else [])
                names = [".".join(mod + ([a.name] if len(mod) == 1 else [])) for a in node.names]
            else:
                names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                         if node.module == "ppl_sparsegp" else [])
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "ppl_sparsegp" and len(parts) > 1:
                yield node.lineno, parts[1]


MODULES = sorted(p for p in ROOT.rglob("*.py") if p != ROOT / "__init__.py")


def test_every_unit_has_a_floor():
    units = {_unit(p) for p in MODULES}
    assert units <= set(FLOORS), f"add {sorted(units - set(FLOORS))} to FLOORS (and to the package docstring)"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_downwards(path):
    unit = _unit(path)
    upward = [f"line {line}: {unit} (floor {FLOORS[unit]}) imports {other} (floor {FLOORS.get(other)})"
              for line, other in _imported_units(path)
              if other != unit and FLOORS.get(other, 99) >= FLOORS[unit]]
    assert not upward, "\n".join(upward)


def test_the_walker_sees_relative_and_absolute_imports(tmp_path):
    """The checker itself: a relative import two levels up, an absolute one and a function-level one."""
    src = ("from ..covariances import Kuu\nimport ppl_sparsegp.diagnostics\n"
           "def f():\n    from .. import stein\n")
    fake = ROOT / "features" / "_layers_probe.py"
    try:
        fake.write_text(src)
        found = sorted(u for _, u in _imported_units(fake))
    finally:
        fake.unlink()
    assert found == ["covariances", "diagnostics", "stein"]


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imported_modules(path: pathlib.Path, name: str | None = None):
    """(line, module) for every ppl_sparsegp module the file imports (top level or in a function):
    ``from .x import y`` names ``...x.y`` where that is a module, else ``...x``. ``name``: the file's module
    name (default: from its place under ppl_sparsegp)."""
    package = (name or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + (node.module.split(".") if node.module else []))
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in NAMES else mod for a in node.names]
        else:
            continue
        for name in targets:
            while name and name not in NAMES:  # ``import ppl_sparsegp.x.y as z``: the deepest module
                name = name.rpartition(".")[0]
            if name.startswith("ppl_sparsegp"):
                yield node.lineno, name


def _circles(graph: dict) -> list:
    """One import circle (a list of modules, first = last) per strongly connected component with a cycle."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph(modules: dict) -> dict:
    """{module: {the modules it imports}} for ``{module name: path}`` (a package is its ``__init__``)."""
    return {name: {m for _, m in _imported_modules(p, name) if m != name} for name, p in modules.items()}


def test_no_import_circle_between_modules():
    """No circle of imports between modules, siblings included, function-level imports included (a
    function-level import hides a circle from Python, not from the reader)."""
    circles = _circles(_graph(NAMES))
    assert not circles, "import circles (modules importing each other): " + "; ".join(map(" <-> ".join, circles))


def test_the_circle_check_finds_a_function_level_circle(tmp_path, monkeypatch):
    """The checker itself: two sibling probes (written outside the package), one importing the other at
    top level and the other importing it back inside a function, form a circle; the real tree's modules
    around them do not."""
    a, b = tmp_path / "_circle_probe_a.py", tmp_path / "_circle_probe_b.py"
    a.write_text("from ._circle_probe_b import g\nfrom ..kernels import check_inputs\n")
    b.write_text("def g():\n    from . import _circle_probe_a\n    return _circle_probe_a\n")
    probes = {"ppl_sparsegp.features._circle_probe_a": a, "ppl_sparsegp.features._circle_probe_b": b}
    for name, path in probes.items():
        monkeypatch.setitem(NAMES, name, path)
    assert _circles(_graph(NAMES)) == [sorted(probes)]


ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def _listed_files(text: str) -> set:
    """The module files the file list of the architecture page names: a top-level ``name.py`` by name, a
    file of a folder by its stem inside that folder's entry (the lines from ``  folder/`` to the next
    entry)."""
    block = re.split(r"```(?:text)?\nppl_sparsegp/", text, maxsplit=1)[1].split("```", 1)[0]
    listed, folder = set(), None
    for line in block.splitlines():
        entry = line[2:].split(" ", 1)[0] if line.startswith("  ") and not line.startswith("   ") else None
        if entry:
            folder = entry.rstrip("/") if entry.endswith("/") else None
            if entry.endswith(".py"):
                listed.add(entry)
            rest = line[2 + len(entry):]
        else:
            rest = line
        if folder:
            listed |= {f"{folder}/{word}.py" for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rest)}
            listed.add(f"{folder}/__init__.py")
    return listed


def test_the_architecture_page_names_every_module_file():
    """docs/architecture.md names every module file of ppl_sparsegp, so the page cannot fall behind the tree."""
    files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT}
    missing = sorted(files - _listed_files(ARCHITECTURE.read_text()))
    assert not missing, f"add these files to the file list of docs/architecture.md: {missing}"


def test_the_architecture_page_lists_every_benchmark():
    """Every ``inference/benchmarks/<name>.py`` (the harness aside) is named in the page's benchmark list."""
    text = ARCHITECTURE.read_text()
    listed = text.split("Benchmarks: `python -m inference.benchmarks.<name> [--quick]`", 1)[1].split("; all run", 1)[0]
    names = {p.stem for p in (ROOT.parent / "inference" / "benchmarks").glob("*.py")} - {"__init__", "harness"}
    missing = sorted(n for n in names if f"`{n}`" not in listed)
    assert not missing, f"add these benchmarks to the list in docs/architecture.md: {missing}"


def test_no_module_of_the_package_is_over_600_lines():
    """The house's shape (DESIGN.md): one concept per module, none over 600 lines; a module that grows past
    it is split along a seam (as features/fourier.py into fourier_sizes, saving.py into a package)."""
    long = {p.relative_to(ROOT).as_posix(): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"split these modules (lines): {long}"
