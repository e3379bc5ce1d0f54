"""The site's generated figures: made by the build from the code a reader runs, with committed fallbacks.

Each figure a page shows from ``/_generated/<job>/<file>`` is made by one job, run in the folder
``docs/_generated/<job>/`` (not in git) when the build executes (``PPL_SPARSEGP_DOCS_EXECUTE`` not ``0``):

* ``pines``: the main job, ``python -m inference fit pines --method nuts`` (what ``make demo`` runs), at a
  reduced size (:data:`PINES_ARGS`: 2 chains of 150 + 150 iterations, about a minute on 2 cores), which
  writes ``fit.png``, the posterior mean intensity;
* ``guide/<page>``: the page's own code, its ``python`` blocks and code cells joined into one script (the
  rule of ``tests/docs/test_docs_pages.py``, which runs the same script in the fast suite) and run at the
  tests' reduced size (``QUICK=1``); the page's code writes the PNG into its working directory.

A job runs again only when its inputs change (the page, or the package's and the job's sources: a hash in
``.inputs``). A build that does not execute (``make docs-fast``, CI) copies the committed fallbacks of
``docs/_figures/<job>/`` instead, so it runs nothing and reaches no network. ``make docs-figures``
refreshes the fallbacks from an executed build.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"
FALLBACKS = DOCS / "_figures"
PINES_ARGS = ["-m", "inference", "fit", "pines", "--method", "nuts", "--warmup", "150", "--samples", "150",
              "--chains", "2", "--no-progress"]
# every job: (what it needs to run again when changed, the files it must write)
JOBS = {
    "pines": (["inference", "models/pines.py"], ["fit.png"]),
    "guide/own_model": (["docs/guide/own_model.md"], ["forecast.png"]),
    "guide/adequacy": (["docs/guide/adequacy.md"], ["adequacy.png"]),
}
TIMEOUT = 900  # seconds a job may take
FENCE = re.compile(r"^(?P<ticks>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=ticks)[ \t]*$", re.M | re.S)
RUN = {"python", "{code-cell} ipython3", "{code-cell} python3", "{code-cell} python"}
SHOWN = re.compile(r"/_generated/(?P<job>[\w/]+)/(?P<file>[\w.-]+\.png)")


def page_script(text: str) -> str:
    """A page's runnable blocks (``python`` fences, code cells without their options) joined in order."""
    out = []
    for m in FENCE.finditer(text):
        if m.group("info").strip() in RUN:
            body = re.sub(r"\A(?:---\n.*?\n---\n|(?::\w[\w-]*:[^\n]*\n)+)", "", m.group("body"), flags=re.S)
            out.append(body.rstrip("\n"))
    return "\n".join(out) + "\n"


def shown(text: str) -> list[tuple[str, str]]:
    """``[(job, file)]`` of the generated figures a page shows."""
    return [(m.group("job"), m.group("file")) for m in SHOWN.finditer(text)]


def _inputs_hash(job: str) -> str:
    h = hashlib.sha256(" ".join(PINES_ARGS).encode())
    paths = [ROOT / p for p in JOBS[job][0]] + [ROOT / "ppl_sparsegp"]
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(f.relative_to(ROOT).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def _env() -> dict:
    env = {**os.environ, "QUICK": "1", "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("NOTEBOOK_OUT", None)
    return env


def _run(job: str, folder: Path) -> None:
    if job == "pines":
        cmd, cwd = [sys.executable, *PINES_ARGS, "--out", str(folder)], ROOT
    else:
        script = folder / "page.py"
        script.write_text(page_script((DOCS / f"{job}.md").read_text()))
        cmd, cwd = [sys.executable, str(script)], folder
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"the figure job {job!r} failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")


def make(execute: bool, log=print) -> None:
    """Fills ``docs/_generated/``: every job run (when its inputs changed) or, not executing, the
    fallbacks copied; a missing figure raises."""
    for job, (_, files) in JOBS.items():
        folder = GENERATED / job
        folder.mkdir(parents=True, exist_ok=True)
        stamp = folder / ".inputs"
        want = _inputs_hash(job) if execute else "fallback " + hashlib.sha256(
            b"".join((FALLBACKS / job / f).read_bytes() for f in files)).hexdigest()
        if stamp.exists() and stamp.read_text() == want and all((folder / f).exists() for f in files):
            continue
        if execute:
            log(f"pagefigures: running the figure job {job!r}")
            _run(job, folder)
        else:
            for f in files:
                shutil.copyfile(FALLBACKS / job / f, folder / f)
        missing = [f for f in files if not (folder / f).exists()]
        if missing:
            raise RuntimeError(f"the figure job {job!r} did not write {missing} into {folder}")
        stamp.write_text(want)


def save_fallbacks() -> None:
    """Copies every job's figures from ``docs/_generated`` (an executed build) to the committed
    fallbacks of ``docs/_figures`` (``make docs-figures``)."""
    for job, (_, files) in JOBS.items():
        (FALLBACKS / job).mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(GENERATED / job / f, FALLBACKS / job / f)


def _builder_inited(app):
    from sphinx.util import logging

    make(app.config.pagefigures_execute, log=logging.getLogger(__name__).info)


def setup(app):
    app.add_config_value("pagefigures_execute", True, "env")
    app.connect("builder-inited", _builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
