"""Runs the docs pages' scripts one after another in this one process (``tests/docs/test_docs_pages.py``).

Usage: ``python -X faulthandler page_runner.py MANIFEST RESULTS TIMEOUT``. MANIFEST is a JSON list of
``{"page", "script", "cwd"}``; for each page in order the script runs in a fresh namespace as
``__main__`` with ``cwd`` as the working directory, as a reader would run the page in a fresh session:
JAX's float64 flag reset to its default first, matplotlib's figures closed after. One JSON line per page
is appended to RESULTS when it ends (``{"page", "ok", "error", "seconds"}``), so a page that hangs past
TIMEOUT seconds (faulthandler prints every thread's stack and exits) leaves the results of the pages before
it, and the caller knows which page hung: the first one without a line.

Why one process: each page in a process of its own paid the imports (jax, numpyro, arviz, the library:
about 4.5 s of CPU) and compiled again every library program another page had compiled (the module-level
jitted functions keep their in-memory caches across pages here).
"""
import faulthandler
import json
import os
import sys
import time
import traceback


def run_page(script, cwd):
    """Runs one page's script in a fresh ``__main__`` namespace; returns the traceback text or None."""
    import jax

    jax.config.update("jax_enable_x64", False)  # a fresh session's default; a page sets what it needs
    os.chdir(cwd)
    namespace = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
    try:
        with open(script) as f:
            exec(compile(f.read(), script, "exec"), namespace)
    except SystemExit as e:  # a page that exits: ok only with status 0, as a script run on its own
        return None if e.code in (None, 0) else traceback.format_exc()
    except BaseException:  # noqa: BLE001 -- any failure of the page is its result
        return traceback.format_exc()
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return None


def main(manifest, results, timeout):
    import jax  # noqa: F401 -- imported before the first page's clock starts
    import mlir_context  # this folder: one MLIR context per thread, as in the pytest processes

    mlir_context.install()

    with open(manifest) as f:
        pages = json.load(f)
    for page in pages:
        faulthandler.dump_traceback_later(timeout, exit=True)  # a hang: every thread's stack, then exit
        t0 = time.perf_counter()
        error = run_page(page["script"], page["cwd"])
        faulthandler.cancel_dump_traceback_later()
        with open(results, "a") as f:
            f.write(json.dumps({"page": page["page"], "ok": error is None, "error": error,
                                "seconds": time.perf_counter() - t0}) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
