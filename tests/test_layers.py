"""The architecture's one rule: imports inside ppl_sparsegp run downwards only (the floors of the package
docstring). Every import statement of every module (top level or inside a function) is read from the
source and checked against the floor table; a module may import modules on lower floors and siblings in
its own package, nothing on its own floor or above."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "ppl_sparsegp"

# unit -> floor. Ground floor first (its own order: nothing imports sideways), then features,
# approximations, Stein inference, diagnostics.
FLOORS = {
    "_version": 0, "compat": 0, "parameters": 0, "datasets": 0, "sharding": 0,
    "linalg": 1, "grid": 1, "likelihoods": 1, "covariances": 1,
    "kernels": 2, "gaussian": 2,
    "groups": 3,
    "conditionals": 4,
    "features": 5,
    "approximations": 6,
    "optim": 6,
    "stein": 7,
    "diagnostics": 8,
    "fits": 9,
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
