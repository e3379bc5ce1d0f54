"""Every command-line flag has a bad-input row (issue 49, item 3): the flags of ``python -m inference``
(the runner's, and each model's own from its ``add_arguments``) and of ``python -m inference.launch`` are read
from their argparse parsers, so a new flag without a row in ``ROWS`` fails
``test_every_flag_has_a_bad_input_row`` (and a row for a flag that is gone fails it too).

Each row is refused with exit status 2 and ONE line on stderr that names the flag, no traceback. The calls
run in-process (``runner.main(argv)``, ``launch.main(argv)``): the refusals happen when the command line is
read (argparse types, choices, unknown flags) or, for a data file's columns, when the model reads its data,
before any fit; nothing here fits a model."""
import argparse

import pytest

import models
from inference import launch, runner

#: ``{flag id: [argv tail, ...]}``: the id is ``runner:<flag>``, ``<model>:<flag>`` or ``launch:<flag>``; each
#: tail follows ``fit <model>`` (the runner's flags: ``fit vof_regression``) or the launcher's name. ``{csv}``
#: is a small CSV with columns a, b, y; ``{file}`` an existing file (not a folder).
ROWS = {
    # --- the runner ------------------------------------------------------------------------------
    "runner:command": [["fitt"], ["lst"]],
    "runner:model": [["vof_regresion"], ["no_such_model"]],
    "runner:unknown flag": [["--num-stpes", "3"], ["--sed", "1"]],
    "runner:--method": [["--method", "sv"]],
    "runner:--num-steps": [["--num-steps", "-3"], ["--num-steps", "0"], ["--num-steps", "abc"],
                           ["--num-steps", "2.5"]],
    "runner:--lr": [["--lr", "0"], ["--lr", "-0.1"], ["--lr", "nan"], ["--lr", "inf"], ["--lr", "abc"]],
    "runner:--optimizer": [["--optimizer", "adamw"]],
    "runner:--gamma": [["--gamma", "0"], ["--gamma", "1.5"], ["--gamma", "nan"], ["--gamma", "-0.5"]],
    "runner:--warmup": [["--warmup", "-1"], ["--warmup", "abc"]],
    "runner:--samples": [["--samples", "0"], ["--samples", "1e3"]],
    "runner:--chains": [["--chains", "0"], ["--chains", "2.5"]],
    "runner:--target-accept": [["--target-accept", "1"], ["--target-accept", "0"], ["--target-accept", "nan"]],
    "runner:--max-tree-depth": [["--max-tree-depth", "0"]],
    "runner:--dense-mass": [["--dense-mass=yes"]],
    "runner:--no-dense-mass": [["--no-dense-mass=1"]],
    "runner:--seed": [["--seed", "abc"], ["--seed", "1.5"]],
    "runner:--out": [["--out", "{file}"]],
    "runner:--no-progress": [["--no-progress=1"]],
    "runner:--refine": [["--refine=yes"]],
    # --- the models' own flags ---------------------------------------------------------------------
    "airline:--csv": [["--csv", "/no/such/file.csv"]],
    "airline:--target": [["--csv", "{csv}", "--covariates", "a,b", "--target", "nosuch"]],
    "airline:--covariates": [["--csv", "{csv}", "--target", "y", "--covariates", "a,nosuch"]],
    "airline:--synthetic": [["--synthetic", "0"]],
    "airline:--num-frequencies": [["--num-frequencies", "-3"]],
    "airline:--stats-method": [["--stats-method", "fft"]],
    "airline:--split-seed": [["--split-seed", "-1"]],
    "airline:--diagnostic-rows": [["--diagnostic-rows", "0"]],
    "airline:--features": [["--features", "vf"]],
    "airline:--max-degree": [["--max-degree", "0"]],
    "airline:--subsample": [["--subsample", "-5"]],
    "banana:--num-frequencies": [["--num-frequencies", "0"]],
    "banana:--q-cov": [["--q-cov", "kron"]],
    "digits_flip:--features": [["--features", "flop"]],
    "digits_flip:--num-features": [["--num-features", "0"], ["-m", "abc"]],
    "digits_flip:--likelihood": [["--likelihood", "probit"]],
    "digits_flip:--batch-size": [["--batch-size", "0"]],
    "digits_flip:--num-train": [["--num-train", "-1"]],
    "digits_flip:--data-seed": [["--data-seed", "-1"]],
    "pines:--num-frequencies": [["--num-frequencies", "0"]],
    "pines:--ell-min": [["--ell-min", "0"], ["--ell-min", "nan"]],
    "pines:--tolerance": [["--tolerance", "0"], ["--tolerance", "1"]],
    "pines:--grid": [["--grid", "0"]],
    "pines:--drop-duplicate": [["--drop-duplicate=1"]],
    "pines:--centred": [["--centred=yes"]],
    "solar:--num-features": [["--num-features", "0"]],
    "solar:--features": [["--features", "fourrier"]],
    "solar:--collapsed": [["--collapsed=1"]],
    "uci_hkd:--dataset": [["--dataset", "kin8"]],
    "uci_hkd:--split": [["--split", "-1"]],
    "uci_hkd:--data-dir": [["--data-dir", "/no/such/folder"], ["--data-dir", "{file}"]],
    "uci_hkd:--features": [["--features", "harmonics"]],
    "uci_hkd:--num-features": [["--num-features", "0"]],
    "uci_hkd:--ways": [["--ways", "-1"]],
    "uci_hkd:--shared-z": [["--shared-z=1"]],
    "uci_hkd:--batch-size": [["--batch-size", "0"]],
    "uci_hkd:--init-seed": [["--init-seed", "-2"]],
    "uci_ssgp:--dataset": [["--dataset", "air"]],
    "uci_ssgp:--split": [["--split", "-1"]],
    "uci_vof:--dataset": [["--dataset", "yach"]],
    "uci_vof:--split": [["--split", "abc"]],
    "uci_vof:--data-dir": [["--data-dir", "/no/such/folder"]],
    "uci_vof:--features": [["--features", "trigo"]],
    "uci_vof:--num-features": [["--num-features", "0"]],
    "uci_vof:--q-cov": [["--q-cov", "block"]],
    "uci_vof:--base-kernel": [["--base-kernel", "matern"]],
    "uci_vof:--estimator": [["--estimator", "paired2"]],
    "uci_vof:--num-samples": [["--num-samples", "0"]],
    "uci_vof:--ip-kernel": [["--ip-kernel", "ardd"]],
    "uci_vof:--batch-size": [["--batch-size", "0"]],
    "uci_vof:--ip-seed": [["--ip-seed", "-1"]],
    "vof_regression:--n": [["--n", "0"]],
    "vof_regression:--num-features": [["--num-features", "-1"]],
    "vof_regression:--band": [["--band", "-2"], ["--band", "lern"], ["--band", "nan"]],
    "vof_regression:--band-init": [["--band-init", "0"]],
    "vof_regression:--estimator": [["--estimator", "exakt"]],
    "vof_regression:--num-samples": [["--num-samples", "0"]],
    "vof_regression:--basis": [["--basis", "fourir"]],
    "vof_regression:--q-cov": [["--q-cov", "ful"]],
    "vof_regression:--data-seed": [["--data-seed", "-1"]],
    # --- the launcher ------------------------------------------------------------------------------
    "launch:unknown flag": [["--pinn", "--processes", "2", "--", "x.py"]],
    "launch:--processes": [["--processes", "0", "--", "x.py"], ["--processes", "abc", "--", "x.py"],
                           ["--", "x.py"]],
    "launch:--devices-per-process": [["--processes", "2", "--devices-per-process", "0", "--", "x.py"]],
    "launch:--port": [["--processes", "2", "--port", "70000", "--", "x.py"],
                      ["--processes", "2", "--port", "0", "--", "x.py"]],
    "launch:--pin": [["--processes", "2", "--pin=yes", "--", "x.py"]],
    "launch:--timeout": [["--processes", "2", "--timeout", "-1", "--", "x.py"],
                         ["--processes", "2", "--timeout", "nan", "--", "x.py"]],
}

#: the words a row's one line must hold besides its flag (the closest valid name for a misspelt one)
SUGGESTED = {("runner:command", 0): "'fit'", ("runner:command", 1): "'list'", ("runner:model", 0): "'vof_regression'",
             ("runner:unknown flag", 0): "--num-steps", ("runner:unknown flag", 1): "--seed",
             ("runner:--method", 0): "'svi'", ("launch:unknown flag", 0): "--pin",
             ("uci_hkd:--dataset", 0): "'kin8nm'", ("vof_regression:--q-cov", 0): "'full'"}


def _flags(parser: argparse.ArgumentParser, skip=()) -> set:
    """The first option string of each action, and the ``--no-`` form of a BooleanOptionalAction."""
    out = {a.option_strings[0] for a in parser._actions if a.option_strings} | {
        "--no-" + a.option_strings[0][2:] for a in parser._actions if isinstance(a, argparse.BooleanOptionalAction)}
    return out - {"-h", *skip}


def _fit_parser(name=None, module=None):
    top = runner._parser(name, module)
    return next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices["fit"]


def parsed_flags() -> set:
    """Every flag id the parsers define (the first option string of each action)."""
    runner_flags = _flags(_fit_parser())
    out = {f"runner:{f}" for f in runner_flags} | {"runner:command", "runner:model", "runner:unknown flag"}
    for name, module in models.available().items():
        out |= {f"{name}:{f}" for f in _flags(_fit_parser(name, module), skip=runner_flags)}
    out |= {f"launch:{f}" for f in _flags(launch.parser())} | {"launch:unknown flag"}
    return out


def test_every_flag_has_a_bad_input_row():
    flags = parsed_flags()
    assert not flags - set(ROWS), f"add a bad-input row to ROWS for these flags: {sorted(flags - set(ROWS))}"
    assert not set(ROWS) - flags, f"rows for flags that no parser defines: {sorted(set(ROWS) - flags)}"


def _cases():
    return [pytest.param(flag, i, tail, id=f"{flag}:{' '.join(tail)}") for flag, tails in ROWS.items()
            for i, tail in enumerate(tails)]


def _named(flag, tail) -> str:
    """What the line must name: the flag (its first option string, or the one the row uses)."""
    name = flag.split(":", 1)[1]
    if name in ("command", "model", "unknown flag"):
        return {"command": "command", "model": "model", "unknown flag": tail[0].split("=")[0]}[name]
    used = [t.split("=")[0] for t in tail if t.startswith("-")]
    return name if name in used or not used else used[-1]


@pytest.mark.parametrize("flag, i, tail", _cases())
def test_a_bad_flag_is_refused_in_one_line_naming_it(flag, i, tail, tmp_path, capsys):
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,y\n1,2,3\n4,5,6\n")
    tail = [t.replace("{csv}", str(csv)).replace("{file}", str(csv)) for t in tail]
    where = flag.split(":", 1)[0]
    if where == "launch":
        status = launch.main(tail)
    else:
        model = {"runner": "vof_regression"}.get(where, where)
        argv = tail if flag in ("runner:command",) else (["fit"] + tail if flag == "runner:model"
                                                          else ["fit", model] + tail)
        with pytest.raises(SystemExit) as info:
            runner.main(argv)
        status = info.value.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (status, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert _named(flag, tail) in lines[0] and "error" in lines[0], lines[0]
    if (flag, i) in SUGGESTED:
        assert f"did you mean {SUGGESTED[flag, i]}" in lines[0], lines[0]
