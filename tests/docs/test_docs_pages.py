"""Every code block of the docs' pages runs: ``docs/*.md`` and ``docs/guide/*.md``, page by page.

The rule for a page's code fences (stated again in ``docs/architecture.md``'s tests section):

* ```` ```python ```` blocks and myst-nb ```` ```{code-cell} ipython3 ```` cells **run**: the blocks of a
  page are joined top to bottom into one script and executed as ``__main__`` in a fresh namespace (so
  they share names, as a reader running the page in one session would); a page may open with a short
  setup block that defines its data. One process (``tests/page_runner.py``) runs the pages of a file in
  turn, so the imports and the library's compiled programs are paid once per file (every other page here,
  the rest in ``test_docs_pages_second.py``, so that two workers share them); a page that hangs or takes
  the process down fails with every thread's stack, and the pages after it run in a new process.
* Anything that is not meant to run as it stands takes another fence language: ```` ```bash ```` for
  shell commands, ```` ```text ```` for fragments, output and pseudo-code. No other language is allowed
  for code (``test_fence_languages``), so a block cannot drop out of this test by a typo such as
  ```` ```py ````.

A figure a page shows from ``/_generated/<page>/<file>.png`` is written by the page's own code into its
working directory: the docs build runs the same script there (``docs/_ext/pagefigures.py``), so the
fast suite checks that the page writes every figure it shows.

The pages run with ``QUICK=1`` (the notebooks' flag: a page whose example is long reads it to shrink its
data, steps and draws), ``JAX_PLATFORMS=cpu``, this checkout first on ``PYTHONPATH`` and a temporary
directory as the working directory (files a page writes land there). A failure names the page, the
block and its first line in the page.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "guide").glob("*.md")])
FENCE = re.compile(r"^(?P<ticks>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=ticks)[ \t]*$", re.MULTILINE | re.DOTALL)
RUN = {"python", "{code-cell} ipython3", "{code-cell} python3", "{code-cell} python"}
NO_RUN = {"bash", "text"}
# MyST directives that are not code (a toctree, an image, an include, reST, a cell's output)
DIRECTIVE = re.compile(r"^\{(?!code-cell\})[\w-]+\}")
TIMEOUT = 300  # seconds a page may take
RUNNER = Path(__file__).resolve().parents[1] / "page_runner.py"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import pagefigures  # noqa: E402 -- the docs build's figure jobs (docs/_ext, on the path above)


def blocks(text):
    """``[(info, first line number of the body, body)]`` of a page's fenced blocks, in order."""
    out = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        line = text.count("\n", 0, m.start("body")) + 1
        body = m.group("body")
        if info.startswith("{code-cell}"):  # myst-nb cell options (":tags: [...]") open the body
            body = re.sub(r"\A(?:---\n.*?\n---\n|(?::\w[\w-]*:[^\n]*\n)+)", "", body, flags=re.DOTALL)
        out.append((info, line, body))
    return out


def script(page):
    """The page's runnable blocks as one script, and ``[(script line, page line, block index)]``."""
    lines, starts = [], []
    for k, (info, line, body) in enumerate(b for b in blocks(page.read_text()) if b[0] in RUN):
        starts.append((len(lines) + 1, line, k + 1))
        lines += body.rstrip("\n").split("\n")
    return "\n".join(lines) + "\n", starts


RUNNABLE = [p for p in PAGES if script(p)[1]]


def _where(stderr, name, starts):
    """The page line of the deepest traceback frame in the page's script."""
    found = re.findall(rf'File "[^"]*{re.escape(name)}", line (\d+)', stderr)
    if not found:
        return ""
    n = int(found[-1])
    first, line, k = max((s for s in starts if s[0] <= n), default=starts[0])
    return f" (block {k}, page line {line + n - first})"


def test_every_page_is_found():
    """New pages are picked up by the glob; the pages with code are run."""
    names = {p.relative_to(ROOT / "docs").as_posix() for p in RUNNABLE}
    assert {"getting_started.md", "guide/own_model.md"} <= names, names


def test_fence_languages():
    """Every code fence says whether it runs: python / code-cell (run) or bash / text (not run)."""
    bad = [(p.relative_to(ROOT).as_posix(), line, info) for p in PAGES
           for info, line, _ in blocks(p.read_text())
           if info not in RUN | NO_RUN and not DIRECTIVE.match(info)]
    assert not bad, ("fences must be ```python (runs), ```bash or ```text (does not run): "
                     + ", ".join(f"{p}:{line} ```{info}" for p, line, info in bad))


def test_every_notebook_is_described_on_the_examples_page():
    """The examples page groups the notebooks by task with a line each: a new notebook needs its line."""
    text = (ROOT / "docs" / "examples" / "index.md").read_text()
    missing = [p.stem for p in sorted((ROOT / "notebooks").glob("*.py")) if f"{{doc}}`{p.stem}`" not in text]
    assert not missing, f"notebooks without a line on docs/examples/index.md: {missing}"


def _page_env():
    """The pages' environment: ``QUICK=1``, the CPU, this checkout first on the path, the suite's XLA flags
    (conftest.py: compiled for speed of compilation, as every fast test; the pages take 98 s so, against
    178 s at XLA's default optimisation level, measured on 2 cores) but one CPU device (the suite's forced
    host devices would make the sharding page's collectives wait for a second device thread, which a loaded
    machine can starve past XLA's timeout). The pages once ran at the default level because a wedge met at
    -O0 was blamed on it; that wedge was batched LAPACK kernels waiting on XLA's pool, at any level
    (diagnostics.inference_data._map_draws)."""
    env = {**os.environ, "QUICK": "1", "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("NOTEBOOK_OUT", None)
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+",
                              "", env.get("XLA_FLAGS", "")).strip()
    return env


#: the seconds each page took in this process's runs (``PPL_SPARSEGP_PAGE_TIMES=file.json`` writes them at the
#: end of the module: what PAGE_SECONDS below is measured with)
SECONDS = {}


def _run_pages(entries, folder):
    """``{page: (ok, error text)}`` of ``entries`` [(page, script, cwd)], run in order by one
    ``tests/page_runner.py`` process; a page that hangs past ``TIMEOUT`` (the runner's faulthandler prints
    every thread's stack and exits) or crashes the process fails with that output, and the pages after it
    run in a new process."""
    out, remaining, attempt = {}, list(entries), 0
    while remaining:
        attempt += 1
        manifest, results, log = (folder / f"{name}_{attempt}" for name in ("manifest.json", "results", "log"))
        manifest.write_text(json.dumps([{"page": str(p), "script": str(s), "cwd": str(c)} for p, s, c in remaining]))
        with open(log, "w") as err:
            proc = subprocess.run([sys.executable, "-X", "faulthandler", str(RUNNER), str(manifest), str(results),
                                   str(TIMEOUT)], env=_page_env(), stdout=subprocess.DEVNULL, stderr=err,
                                  timeout=TIMEOUT * len(remaining) + 120)
        lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        for r in lines:
            out[Path(r["page"])] = (r["ok"], r["error"] or "")
            SECONDS[Path(r["page"]).relative_to(ROOT / "docs").as_posix()] = round(r["seconds"], 1)
        remaining = remaining[len(lines):]
        if remaining:  # the first page without a result hung or took the process down
            page = remaining.pop(0)[0]
            out[page] = (False, f"ran past {TIMEOUT} s or crashed the process (exit code {proc.returncode}); "
                                f"its threads' stacks and output:\n" + log.read_text()[-6000:])
    return out


@pytest.fixture(scope="module")
def page_results(request, tmp_path_factory):
    """The result of every selected page of the requesting file, all run by one process (the imports and
    the library's compiled programs shared: tests/page_runner.py)."""
    wanted = [item.callspec.params["page"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_page_runs" and item.module is request.module]
    folder = tmp_path_factory.mktemp("pages")
    entries = []
    for page in wanted:
        cwd = folder / page.relative_to(ROOT / "docs").as_posix().replace("/", "_").removesuffix(".md")
        cwd.mkdir()
        path = cwd / f"page_{page.stem}.py"
        path.write_text(script(page)[0])
        entries.append((page, path, cwd))
    results = _run_pages(entries, folder)
    if os.environ.get("PPL_SPARSEGP_PAGE_TIMES"):
        times = Path(os.environ["PPL_SPARSEGP_PAGE_TIMES"])
        times.write_text(json.dumps({**(json.loads(times.read_text()) if times.exists() else {}), **SECONDS},
                                    indent=1, sort_keys=True))
    return results, {page: cwd for page, _, cwd in entries}


#: seconds each page took in the page runner (the suite's flags, 2 cores, the other worker busy),
#: measured with ``PPL_SPARSEGP_PAGE_TIMES=t.json pytest -n 2 tests/test_docs_pages*.py``; a page not
#: listed counts as the median. The pages are split in two halves of about equal time, run by this file
#: and ``test_docs_pages_second.py`` in their own runner processes, so that pytest-xdist's whole-file
#: workers run them side by side (one runner for all of them was the suite's longest file and bounded its
#: end; tests/conftest.py starts the longest files first).
PAGE_SECONDS = {
    "getting_started.md": 12.0,
    "guide/adequacy.md": 19.3,
    "guide/engines.md": 8.2,
    "guide/families.md": 15.6,
    "guide/large_n.md": 18.9,
    "guide/own_model.md": 39.5,
    "guide/saving.md": 12.3,
    "guide/scale_out.md": 16.4,
    "guide/spherical_large_n.md": 5.7,
    "index.md": 1.7,
}


def _halves(pages, seconds):
    """Two lists of pages with sums of ``seconds`` as equal as a greedy longest-first split makes them."""
    known = sorted(seconds.values())
    default = known[len(known) // 2] if known else 1.0
    halves, totals = ([], []), [0.0, 0.0]
    for page in sorted(pages, key=lambda p: -seconds.get(p.relative_to(ROOT / "docs").as_posix(), default)):
        i = totals.index(min(totals))
        halves[i].append(page)
        totals[i] += seconds.get(page.relative_to(ROOT / "docs").as_posix(), default)
    return tuple(sorted(h) for h in halves)


HALVES = _halves(RUNNABLE, PAGE_SECONDS)


def test_the_halves_run_every_page_once():
    assert sorted(HALVES[0] + HALVES[1]) == sorted(RUNNABLE) and not set(HALVES[0]) & set(HALVES[1])


def check_page(page, page_results):
    """The page ran without an exception (else its traceback, the failing block and page line named), and
    wrote every figure the page shows from ``/_generated/``."""
    results, cwds = page_results
    ok, error = results[page]
    where = _where(error, f"page_{page.stem}.py", script(page)[1])
    assert ok, f"{page.relative_to(ROOT)} fails{where}:\n" + error[-4000:]
    job = page.relative_to(ROOT / "docs").with_suffix("").as_posix()
    missing = [f for j, f in pagefigures.shown(page.read_text()) if j == job and not (cwds[page] / f).is_file()]
    assert not missing, f"{page.relative_to(ROOT)} shows {missing} but its code does not write them"


@pytest.mark.parametrize("page", HALVES[0], ids=[p.relative_to(ROOT / "docs").as_posix() for p in HALVES[0]])
def test_page_runs(page, page_results):
    check_page(page, page_results)


def test_generated_figures_have_a_job_and_a_fallback():
    """Every figure a page shows from ``/_generated/`` is made by a job of the docs build and has a
    committed fallback (``docs/_figures``, what ``make docs-fast`` shows); every job's figure is shown; the
    build runs a page with the same script as this test."""
    pages = [*PAGES, ROOT / "docs" / "examples" / "index.md"]
    shown = {fig for p in pages for fig in pagefigures.shown(p.read_text())}
    made = {(job, f) for job, (_, files) in pagefigures.JOBS.items() for f in files}
    assert shown == made, f"shown but made by no job: {shown - made}; made but not shown: {made - shown}"
    no_fallback = [f"{job}/{f}" for job, f in made if not (pagefigures.FALLBACKS / job / f).is_file()]
    assert not no_fallback, f"no committed fallback in docs/_figures for {no_fallback}: make docs-figures"
    for job in pagefigures.JOBS:
        if job != "pines":
            assert pagefigures.page_script((ROOT / "docs" / f"{job}.md").read_text()) == script(
                ROOT / "docs" / f"{job}.md")[0]
