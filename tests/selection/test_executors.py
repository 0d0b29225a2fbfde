"""Where a round's candidates train (``ella select --executor``): in this process, in
worker processes, or on Ray, with the same record; a worker killed in the middle of a
candidate is replaced; what cannot run is refused before any work."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from ella import selection
from ella.cli import main
from ella.errors import ConfigError
from ella.rundir.files import PATH_SELECTION
from ella.selection.answer import format_path_selection
from ella.selection.executors import (
    EXECUTORS,
    LocalExecutor,
    ProcessExecutor,
    RayExecutor,
    executor_of,
)
from ella.selection.record import read_selection
from ella.selection.searches import CONTROL, control_first, greedy_selection, new_record
from tests.cli_runs import TINY_MIXER, refused, snapshot


def killed_once(marker: str, work, job):
    """``work(job)``, then, the first time only (``marker`` not yet made), the end of this
    worker process by SIGKILL before it returns: a worker lost in the middle of a job."""
    result = work(job)
    try:
        open(marker, "x").close()
    except FileExistsError:
        return result
    os.kill(os.getpid(), signal.SIGKILL)


class KilledProcesses(ProcessExecutor):
    """Worker processes, one of which dies in the middle of its first candidate."""

    def __init__(self, marker: Path):
        super().__init__(workers=2)
        self.marker = str(marker)

    def map(self, work, jobs, progress=False):
        return super().map(partial(killed_once, self.marker, work), jobs, progress)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Every candidate of this module trains with one torch thread, wherever it runs (a
    candidate's figures depend on its thread count: :mod:`ella.selection.executors`)."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ELLA_THREADS", "1")
        torch.set_num_threads(1)
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def mixer_run(tmp_path_factory) -> Path:
    """A finished tiny CONV+GCONV mixer run, trained once for this module."""
    run = tmp_path_factory.mktemp("executors") / "run"
    assert main(["train", "--out", str(run), *TINY_MIXER]) == 0
    return run


@pytest.fixture(scope="module")
def local_text(mixer_run, tmp_path_factory) -> str:
    """The printed record of the tiny run's greedy selection under the local executor."""
    return selected(mixer_run, tmp_path_factory.mktemp("local"), "local")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with two CPUs for this module's Ray tests, shut down after
    (Ray is pinned in the lock, so a missing one fails here rather than skip its tests)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def selected(run: Path, where: Path, executor, **settings) -> str:
    """A private copy of ``run``'s greedy selection (one epoch a candidate) under
    ``executor``, its record printed."""
    copy = Path(shutil.copytree(run, where / "run"))
    selection.select(copy, epochs=1, executor=executor, progress=False, **settings)
    record = read_selection(copy / PATH_SELECTION)
    assert record["finished"]
    return format_path_selection(record)


@pytest.mark.slow
def test_worker_processes_give_the_local_record_with_a_worker_killed(
    mixer_run, local_text, tmp_path
):
    """One test for both (a pool's start costs the suite about 5 s): the record of worker
    processes, one of them killed in the middle of a candidate, is the local one."""
    assert "round 1" in local_text and "selected:" in local_text
    marker = tmp_path / "killed"
    assert selected(mixer_run, tmp_path, KilledProcesses(marker)) == local_text
    assert marker.exists()  # a worker did die, and its candidate trained again


@pytest.mark.slow
def test_ella_select_on_ray_gives_the_local_record(
    mixer_run, local_text, tmp_path, local_ray, capsys
):
    copy = Path(shutil.copytree(mixer_run, tmp_path / "run"))
    ask = ["select", str(copy), "--epochs", "1", "--no-progress", "--executor", "ray"]
    assert main([*ask, "--workers", "2"]) == 0
    assert capsys.readouterr().out.count(local_text) == 1


def test_a_ray_task_whose_process_is_killed_is_retried(tmp_path, local_ray):
    marker = tmp_path / "killed"
    work = partial(killed_once, str(marker), abs)
    found = dict(RayExecutor().map(work, [-1, -2, -3]))
    assert found == {0: 1, 1: 2, 2: 3} and marker.exists()


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc")
def test_worker_processes_serve_every_round_until_closed():
    pid = partial(os.readlink)  # readlink("/proc/self"): the process's id, in the worker
    executor = ProcessExecutor(workers=1)
    try:
        first, second = (
            dict(executor.map(pid, ["/proc/self"])),
            dict(executor.map(pid, ["/proc/self"])),
        )
    finally:
        executor.close()
    assert first == second and first[0] != str(os.getpid())  # one worker, started once
    assert executor._pool is None


def test_an_unreachable_ray_cluster_is_refused_before_any_work(mixer_run, capsys, monkeypatch):
    before = snapshot(mixer_run)
    ask = ["select", str(mixer_run), "--epochs", "1", "--no-progress", "--executor", "ray"]
    refused(capsys, [*ask, "--address", "127.0.0.1:1"], 1, "--address 127.0.0.1:1", "ray start")
    refused(capsys, [*ask, "--address", "nowhere"], 1, "--address nowhere must be HOST:PORT")
    with pytest.raises(ConfigError, match=r"address='127.0.0.1:1'"):
        selection.select(mixer_run, executor="ray", address="127.0.0.1:1")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # the cluster Ray joins by default
    refused(capsys, ask, 1, "the Ray cluster at RAY_ADDRESS=127.0.0.1:1")
    assert snapshot(mixer_run) == before  # no record, no state


def test_ray_not_installed_is_refused_naming_the_extra(mixer_run, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    before = snapshot(mixer_run)
    ask = ["select", str(mixer_run), "--no-progress", "--executor", "ray"]
    refused(capsys, ask, 1, "--executor ray needs Ray", "ella-torch[ray]: pip install '.[ray]'")
    with pytest.raises(ConfigError, match=r"executor='ray' needs Ray"):
        selection.select(mixer_run, executor="ray")
    assert snapshot(mixer_run) == before


def test_executor_settings_are_refused_in_the_callers_words():
    assert list(EXECUTORS) == ["local", "processes", "ray"]
    assert isinstance(executor_of(None), LocalExecutor)
    with pytest.raises(ConfigError, match="--executor must be one of local, processes, ray"):
        executor_of("threads", option="--executor")
    with pytest.raises(ConfigError, match=r"--address h:1 names a Ray cluster: add --executor"):
        executor_of("processes", address="h:1", option="--executor")
    with pytest.raises(ConfigError, match=r"address='h:1' names a Ray cluster: add executor="):
        executor_of("local", address="h:1")
    with pytest.raises(ConfigError, match="--workers must be an int of 1 or more; got 0"):
        executor_of("processes", workers=0, option="--executor")
    with pytest.raises(ConfigError, match="workers must be an int of 1 or more; got 1.5"):
        executor_of("ray", workers=1.5)
    with pytest.raises(ConfigError, match="the local executor trains one at a time"):
        executor_of("local", workers=2)
    assert executor_of("processes", workers=2).workers == 2


def test_the_command_line_refuses_a_bad_executor_before_any_work(mixer_run, capsys):
    ask = ["select", str(mixer_run), "--no-progress"]
    refused(capsys, [*ask, "--executor", "gpu"], 1, "--executor must be one of local")
    refused(capsys, [*ask, "--workers", "3"], 1, "--workers sets how many")


def test_rows_that_finish_before_the_control_wait_for_it():
    labels = [CONTROL, "conv", "gconv"]
    finished = [(2, ("g", {})), (0, ("c", {})), (1, ("v", {}))]
    assert [k for k, _, _ in control_first(iter(finished), labels, False)] == [
        CONTROL, "gconv", "conv",
    ]  # fmt: skip
    early = list(control_first(iter([(2, ("g", {})), (1, ("v", {}))]), labels, True))
    assert [k for k, _, _ in early] == ["gconv", "conv"]  # the control was recorded before


def fake_train(dropped: list[str], start) -> tuple[dict, dict]:
    """A candidate's row and end state that depend on what it dropped alone: dropping
    ``gconv`` raises the evidence, then nothing does."""
    kept = [p for p in ("conv", "gconv", "fc") if p not in dropped]
    evidence = -100.0 + 10.0 * ("gconv" in dropped) - 5.0 * len(set(dropped) - {"gconv"})
    row = {
        "kept": kept, "log_evidence": evidence, "log_likelihood": evidence / 2,
        "test_accuracy": 0.5, "train_nll": 1.0, "shares": {p: 1 / len(kept) for p in kept},
    }  # fmt: skip
    return row, {"model": {"dropped": list(dropped)}, "log_prior": {}}


def test_the_greedy_record_does_not_depend_on_the_order_candidates_finish():
    paths = ["conv", "gconv", "fc"]

    def in_order(jobs):
        return enumerate(fake_train(*job) for job in jobs)

    def reversed_(jobs):
        return reversed(list(in_order(jobs)))

    def record() -> dict:
        return {**new_record(1, paths), "null": {"log_likelihood": -1e3, "log_evidence": -1e3}}

    ahead = greedy_selection(record(), paths, in_order)
    behind = greedy_selection(record(), paths, reversed_)
    assert ahead == behind and ahead[0]["kept"] == ["conv", "fc"]
    assert [r["dropped"] for r in ahead[0]["rounds"][0]["rows"]] == [CONTROL, *paths]
