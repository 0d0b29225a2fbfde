"""Where a round's candidates train: in this process, in worker processes, or on Ray.

A round's candidates are independent by construction (each is the same network trained
from the same start with other units held at zero, seeded by the run's seed, not by its
place in the round), so an executor may train them in any order and at once. An executor
takes a picklable function ``work`` and the round's jobs and yields ``(index, result)``
as each job finishes; it writes nothing. The selecting process alone writes the record
and the states (:mod:`ella.selection.searches`), so two workers never write one file.

- ``"local"`` (:class:`LocalExecutor`, the default): one after another in this process;
- ``"processes"`` (:class:`ProcessExecutor`): a pool of ``workers`` processes on this
  machine (``spawn`` start), each with ``cpus // workers`` torch threads so that together
  they use the machine's cores once (``ELLA_THREADS``, where set, wins);
- ``"ray"`` (:class:`RayExecutor`): each job a Ray task (Moritz et al., OSDI 2018) on the
  cluster at ``address``, or on a local instance, asking for the CPUs and GPUs one
  candidate needs.

A candidate's figures are a function of its inputs and of the torch threads it trains
with (the order of floating-point sums): at equal threads, every executor gives the same
record; set ``ELLA_THREADS`` to train every candidate with the same count everywhere.

A worker that dies in the middle of a job (killed, out of memory) is replaced and the
jobs it had not returned are trained again, up to :data:`MAX_RETRIES` times; the results
are the same, since a job is a function of its inputs alone.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from tqdm import tqdm

from ella.errors import ConfigError
from ella.runtime.system import available_cpus, chosen_threads

__all__ = [
    "DEFAULT_EXECUTOR",
    "EXECUTORS",
    "MAX_RETRIES",
    "Executor",
    "LocalExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "executor_of",
    "run_job",
]

#: how many times a job whose worker died is started again before the selection stops
MAX_RETRIES = 2
#: the executor of every selection that names none
DEFAULT_EXECUTOR = "local"


def run_job(work: Callable[[Any], Any], threads: int, job: Any, cwd: str | None = None) -> Any:
    """``work(job)`` in a worker, with torch's intra-op threads set to ``threads`` and in
    the selecting process's working directory ``cwd`` where this machine has it (so that
    the relative paths a run names are read alike)."""
    os.environ["ELLA_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    if cwd is not None and os.path.isdir(cwd):
        os.chdir(cwd)
    return work(job)


class Executor:
    """Runs a round's jobs (subclass it; :data:`EXECUTORS` holds the kinds by name).

    Attributes:
        name: the registry key (``ella select --executor NAME``).
        in_process: whether ``work`` runs in this process (it may then be any callable;
            elsewhere it must be picklable: a module-level function or a
            :func:`functools.partial` of one).
    """

    name: str = ""
    in_process: bool = False

    def check(self) -> None:
        """Refuse, before any work, what this executor cannot run on (naming the fix)."""

    def map(
        self, work: Callable[[Any], Any], jobs: Sequence[Any], progress: bool = False
    ) -> Iterator[tuple[int, Any]]:
        """``(index, work(jobs[index]))`` for every job, as each finishes."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`check` or :meth:`map` started."""


class LocalExecutor(Executor):
    """One job after another in this process, in order (each job's own progress bar)."""

    name, in_process = "local", True

    def map(self, work, jobs, progress=False):
        """``work(job)`` for each job in turn."""
        for index, job in enumerate(jobs):
            yield index, work(job)


def _is_count(value: Any) -> bool:
    """Whether ``value`` is an int of 1 or more (``True`` is not)."""
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _cpus_per_worker(workers: int, cpus: int | None = None) -> int:
    """The CPUs each of ``workers`` gets so that together they use ``cpus`` once."""
    return max(1, (cpus or available_cpus()) // workers)


def _threads(cpus: float) -> int:
    """A worker's torch threads: ``ELLA_THREADS`` (or ``OMP_NUM_THREADS``) where the user
    chose a count, else its ``cpus``."""
    return chosen_threads() or int(max(1, cpus))


@dataclass
class ProcessExecutor(Executor):
    """A pool of ``workers`` spawned processes on this machine (default: one per CPU),
    each with :func:`_cpus_per_worker` threads, started at the first round and kept for
    the next ones until :meth:`close`; a pool whose worker died is replaced and the jobs
    not yet returned start again."""

    workers: int | None = None
    name = "processes"

    def __post_init__(self):
        if self.workers is None:
            self.workers = available_cpus()
        self._pool: ProcessPoolExecutor | None = None

    def check(self) -> None:
        """``workers`` must be an int of 1 or more."""
        if not _is_count(self.workers):
            raise ConfigError(
                f"workers (--workers) must be an int of 1 or more; got {self.workers!r}"
            )

    def map(self, work, jobs, progress=False):
        """The jobs on the pool, as each finishes."""
        threads = _threads(_cpus_per_worker(self.workers))
        pending, failures = dict(enumerate(jobs)), 0
        bar = tqdm(total=len(jobs), desc="candidates", leave=False, disable=not progress)
        try:
            while pending:
                broken = False
                if self._pool is None:  # workers start as jobs need them (spawn)
                    spawn = multiprocessing.get_context("spawn")
                    self._pool = ProcessPoolExecutor(self.workers, spawn)
                try:
                    futures = {
                        self._pool.submit(run_job, work, threads, job, os.getcwd()): n
                        for n, job in pending.items()
                    }
                    waiting = set(futures)
                    while waiting:
                        finished, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                        for future in sorted(finished, key=futures.get):
                            if isinstance(future.exception(), BrokenProcessPool):
                                broken = True
                                continue
                            result = future.result()  # a job's own error ends the round
                            index = futures[future]
                            del pending[index]
                            bar.update()
                            yield index, result
                except BaseException:
                    self._discard(terminate=True)
                    raise
                if broken:
                    self._discard()
                    failures += 1
                    if failures > MAX_RETRIES:
                        raise RuntimeError(
                            f"a worker process died {failures} times while training "
                            f"{len(pending)} candidate(s) (killed, or out of memory?); the "
                            "candidates finished so far are kept: run the selection again "
                            "with fewer --workers, or with --executor local"
                        )
        finally:
            bar.close()

    def _discard(self, terminate: bool = False) -> None:
        """Shut the pool down (``terminate``: its workers stopped at once, on an error or
        an interrupt in this process); the next round starts another."""
        if self._pool is None:
            return
        if terminate:
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def close(self) -> None:
        """Shut the pool down."""
        self._discard()


def _said(setting: str, value: Any, flags: bool) -> str:
    """A setting as its caller writes it: ``--setting value`` on the command line,
    ``setting='value'`` in Python."""
    return f"--{setting} {value}" if flags else f"{setting}={value!r}"


def _probe(address: str, named: str, example: str, timeout: float = 5.0) -> None:
    """Refuse, within ``timeout`` seconds, a Ray address ``HOST:PORT`` that nothing
    listens on (``ray.init`` itself retries for minutes), ``named`` as its caller gave it
    (``example``: a good one, said alike); ``"auto"`` and ``ray://`` addresses are left to
    Ray."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{named} must be HOST:PORT, e.g. {example}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(
            f"could not reach the Ray cluster at {named} ({err.strerror or err}): start it "
            f"(ray start --head --port {port}) or give the address of one that runs"
        ) from None


@dataclass
class RayExecutor(Executor):
    """Each job a Ray task on the cluster at ``address`` (``None``: the instance this
    process is connected to, or a new local one), asking for ``cpus`` CPUs (default: all
    of a local machine's over ``workers``, else 1) and ``gpus`` GPUs (a fraction where
    several candidates share one; ``None``: one where the run trains on a GPU, else none,
    set by :func:`ella.selection.run_search`); Ray starts a task again whose worker died.
    ``flags``: whether refusals name command-line flags or Python keywords."""

    address: str | None = None
    workers: int | None = None
    gpus: float | None = None
    flags: bool = True
    name = "ray"

    def __post_init__(self):
        self._started = False

    def check(self) -> None:
        """Ray installed and its cluster reachable; else a :class:`ConfigError` naming the
        extra to install or ``--address``."""
        try:
            import ray
        except ImportError:
            raise ConfigError(
                f"{_said('executor', 'ray', self.flags)} needs Ray, ella-torch's extra "
                "ella-torch[ray]: pip install '.[ray]' in ella's checkout, or pip install ray"
            ) from None
        if self.address:
            example = _said("address", "10.0.0.1:6379", self.flags)
            _probe(self.address, _said("address", self.address, self.flags), example)
        elif os.environ.get("RAY_ADDRESS"):  # the cluster ray.init joins without an address
            where = os.environ["RAY_ADDRESS"]
            _probe(where, f"RAY_ADDRESS={where}", "RAY_ADDRESS=10.0.0.1:6379")
        if ray.is_initialized():
            connected = ray.get_runtime_context().gcs_address
            if self.address and self.address not in ("auto", connected):
                raise ConfigError(
                    f"this process is connected to the Ray cluster at {connected} already: "
                    f"leave {_said('address', self.address, self.flags)} out, or call "
                    "ray.shutdown() first"
                )
            return
        try:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            where = (
                f"the Ray cluster at {_said('address', self.address, self.flags)}"
                if self.address
                else "a local Ray instance"
            )
            raise ConfigError(
                f"could not start or reach {where} ({str(err).splitlines()[0][:200]}): "
                "start the cluster (ray start --head) and give its address"
            ) from None
        self._started = True

    def map(self, work, jobs, progress=False):
        """The jobs as Ray tasks, as each finishes."""
        import ray

        if not ray.is_initialized():  # used without run_search, which checked it
            self.check()
        cpus = self._cpus()
        remote = ray.remote(run_job).options(
            num_cpus=cpus, num_gpus=self.gpus or 0, max_retries=MAX_RETRIES
        )
        work_ref = ray.put(work)
        threads, cwd = _threads(cpus), os.getcwd()
        refs = {remote.remote(work_ref, threads, job, cwd): n for n, job in enumerate(jobs)}
        bar = tqdm(total=len(jobs), desc="candidates", leave=False, disable=not progress)
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    index = refs.pop(ref)
                    bar.update()
                    yield index, ray.get(ref)
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)
            bar.close()

    def _cpus(self) -> float:
        """The CPUs one task asks for."""
        if self.workers:
            import ray

            total = int(ray.cluster_resources().get("CPU", 1))
            return float(_cpus_per_worker(self.workers, total))
        return 1.0

    def close(self) -> None:
        """Shut down the local instance :meth:`check` started (a cluster is left alone)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


#: the executors by name: ``ella select --executor NAME``, ``ella.select(executor=NAME)``
EXECUTORS: dict[str, type[Executor]] = {
    "local": LocalExecutor,
    "processes": ProcessExecutor,
    "ray": RayExecutor,
}


def executor_of(
    name: str | Executor | None = None,
    *,
    workers: int | None = None,
    address: str | None = None,
    gpus: float | None = None,
    option: str = "executor",
) -> Executor:
    """The executor ``name`` (``None``: local) with its settings, checked before any work;
    an :class:`Executor` is returned as it is.

    Raises:
        ConfigError: an unknown name, or a setting the executor does not take, naming
            ``option``.
    """
    if isinstance(name, Executor):
        return name
    name = name or DEFAULT_EXECUTOR
    cli = option.startswith("--")
    said = partial(_said, flags=cli)
    if name not in EXECUTORS:
        raise ConfigError(f"{option} must be one of {', '.join(EXECUTORS)}; got {name!r}")
    if address is not None and name != "ray":
        raise ConfigError(
            f"{said('address', address)} names a Ray cluster: add {said('executor', 'ray')}, "
            "or leave the address out"
        )
    if workers is not None and not _is_count(workers):
        raise ConfigError(
            f"{'--workers' if cli else 'workers'} must be an int of 1 or more; got {workers!r}"
        )
    if workers is not None and name == "local":
        raise ConfigError(
            f"{'--workers' if cli else 'workers'} sets how many candidates train at once, "
            f"under {said('executor', 'processes')} or {said('executor', 'ray')}; the local "
            "executor trains one at a time"
        )
    if name == "processes":
        executor: Executor = ProcessExecutor(workers)
    elif name == "ray":
        executor = RayExecutor(address, workers, gpus, flags=cli)
    else:
        executor = LocalExecutor()
    return executor
