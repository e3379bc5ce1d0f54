"""Start N local processes of one JAX program on JAX's distributed runtime (one machine).

``python -m inference.launch --processes 2 -- <module or script.py> [args ...]``

starts ``python -m <module> args`` (or ``python <script.py> args``) N times, each with the environment
:func:`ppl_sparsegp.sharding.initialize_distributed` reads: ``JAX_COORDINATOR_ADDRESS`` (127.0.0.1 and a
free port; process 0 serves it), ``PPL_SPARSEGP_NUM_PROCESSES`` = N and ``PPL_SPARSEGP_PROCESS_ID`` = i.
The program calls ``initialize_distributed()`` before anything runs on a device, loads its own rows
(``process_rows``) and builds the global arrays with ``shard_data``; every process then runs the same
code (SPMD) and the collectives between them go through gloo on CPU.

Options: ``--devices-per-process K`` (CPU: K forced host devices per process), ``--pin`` (process i on the
i-th core this launcher may use), ``--port``, ``--timeout`` (seconds; then every process is stopped and the
exit status is 124). When one process fails the others are stopped and the launcher exits with its
status; a wrong command line prints one line and exits with status 2.

**On a cluster** no launcher is needed: the cluster manager starts one process per host and JAX reads
the coordinator (the job's first node), the process count and the process id from it, so the same
program runs unchanged, e.g. on SLURM (one task per node, all GPUs of a node to its task)::

    srun --nodes=2 --ntasks-per-node=1 python -m <module> [args ...]

(``initialize_distributed()`` sees ``SLURM_NTASKS`` > 1 and calls ``jax.distributed.initialize()`` with no
arguments; Open MPI's ``mpirun`` and MPICH work the same way.)
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time

from inference.cli import OneLineParser, count, port, positive_number, with_suggestion

FORCE_DEVICES = "--xla_force_host_platform_device_count"


class UserError(Exception):
    """A wrong command line: one line on stderr, exit status 2."""


class _Parser(OneLineParser):
    def error(self, message):
        raise UserError(with_suggestion(self, message))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m inference.launch", description=__doc__.strip().splitlines()[0],
                usage="python -m inference.launch --processes N [options] -- <module or script.py> [args ...]")
    p.add_argument("--processes", type=count, required=True, help="number of processes N (≥ 1)")
    p.add_argument("--devices-per-process", type=count, default=None,
                   help="CPU: forced host devices per process (sets XLA_FLAGS " + FORCE_DEVICES + ")")
    p.add_argument("--port", type=port, default=None, help="coordinator port on 127.0.0.1 (default: a free one)")
    p.add_argument("--pin", action="store_true", help="pin process i to the i-th core this launcher may use")
    p.add_argument("--timeout", type=positive_number, default=None, help="stop every process after this many seconds")
    return p


def parse(argv):
    """(options, command): the launcher's options before ``--``, the program and its arguments after."""
    argv = list(argv)
    if "--" not in argv:
        raise UserError("put the program after '--': python -m inference.launch --processes 2 -- <module> [args]")
    cut = argv.index("--")
    args = parser().parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command:
        raise UserError("no program after '--': give a module (inference.benchmarks.x) or a script (x.py)")
    if args.processes < 1:
        raise UserError(f"--processes must be ≥ 1, got {args.processes}")
    if args.devices_per_process is not None and args.devices_per_process < 1:
        raise UserError(f"--devices-per-process must be ≥ 1, got {args.devices_per_process}")
    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout must be positive, got {args.timeout}")
    return args, command


def program(command) -> list:
    """The Python command line of one process: a script path or a module name."""
    target, rest = command[0], command[1:]
    if target.endswith(".py") or os.sep in target:
        if not os.path.isfile(target):
            raise UserError(f"script {target!r} not found")
        return [sys.executable, target, *rest]
    if not re.fullmatch(r"[A-Za-z_][\w.]*", target):
        raise UserError(f"{target!r} is neither a module name nor a .py script")
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UserError(f"module {target!r} not found (run from the repository root, or give a script path)")
    return [sys.executable, "-m", target, *rest]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(base: dict, *, address: str, processes: int, process_id: int, devices: int | None) -> dict:
    """One process's environment: the coordinator, the process count and id, and its device count."""
    env = dict(base)
    env.update({"JAX_COORDINATOR_ADDRESS": address, "PPL_SPARSEGP_NUM_PROCESSES": str(processes),
                "PPL_SPARSEGP_PROCESS_ID": str(process_id), "PYTHONUNBUFFERED": "1"})
    if devices is not None:
        flags = re.sub(FORCE_DEVICES + r"=\d+", "", env.get("XLA_FLAGS", "")).split()
        env["XLA_FLAGS"] = " ".join(flags + [f"{FORCE_DEVICES}={devices}"])
    return env


def launch(args, command) -> int:
    """Start the processes, wait for them; the first failure (or the timeout) stops the rest."""
    cmd = program(command)
    port = args.port if args.port is not None else free_port()
    address = f"127.0.0.1:{port}"
    cores = sorted(os.sched_getaffinity(0)) if args.pin and hasattr(os, "sched_getaffinity") else None
    procs = []
    for i in range(args.processes):
        env = environment(os.environ, address=address, processes=args.processes, process_id=i,
                          devices=args.devices_per_process)
        pre = None if cores is None else (lambda c=cores[i % len(cores)]: os.sched_setaffinity(0, {c}))
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=pre, start_new_session=True))
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                _stop(procs)
                print(f"launch: process {i} exited with status {code}; stopped the others", file=sys.stderr)
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                _stop(procs)
                print(f"launch: timed out after {args.timeout:g} s; stopped every process", file=sys.stderr)
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        print("launch: interrupted; stopped every process", file=sys.stderr)
        return 130


def _stop(procs, grace: float = 5.0):
    """SIGTERM to each running process's group (its own session), SIGKILL after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            _signal(p, signal.SIGTERM)
    end = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(p, signal.SIGKILL)
            p.wait()


def _signal(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def main(argv=None) -> int:
    try:
        args, command = parse(sys.argv[1:] if argv is None else argv)
        return launch(args, command)
    except UserError as e:
        print(f"launch: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
