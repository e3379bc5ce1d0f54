"""No code line of the site is wider than its box: the pages' code blocks, the example notebooks' code
cells and the docstrings' examples (literal blocks and ``>>>`` lines, shown on the API pages).

The theme (furo) draws a code block in a box of fixed width with a horizontal scroll bar for what
does not fit: a reader sees the line cut. :data:`WIDTH` is the number of characters that fit, measured
on the built site in Chromium (blocks of 86 to 94 characters; the box is 736 px wide for a window of
1000 or 1300 px and 810 px at 1920 px, with the font scaled alike): 90 characters fit, 91 scroll, in a
code block and in a notebook's code cell alike.
"""
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import apigen  # noqa: E402 -- the API reference's module list (docs/_ext)

WIDTH = 90
PAGES = sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "guide").glob("*.md"),
                ROOT / "docs" / "examples" / "index.md"])
FENCE = re.compile(r"^(?P<ticks>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=ticks)[ \t]*$", re.M | re.S)
DIRECTIVE = re.compile(r"^\{(?!code-cell\})[\w-]+\}")  # a toctree, a figure, ...: not a code box


def _too_wide(where, lines, first=1):
    return [f"{where}:{first + i}: {len(line)} characters" for i, line in enumerate(lines) if len(line) > WIDTH]


def test_page_code_fits():
    """Every line of every code block of the pages (python, code cells, bash, text) fits its box."""
    bad = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if not DIRECTIVE.match(m.group("info").strip()):
                first = text.count("\n", 0, m.start("body")) + 1
                bad += _too_wide(page.relative_to(ROOT).as_posix(), m.group("body").split("\n"), first)
    assert not bad, f"code lines wider than the box ({WIDTH} characters):\n" + "\n".join(bad)


def test_notebook_code_fits():
    """Every line of the example notebooks' code cells (``notebooks/*.py``, the examples pages) fits."""
    bad = []
    for nb in sorted((ROOT / "notebooks").glob("*.py")):
        markdown = False
        for i, line in enumerate(nb.read_text().split("\n"), 1):
            if line.startswith("# %%"):
                markdown = "[markdown]" in line
            elif not markdown and len(line) > WIDTH:
                bad.append(f"notebooks/{nb.name}:{i}: {len(line)} characters")
    assert not bad, f"notebook code lines wider than the box ({WIDTH} characters):\n" + "\n".join(bad)


def _docstring_code(doc):
    """``[(line index, code line)]`` of a docstring's literal blocks (after ``::``) and ``>>>`` lines."""
    lines, out, block = doc.split("\n"), [], None
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if block is not None:
            if line.strip() and indent <= block[0]:
                block = None
            elif line.strip():
                block = (block[0], block[1] if block[1] is not None else indent)
                out.append((i, line[block[1]:]))
                continue
        if line.lstrip().startswith((">>> ", "... ")):
            out.append((i, line.lstrip()))
        elif line.rstrip().endswith("::") and not line.lstrip().startswith(".. math::"):
            block = (indent, None)
    return out


def _documented():
    """Every docstring of the API reference: each module page's module and names (``apigen.pages``), a
    class's public methods with it."""
    for module_name, entries in apigen.pages().items():
        module = importlib.import_module(module_name)
        yield module_name, module.__doc__ or ""
        for name, _ in entries:
            obj = getattr(module, name)
            yield f"{module_name}.{name}", inspect.getdoc(obj) or ""
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and getattr(member, "__doc__", None):
                        yield f"{module_name}.{name}.{attr}", inspect.getdoc(member) or ""


def test_docstring_examples_fit():
    """The code in the docstrings the API reference renders (literal blocks, ``>>>``) fits its box."""
    bad = [f"{where} (docstring line {i + 1}): {len(line)} characters" for where, doc in _documented()
           for i, line in _docstring_code(doc) if len(line) > WIDTH]
    assert not bad, f"docstring code lines wider than the box ({WIDTH} characters):\n" + "\n".join(bad)


WORK_ITEM = re.compile(r"\bissues? \d+\b|\bPR \d+\b", re.I)


def test_user_pages_cite_no_work_items():
    """A reader cannot follow "issue 48": the pages, the notebooks and the API reference's docstrings say
    what was measured instead (the CHANGELOG, a record of the work, keeps its issue numbers)."""
    # the benchmarks page keeps the stored rows' labels (a model named "pilot before issue 48" in the JSON)
    texts = [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in PAGES if p.name != "benchmarks.md"]
    texts += [(f"notebooks/{nb.name}", nb.read_text()) for nb in sorted((ROOT / "notebooks").glob("*.py"))]
    texts += list(_documented())
    bad = [f"{where}: {m.group(0)!r}" for where, text in texts for m in WORK_ITEM.finditer(text)]
    assert not bad, "internal work items cited on user pages:\n" + "\n".join(bad)
