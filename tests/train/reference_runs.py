"""The stored runs of ``ella train`` that later code must reproduce: each run again in a
child process pinned as the references were written, and compared to relative
:data:`REL_TOL` (``tests/train/test_reference_runs.py`` says how it was measured).

It holds the reference runs of ``data/reference_runs.json`` (:data:`CASES`, with the
options pinned to their values at commit a7a1f40, :data:`PINNED`); run as a script it
writes that file from the ``ella`` first on the path, with nothing but the standard
library and torch (so an old commit's ``ella`` can write it)::

    git worktree add /tmp/ref a7a1f40
    PYTHONPATH=/tmp/ref .venv/bin/python tests/train/reference_runs.py --write

:func:`write_reference` writes any such file (``tests/train/test_augmented_runs.py``'s).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REFERENCE = Path(__file__).with_name("data") / "reference_runs.json"
#: relative tolerance of a float (the module docstring says how it was measured)
REL_TOL = 5e-3
#: the environment of every reference run: MKL's kernels capped at AVX2 (read when MKL
#: starts, so only a fresh process can be pinned)
PINNED_ENV = {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
#: The reference runs: small enough for the test suite, covering the evidence rounds.
CASES: dict[str, dict] = {
    "mixer_learned": dict(
        train_size=64, test_size=64, epochs=3, batch_size=32, width=1,
        n_epochs_burnin=1, marglik_frequency=1, n_hypersteps=5, progress=False,
    ),
    "mixer_subset_mc": dict(
        train_size=96, test_size=32, epochs=2, batch_size=32, width=1,
        n_epochs_burnin=2, marglik_frequency=1, n_hypersteps=3, ggn="mc",
        marglik_subset_size=48, progress=False,
    ),
    "mlp_map": dict(
        model="mlp", train_size=128, test_size=64, epochs=2, batch_size=32,
        learn_priors=False, progress=False,
    ),
}  # fmt: skip
#: Options whose default changed after a7a1f40, pinned to the value the reference ran with
#: (a case's own setting wins).
PINNED: dict[str, object] = {
    "head_init": "default", "lr": 1e-3, "norm": "none", "ggn": "exact",
    "marglik_subset_size": None, "augment": "none", "downsample": "polyphase",
    "report_state": "best_evidence", "lr_scaling": "none", "prior_update": "adam",
    "prior_step": 1.0, "marglik_frequency": 3, "zero_init": (), "gconv_lr": "same",
}  # fmt: skip
RESULT_KEYS = (
    "test_accuracy",
    "test_nll",
    "log_marglik",
    "log_marglik_reported_state",
    "prior_precision",
    "effective_parameters",
)


#: child processes that train a batch of configurations side by side, one thread each
CHILDREN = 2


def run_cases(options: list[dict]) -> list[dict]:
    """Train each configuration in a child process with ``PINNED_ENV`` (the ``ella`` this
    process imports, one thread), :data:`CHILDREN` children side by side, each taking
    every other configuration; their metrics and results (:func:`run_case_here`), in the
    order of ``options``. A run's figures do not depend on the process it shares."""
    env = {**os.environ, **PINNED_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code = (
        "import json, runpy, sys\n"
        "run = runpy.run_path(sys.argv[1])['run_case_here']\n"
        "print(json.dumps([run(o) for o in json.loads(sys.argv[2])]))\n"
    )
    parts = [list(range(len(options)))[n::CHILDREN] for n in range(CHILDREN)]
    found: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        children = []
        for n, part in enumerate(p for p in parts if p):
            out, err = Path(tmp) / f"{n}.out", Path(tmp) / f"{n}.err"
            with out.open("w") as stdout, err.open("w") as stderr:  # files: no full pipe
                child = subprocess.Popen(
                    [sys.executable, "-c", code, __file__, json.dumps([options[i] for i in part])],
                    stdout=stdout, stderr=stderr, text=True, env=env,
                )  # fmt: skip
            children.append((part, out, err, child))
        for part, out, err, child in children:
            assert child.wait() == 0, err.read_text()[-4000:]
            found.update(zip(part, json.loads(out.read_text().splitlines()[-1]), strict=True))
    return [found[i] for i in range(len(options))]


def run_case(options: dict) -> dict:
    """:func:`run_cases` of one configuration."""
    return run_cases([options])[0]


#: the runs of this session, by their options (JSON): a module's cases train together
_RUNS: dict[str, dict] = {}


def cached_run(options: dict, batch: list[dict], folder: Path | None = None) -> dict:
    """The run of ``options``, training it with the rest of ``batch`` (:func:`run_cases`)
    the first time any of them is asked for; with ``folder`` (a session's shared folder),
    once in the session, whichever worker asks first
    (:func:`tests.session_once.computed_once`)."""
    key = json.dumps(options, sort_keys=True)
    if key not in _RUNS:
        missing = [o for o in batch if json.dumps(o, sort_keys=True) not in _RUNS]
        if folder is None:
            runs = run_cases(missing)
        else:
            from tests.session_once import computed_once

            name = hashlib.sha256(json.dumps(missing, sort_keys=True).encode()).hexdigest()
            runs = computed_once(folder, f"runs-{name[:16]}", lambda: run_cases(missing))
        for o, run in zip(missing, runs, strict=True):
            _RUNS[json.dumps(o, sort_keys=True)] = run
    return _RUNS[key]


def run_case_here(options: dict) -> dict:
    """Train one configuration in a temporary directory (one thread); its metrics and results."""
    from ella.train import TrainConfig, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            results = train(TrainConfig(**options), out)
            lines = (out / "metrics.jsonl").read_text().splitlines()
    finally:
        torch.set_num_threads(threads)
    kept = {key: results[key] for key in RESULT_KEYS}
    # the paper's per-parameter measure was added to each layer row after a7a1f40 (derived
    # from the same per-tensor effective parameters; tests/marglik/test_priors.py)
    kept["effective_parameters"] = [
        {k: v for k, v in row.items() if k != "relative"} for row in kept["effective_parameters"]
    ]
    return {"metrics": [json.loads(line) for line in lines], "results": kept}


def assert_close(actual, expected, where: str = "") -> None:
    """Equal structure; equal strings, ints and bools; floats to relative ``REL_TOL``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), where
        for key in expected:
            assert_close(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert math.isclose(actual, expected, rel_tol=REL_TOL, abs_tol=1e-7), (
            f"{where}: {actual} != {expected}"
        )
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def assert_reproduces(
    reference: Path, name: str, options: dict, run_options: dict, batch: list[dict],
    folder: Path | None = None,
) -> None:  # fmt: skip
    """Run case ``name`` of the stored ``reference`` file (whose options must be
    ``options``) with ``run_options`` (trained with the rest of ``batch``, once in the
    session where ``folder`` is its shared folder: :func:`cached_run`) and compare
    (:func:`assert_close`); the metric rows may only have gained keys, and the reference's
    keys must all be there."""
    case = json.loads(reference.read_text())["cases"][name]
    assert case["options"] == options
    expected = {k: case[k] for k in ("metrics", "results")}
    actual = copy.deepcopy(cached_run(run_options, batch, folder))
    for row, ref_row in zip(actual["metrics"], expected["metrics"], strict=True):
        for key in set(row) - set(ref_row):
            del row[key]
    assert_close(actual, expected, name)


def write_reference(reference: Path, cases: dict[str, dict], cwd: Path | None = None) -> None:
    """Train every case of ``cases`` (:func:`run_case`) and write their metrics and results
    to ``reference``, with the commit of the git checkout at ``cwd`` (this process's
    directory by default) and torch's version."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
        cwd=cwd,
    ).stdout.strip()  # fmt: skip
    runs = {name: {"options": opts, **run_case(opts)} for name, opts in cases.items()}
    payload = {"commit": commit, "torch": torch.__version__, "cases": runs}
    reference.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"wrote {reference} at commit {commit}")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_reference(REFERENCE, CASES, cwd=Path(__import__("ella").__file__).parent)
