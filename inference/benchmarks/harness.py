"""The harness every benchmark runs on: one command line, one JAX set-up, one timer, one store, one table.

A benchmark ``python -m inference.benchmarks.<name> [--quick] ...``

1. builds its command line with :func:`parser` (``--quick``, ``--cpu``, ``--out``, ``--resume``, ``--merge``)
   and adds its own flags;
2. calls :func:`setup` before anything starts JAX: pins the process to a core, optionally one XLA/BLAS
   thread, the host device count for parallel chains, float64;
3. times jitted functions with :func:`timed` (compilation apart from the steady-state call) and blocks of
   work with :func:`clock` (wall and process CPU seconds);
4. keeps one row per configuration in a :class:`Store`: JSON lines, one object per row, keyed by the
   row's identifying fields and the run's settings; ``--resume`` skips the rows already stored,
   ``--merge`` first adds the rows of other stores (e.g. processes run in parallel), and
   :meth:`Store.write_json` writes the ``<name>.json`` summary next to the store
   (``results/<name>.json`` by default: what the README and the tests read);
5. prints Markdown tables with :func:`table` from a column spec;
6. fits with the library's loops (:func:`ppl_sparsegp.engines.fit_svi`: SVI in compiled blocks, stopping
   at the first non-finite step or a divergence; :func:`ppl_sparsegp.engines.fit_nuts`; the runner
   ``python -m inference fit`` uses them too) and the benchmarks' own: :func:`fit_interleaved` (several
   SVI fits timed step by step, interleaved) and :func:`gradient_cost` (compile time and ms per gradient
   of a model's potential).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

RESULTS = Path(__file__).resolve().parent / "results"
ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false"  # on a shared CPU, spinning thread pools add jitter


def parser(name: str, doc: str, *, cpu: str = "all") -> argparse.ArgumentParser:
    """An ArgumentParser with the common flags; ``cpu`` is the default of ``--cpu``."""
    p = argparse.ArgumentParser(prog=f"python -m inference.benchmarks.{name}",
                                description=doc.strip().splitlines()[0])
    p.set_defaults(benchmark=name)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run of the whole pipeline")
    p.add_argument("--cpu", default=cpu, help="pin the process to this core before JAX starts ('last': the "
                   "last core this process may use; 'all': no pinning; default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help=f"results store, JSON lines (default results/{name}"
                   ".jsonl; with --quick in the temporary folder); the JSON summary is written next to it")
    p.add_argument("--resume", action="store_true", help="skip the rows already stored (same settings)")
    p.add_argument("--merge", type=Path, nargs="+", default=(), metavar="JSONL",
                   help="add the rows of these stores to --out first (later files win); implies --resume")
    return p


def setup(args, *, devices: int = 1, one_thread: bool = False) -> dict:
    """Pin (``args.cpu``), XLA/BLAS threads, ``devices`` host devices and float64, before JAX starts; fill
    in ``args.out``. Returns the machine record to store with the results."""
    core, allowed = None, _cores()
    if args.cpu != "all" and not (allowed is None and args.cpu == "last"):  # "last": where the OS can pin
        core = allowed[-1] if args.cpu == "last" else int(args.cpu)
        if allowed is None or core not in allowed:
            raise SystemExit(f"--cpu {core}: not one of this process's cores {allowed}")
        os.sched_setaffinity(0, {core})  # threads started from now on inherit it
    if one_thread:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        if "--xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + ONE_THREAD_XLA).strip()
    from ppl_sparsegp.numpyro_internals import set_host_device_count

    if devices > 1 and not set_host_device_count(devices):
        raise RuntimeError("JAX started before harness.setup: the host device count is fixed")
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.out is None:
        folder = Path(tempfile.gettempdir()) / "ppl_sparsegp-benchmarks" if args.quick else RESULTS
        args.out = folder / f"{args.benchmark}.jsonl"
    return {"machine": platform.platform(), "cpu_count": os.cpu_count(), "cores": _cores(),
            "pinned_core": core, "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "device": jax.devices()[0].device_kind, "jax_devices": jax.local_device_count()}


def _cores():
    """The cores this process may use (None where the OS cannot say: no pinning there)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


class Timing(NamedTuple):
    """Seconds: ``compile_s`` (trace, lower, compile), the steady-state call's median and mean."""

    compile_s: float
    median_s: float
    mean_s: float


def timed(fn, *args, repeats: int = 20) -> Timing:
    """Time ``jax.jit(fn)(*args)``: compilation (``lower(...).compile()``) apart from ``repeats`` calls of
    the compiled function, each blocked until ready, after one untimed warm-up call."""
    import numpy as np

    compiled, compile_s = compile_timed(fn, *args)
    times = call_times(compiled, *args, repeats=repeats)
    return Timing(compile_s, float(np.median(times)), float(np.mean(times)))


def compile_timed(fn, *args):
    """``(compiled, seconds)``: ``jax.jit(fn)`` lowered and compiled for ``args``, and the time that took."""
    import jax

    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def call_times(compiled, *args, repeats: int = 20):
    """Seconds of ``repeats`` calls of a compiled function, each blocked until ready, after one untimed
    warm-up call (NumPy array)."""
    import jax
    import numpy as np

    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return np.asarray(times)


class Clock:
    wall: float = 0.0
    cpu: float = 0.0
    compile: float = 0.0


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_compile_s = [0.0]  # JAX's tracing, lowering and compilation seconds so far (once :func:`clock` listens)


def _count_compilation(event, duration, **kwargs):
    if event in _COMPILE_EVENTS:
        _compile_s[0] += duration


@functools.cache
def _listen():
    import jax

    jax.monitoring.register_event_duration_secs_listener(_count_compilation)


@contextmanager
def clock():
    """``with clock() as c: ...`` then ``c.wall``, ``c.cpu``: wall-clock and process CPU seconds, and
    ``c.compile``: the seconds JAX spent tracing, lowering and compiling in the block (its monitoring
    events; single-threaded, so CPU seconds too)."""
    _listen()
    c, w0, c0, k0 = Clock(), time.perf_counter(), time.process_time(), _compile_s[0]
    try:
        yield c
    finally:
        c.wall, c.cpu, c.compile = time.perf_counter() - w0, time.process_time() - c0, _compile_s[0] - k0


class Store:
    """The rows of a benchmark as JSON lines, keyed by ``key`` (row fields) within one set of ``settings``.

    Every row is appended to the file as soon as it is added (an interrupted run loses nothing); reading
    keeps, per key, the last row stored with the same settings (rows of other settings stay in the file).
    Rows not re-computed by this run are kept: the summary is always over every stored row.
    """

    def __init__(self, path, key, *, settings=None, resume=False, merge=()):
        self.path, self.key = Path(path), tuple(key)
        self.settings = json.loads(json.dumps(settings or {}, default=float))  # as it reads back
        self.resume = bool(resume or merge)
        self._rows: dict = {}
        for p in (self.path, *merge):
            for row in _read_jsonl(p):
                if row.pop("settings", None) == self.settings:
                    if p != self.path:
                        self._append(row)
                    self._rows[self.key_of(row)] = row

    def key_of(self, row) -> tuple:
        return tuple(json.loads(json.dumps(row.get(k), default=float)) for k in self.key)

    def done(self, *key) -> bool:
        """Whether ``--resume`` skips the row with this key."""
        return self.resume and self.get(*key) is not None

    def get(self, *key):
        """The stored row with this key (values in the order of ``key``), or None."""
        return self._rows.get(self.key_of(dict(zip(self.key, key))))

    @property
    def rows(self) -> list:
        return list(self._rows.values())

    def add(self, row: dict) -> dict:
        self._append(row)
        self._rows[self.key_of(row)] = row
        return row

    def _append(self, row):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps({**row, "settings": self.settings}, default=float) + "\n")

    def write_json(self, summary: dict, path=None) -> Path:
        """Write ``summary`` (with the rows wherever the benchmark puts them) as ``<store>.json``."""
        path = Path(path) if path is not None else self.path.with_suffix(".json")
        path.write_text(json.dumps(summary, indent=1, default=float) + "\n")
        print(f"\nwrote {self.path} and {path}")
        return path


def _read_jsonl(path) -> list:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table(rows, columns) -> str:
    """A Markdown table: one line per row, ``columns`` a list of ``(header, key, format)``; ``key`` a row
    field or a function of the row, ``format`` a format spec (``".3f"``) or a function of the value;
    a missing value (None) prints as ``—``."""
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for _, key, fmt in columns:
            v = key(r) if callable(key) else r.get(key)
            cells.append("—" if v is None else fmt(v) if callable(fmt) else format(v, fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pm(digits: int = 3, *, always: bool = False):
    """Format of a ``(mean, sd)`` pair: ``"m ± s"`` (just ``"m"`` where sd is 0, unless ``always``)."""
    def fmt(pair):
        mean, sd = pair
        return f"{mean:.{digits}f}" if sd == 0 and not always else f"{mean:.{digits}f} ± {sd:.{digits}f}"
    return fmt


# --------------------------------------------------------------------------------------------------
# fitting: the library's loops (ppl_sparsegp.engines: fit_svi, fit_nuts), and the benchmarks' own
# --------------------------------------------------------------------------------------------------
def fit_interleaved(gps: dict, X, y, *, steps: int, lr: float, batch_size: int, seed: int = 0,
                    block: int = 50):
    """SVI (TraceMeanField_ELBO, Adam) of several models on the same data for ``steps`` minibatch steps
    each, one jitted update per model, run in interleaved blocks of ``block`` steps.

    :returns: ``{name: (params, timing, losses)}``; timing has ``compile_s`` (initialisation and the first
        step, compilation included) and the median over the other steps, each timed on its own, of the
        process CPU time and the wall-clock time per iteration (``ms_per_iter_cpu``, ``ms_per_iter_wall``).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, TraceMeanField_ELBO

    X, y = jnp.asarray(X), jnp.asarray(y)
    runs = {}
    for name, gp in gps.items():
        svi = SVI(gp.model, gp.guide, numpyro.optim.Adam(lr), TraceMeanField_ELBO())
        t0 = time.perf_counter()
        state = jax.jit(lambda key, svi=svi: svi.init(key, X, y, batch_size=batch_size))(jax.random.PRNGKey(seed))
        update = jax.jit(lambda s, svi=svi: svi.update(s, X, y, batch_size=batch_size))
        state, loss = update(state)
        jax.block_until_ready(loss)
        runs[name] = {"svi": svi, "update": update, "state": state, "compile_s": time.perf_counter() - t0,
                      "cpu": [], "wall": [], "losses": []}
    done = 1
    while done < steps:
        n = min(block, steps - done)
        for r in runs.values():
            update, state = r["update"], r["state"]
            for _ in range(n):
                c, w = time.process_time(), time.perf_counter()
                state, loss = update(state)
                jax.block_until_ready(loss)
                r["cpu"].append(time.process_time() - c)
                r["wall"].append(time.perf_counter() - w)
            r["state"] = state
            r["losses"].append(float(loss))
        done += n
    out = {}
    for name, r in runs.items():
        timing = {"compile_s": r["compile_s"], "ms_per_iter_cpu": 1e3 * float(np.median(r["cpu"])),
                  "ms_per_iter_wall": 1e3 * float(np.median(r["wall"])),
                  "ms_per_iter_cpu_q10_q90": [1e3 * float(q) for q in np.quantile(r["cpu"], [0.1, 0.9])]}
        out[name] = (r["svi"].get_params(r["state"]), timing, r["losses"])
    return out


def gradient_cost(model, args, repeats=200):
    """(compile s, ms per gradient) of the jitted value-and-gradient of the model's potential."""
    import jax
    from numpyro.infer.util import initialize_model

    info = initialize_model(jax.random.PRNGKey(0), model, model_args=args)
    t = timed(jax.value_and_grad(info.potential_fn), info.param_info.z, repeats=repeats)
    return t.compile_s, 1e3 * t.mean_s
