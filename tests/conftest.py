import os
import shutil
from pathlib import Path

import pytest
import torch

from tests import cases


def pytest_configure(config):
    """A worker of ``pytest -n N`` (pytest-xdist; ``./run.sh test`` starts one per core)
    runs on one thread, and so do the processes its tests start: N workers of one thread
    share N cores, where N of the cores' count each would wait on one another's threads.
    ``ELLA_THREADS`` is ella's own choice (:func:`ella.runtime.system.chosen_threads`), the
    one the stored references were made with; ``MKL_NUM_THREADS`` sets torch's count in a
    process that does not choose one (a notebook's kernel). ``OMP_NUM_THREADS`` stays unset:
    it would also route large eigenvalue problems to scipy
    (:func:`ella.marglik.linalg.scipy_blas_threads_match`), away from the references."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["ELLA_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def float64():
    """Run a test with float64 as the default dtype (for comparisons at 1e-6 and tighter)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture(scope="session")
def session_folder(tmp_path_factory) -> Path:
    """A folder every worker of this test session shares (pytest-xdist gives each worker a
    base folder of its own, side by side): where :func:`tests.session_once.computed_once`
    keeps what one worker computes for all."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def finished_run(session_folder) -> Path:
    """A finished tiny run of ``ella train`` (``tests.cli_runs.TINY``), made once per
    session (:func:`tests.session_once.made_once`); tests that change it take
    :func:`run`, a private copy."""
    from ella.cli import main
    from tests.cli_runs import TINY
    from tests.session_once import made_once

    def make(where: Path) -> None:
        assert main(["train", "--out", str(where / "run"), *TINY]) == 0

    return made_once(session_folder, "runs", make) / "run"


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    """A private copy of :func:`finished_run`."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


@pytest.fixture(scope="session")
def one_loop(tmp_path_factory):
    """A tiny configuration trained by ``ella train`` and by ``ella.fit``, once per session
    (:func:`tests.one_loop.train_both_ways`)."""
    from tests.one_loop import train_both_ways

    return train_both_ways(tmp_path_factory.mktemp("one_loop") / "run")


# ---------------------------------------------------------------- the case matrix
@pytest.fixture(params=list(cases.PATH_CASES))
def path_case(request) -> str:
    """Each path of :data:`tests.cases.PATH_CASES` (every kind of the registry, then the
    variants), by id; :func:`tests.cases.make_path` builds it."""
    return request.param


@pytest.fixture(params=list(cases.EVIDENCE))
def make_evidence(request):
    """Each fitted evidence of :data:`tests.cases.EVIDENCE`, as the function that fits it
    (called inside the test, after its other fixtures, ``float64`` among them)."""
    return cases.EVIDENCE[request.param]
