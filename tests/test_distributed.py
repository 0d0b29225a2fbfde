"""Data parallelism (``ella.distributed``): shards, one global data order, and the evidence
of two processes (started by torchrun, gloo on CPU) against one process on all the data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from ella import distributed
from ella.errors import DistributedError

ROOT = Path(__file__).resolve().parents[1]


def torchrun(*args: str, processes: int = 2) -> list[str]:
    """The command that starts ``args`` (a script, or ``-m module ...``) in ``processes``
    processes on this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        *args,
    ]


def worker_env() -> dict[str, str]:
    """The environment of torchrun's workers: one thread each, this checkout first on the
    path, and the caller's own ``PYTHONPATH`` kept after it (packages installed there)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def run_torchrun(*args: str, timeout: float = 300, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = worker_env()
    return subprocess.run(
        torchrun(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def why(done: subprocess.CompletedProcess) -> str:
    """What a failed run printed: its first and last lines of stderr (a process that dies
    first, e.g. by SIGABRT, is reported early; the launcher's summary comes last)."""
    text = done.stderr
    return text if len(text) <= 6000 else f"{text[:3000]}\n[...]\n{text[-3000:]}"


def run_alone(*args: str) -> None:
    """Run ``python ARGS`` in one process with one thread; it must succeed."""
    alone = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert alone.returncode == 0, why(alone)


def run_alone_and_torchrun(*args: str, one: list[str], two: list[str]):
    """Run ``python ARGS ONE`` in one process and ``ARGS TWO`` under torchrun in two; both
    must succeed. Returns torchrun's completed process."""
    run_alone(*args, *one)
    done = run_torchrun(*args, *two)
    assert done.returncode == 0, why(done)
    return done


# ---------------------------------------------------------------- one process
@pytest.mark.parametrize("n", [0, 1, 5, 6, 7])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_shards_cover_every_item_once_in_order(n, size):
    shards = [distributed.World(rank, size).shard(n) for rank in range(size)]
    assert [i for shard in shards for i in shard] == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    expected = [len(part) for part in torch.arange(n).tensor_split(size)]
    assert [len(s) for s in shards] == expected


def test_global_batches_are_the_data_loaders_order():
    data = TensorDataset(torch.arange(23))
    generator = torch.Generator().manual_seed(3)
    loader = DataLoader(data, batch_size=5, shuffle=True, generator=generator)
    ours = distributed.global_batches(23, 5, torch.Generator().manual_seed(3))
    assert [b.tolist() for b in ours] == [x.tolist() for (x,) in loader]


def test_single_process_world_is_a_no_op():
    world = distributed.current()
    assert (world.rank, world.size, world.is_main, world.distributed) == (0, 1, True, False)
    t = torch.ones(3)
    assert world.sum_(t) is t and t.tolist() == [1.0, 1.0, 1.0]
    assert world.sum_values(2, 3.5) == [2.0, 3.5]
    assert world.broadcast_text("runs/x") == "runs/x"
    assert world.main_first(lambda: 7) == 7
    world.check_identical(t, "anything")


def test_device_maps_cuda_to_the_local_gpu():
    world = distributed.World(rank=3, size=4, local_rank=1)
    assert world.device(torch.device("cuda")) == torch.device("cuda", 1)
    assert world.device(torch.device("cpu")) == torch.device("cpu")
    assert distributed.World().device(torch.device("cuda", 0)) == torch.device("cuda", 0)


def test_peer_failure_becomes_a_clear_error():
    world = distributed.World(0, 2)
    expected = pytest.raises(DistributedError, match="another process of this job stopped.*resume")
    with expected, distributed.peer_failures(world, lambda: "resume from epoch 2"):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    # not a collective's failure: unchanged
    with pytest.raises(ValueError, match="unrelated"), distributed.peer_failures(world, str):
        raise ValueError("unrelated")


def test_not_launched_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.launched()
    assert distributed.start() == distributed.World()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not distributed.launched()


# ---------------------------------------------------------------- two processes
@pytest.fixture(scope="module")
def launched(session_folder) -> tuple[Path, Path]:
    """The evidence, fit and ensembles works of ``tests/distributed_workers.py`` in one
    process and in one torchrun launch of two (``every``: a launch costs the suite about
    15 s), once in the session; the directories of the one and of the two."""
    from tests.session_once import made_once

    def launch(where: Path) -> None:
        one, two = str(where / "one"), str(where / "two")
        run_alone_and_torchrun("tests/distributed_workers.py", "every", one=[one], two=[two])

    where = made_once(session_folder, "distributed", launch)
    return where / "one", where / "two"


@pytest.mark.slow
def test_evidence_of_two_shards_equals_the_evidence_of_all_data(launched):
    """Exact GGN, float64: every Kronecker factor, the log evidence and its gradient in the
    log precisions, summed over two processes' shards, equal one process's fit on all the
    data to relative 1e-6; so do the precisions after subset-evidence Adam steps."""
    r = json.loads((launched[1] / "evidence.json").read_text())
    assert r["world_size"] == 2
    sharded, single = r["sharded"], r["single"]
    assert sharded["value"] == pytest.approx(single["value"], rel=1e-6)
    assert sharded["grad"] == pytest.approx(single["grad"], rel=1e-6, abs=1e-9)
    assert sharded["factors"] == pytest.approx(single["factors"], rel=1e-6)
    assert r["learner_sharded"] == pytest.approx(r["learner_single"], rel=1e-5)


# ---------------------------------------------------------------- ella train under torchrun
TRAIN = [
    "--train-size", "48", "--test-size", "32", "--width", "1", "--epochs", "2",
    "--batch-size", "16", "--n-epochs-burnin", "1", "--marglik-frequency", "1",
    "--n-hypersteps", "2", "--no-progress",
    # the MC GGN draws each process's labels from that process's generator, so only the
    # exact GGN can give the one-process evidence to float precision; with instance norm
    # (the default) the summation order's ~1e-7 grew to 2.2e-3 relative in the effective
    # parameters after 2 epochs at width 1 (log precisions still within 1e-4), so the
    # comparison runs without it
    "--ggn", "exact", "--norm", "none",
    # ella train's recipe amplifies that summation order too: 2x2 max downsampling routes
    # each gradient to one of four pixels, and shifted images change every batch, so a
    # ~1e-7 difference grew to 1.7e-4 (max downsampling alone) and 6.2e-4 (shifts alone)
    # in one log precision after 2 epochs; the arithmetic of data parallelism is what
    # this test checks, so it runs without them; with Adam's rate per fan-in (ella
    # train's default since 2026-11-24) the difference reached 1.4e-3 (one log precision),
    # and with the GCONV paths at |G| times Adam's rate (--gconv-lr auto, the default since
    # 2026-11-26) 1.3e-2 after 3 epochs against 4.6e-7 without (one process with and
    # without differs by up to 0.95, so both processes did take the larger steps)
    "--downsample", "polyphase", "--augment", "none", "--lr-scaling", "none",
    "--gconv-lr", "same",
]  # fmt: skip


def _log_precisions(results: dict) -> list[float]:
    return [math.log(v) for v in results["prior_precision"].values()]


def _effective(results: dict) -> list[float]:
    return [
        row["effective"][path]
        for row in results["effective_parameters"]
        for path in row["effective"]
    ]


def _worker_of_rank(launcher: int, rank: int) -> int | None:
    """The pid of the process torchrun (pid ``launcher``) started for ``rank``, from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == launcher and f"RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    return None


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_torchrun_train_survives_a_killed_process_and_ends_where_one_process_ends(tmp_path):
    """Two processes with 8 images each per batch: when one is killed, the job ends with a
    clear error naming --resume; the resumed job ends where one process with batches of 16
    ends: the prior precisions within 1e-4 in log, the effective parameters and the
    evidence within relative 1e-3. Float32: the order of the gradient sums differs by about
    1e-7; after 3 epochs and 2 evidence rounds it had grown to 2.3e-5 in a log precision
    and 1.8e-4 relative in an effective parameter count, measured without a kill (a wrong
    gradient average or a lost epoch moves them by far more). Process 0 alone writes the
    run directory: the same files as one process's run, one metrics row per epoch, no
    temporaries.

    (One test for both: each torchrun launch costs the suite about 15 s of start-up.)"""
    one, out = tmp_path / "one", tmp_path / "two"
    options = [*TRAIN, "--epochs", "3", "--n-epochs-burnin", "2"]
    run_alone("-m", "ella", "train", *options, "--out", str(one))
    env = worker_env()
    job = subprocess.Popen(
        torchrun("-m", "ella", "train", *options, "--out", str(out)), cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().strip()) and job.poll() is None:
        assert time.monotonic() < deadline, "no epoch finished in time"
        time.sleep(0.05)
    victim = _worker_of_rank(job.pid, 1)
    assert victim is not None, "the worker of rank 1 was not found"
    os.kill(victim, signal.SIGKILL)
    output, _ = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "process 0 of 2" in output and "another process of this job" in output, output[-3000:]
    assert "--resume" in output
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    done_before = checkpoint["state"]["epoch"]
    assert 1 <= done_before < 3
    resumed = run_torchrun("-m", "ella", "train", "--out", str(out), "--resume", "--no-progress")
    assert resumed.returncode == 0, why(resumed)
    assert resumed.stdout.count("run directory:") == 1  # printed by process 0 only
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    a = json.loads((one / "results.json").read_text())
    b = json.loads((out / "results.json").read_text())
    assert b["processes"] == 2 and a["processes"] == 1 and b["epochs"] == 3
    assert _log_precisions(b) == pytest.approx(_log_precisions(a), abs=1e-4)
    assert _effective(b) == pytest.approx(_effective(a), rel=1e-3)
    assert b["log_marglik"] == pytest.approx(a["log_marglik"], rel=1e-3)
    assert b["test_accuracy"] == a["test_accuracy"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in one.iterdir())


@pytest.mark.slow
def test_fit_under_torchrun_equals_one_process(launched):
    """ella.fit in a script started by torchrun (the user's DataLoader resharded: 2
    processes load 4 + 4 of every batch of 8, 3 + 3 of the last batch of 6) ends with the
    precisions, evidence and metrics of one process, to relative 1e-9 in float64; only
    process 0 writes."""
    one, two = (where / "fit.json" for where in launched)
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert list(b["prior_precision"].values()) == pytest.approx(
        list(a["prior_precision"].values()), rel=1e-6
    )  # float32 log precisions
    assert b["log_marglik"] == pytest.approx(a["log_marglik"], rel=1e-9)
    for row_a, row_b in zip(a["metrics"], b["metrics"], strict=True):
        for key in ("train_loss", "train_nll", "test_nll", "test_accuracy"):
            assert row_b[key] == pytest.approx(row_a[key], rel=1e-9)
    assert len((launched[1] / "fit.json.run" / "metrics.jsonl").read_text().splitlines()) == 3


@pytest.mark.slow
def test_torchrun_ensembles_match_one_process(launched):
    """Repulsive ensembles (FoRDE with sampled augmentation, function-space RDE with the
    orbit) in 2 processes (each with its part of every augmented batch; the repulsion's
    force from the features of the whole batch, gathered) train as in one process: train
    loss per epoch within relative 1e-5, accuracies within one image, test NLL within 1e-5
    (float32). Both ensembles run in one launch of each kind."""
    from tests.distributed_workers import ENSEMBLES

    one, two = (where / "ensembles" for where in launched)
    for method, _ in ENSEMBLES:
        runs = (one / method, two / method)
        rows = [
            [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            for run in runs
        ]
        assert len(rows[0]) == 2
        for a, b in zip(*rows, strict=True):
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5), method
            # an argmax may flip between nearly tied logits: at most one image of 176 per epoch
            assert b["train_accuracy"] == pytest.approx(a["train_accuracy"], abs=1.01 / 176)
        test_a, test_b = (json.loads((run / "results.json").read_text())["test"] for run in runs)
        assert test_b["nll"] == pytest.approx(test_a["nll"], rel=1e-5), method
        assert test_b["accuracy"] == pytest.approx(test_a["accuracy"], abs=1.01 / 24), method
