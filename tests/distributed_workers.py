"""Work for the processes that ``tests/test_distributed.py`` starts with torchrun.

``python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed_workers.py
evidence OUT.json``: every process fits the Laplace evidence of a small float64 network on
its shard of the data, summed over the processes, and rank 0 also fits it in one process
on all the data; rank 0 writes both (values, gradients in the log precisions, Kronecker
factors' norms) to ``OUT.json`` for the test to compare.

``... distributed_workers.py fit OUT.json`` (under torchrun, or with plain ``python`` for
one process): :func:`ella.fit` on a small network; rank 0 writes its result.

``... distributed_workers.py ensembles DIR``: ``ella ensemble`` of each of
:data:`ENSEMBLES` into ``DIR/METHOD``, one after the other in one launch.

``... distributed_workers.py every DIR``: the three in one launch (:func:`every_job`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ella import distributed  # noqa: E402
from ella.learner import PriorLearner  # noqa: E402
from ella.marglik import LaplaceEvidence, PriorStructure  # noqa: E402
from ella.marglik.laplace_internals import kron_factors  # noqa: E402
from tests.user_models import user_model  # noqa: E402


def _data(n: int = 21) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 1, 8, 8, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=generator)
    return TensorDataset(x, y)


def _evidence(model, data, world, batch_size: int = 4) -> dict:
    """Value and gradient of the evidence fitted on this process's shard (summed over
    ``world``), at fixed log precisions."""
    prior = PriorStructure(model)
    evidence = LaplaceEvidence(model, prior, ggn="exact")
    part = world.subset(data)
    loader = distributed.ShardLoader(DataLoader(part, batch_size=batch_size), len(data))
    evidence.fit(loader, world=world)
    log_prior = torch.linspace(-1.0, 1.0, prior.n_groups, dtype=torch.float64)
    log_prior.requires_grad_()
    value = evidence.log_marginal_likelihood(log_prior)
    (grad,) = torch.autograd.grad(value, log_prior)
    factors = [float(f.norm()) for block in kron_factors(evidence.laplace) for f in block]
    return {"value": float(value), "grad": grad.tolist(), "factors": factors}


def evidence_job(out: str) -> None:
    """The evidence of every process's shard, summed, against one process's (rank 0 writes
    ``out``)."""
    world = distributed.start()
    data = _data()
    model = user_model().double()
    sharded = _evidence(model, data, world)
    # the learner: subset evidence of 9 examples (one global subset, sharded) and Adam steps
    learner = PriorLearner(model, n_data=len(data), update="adam", ggn="exact")
    subset = Subset(data, list(range(9)))
    part = world.subset(subset)
    learner.evidence_step(
        distributed.ShardLoader(DataLoader(part, batch_size=4), len(subset)), n_hypersteps=5
    )
    if world.is_main:
        single = _evidence(model, data, distributed.World())
        alone = PriorLearner(
            model, n_data=len(data), data_parallel=False, update="adam", ggn="exact"
        )
        alone.evidence_step(DataLoader(subset, batch_size=4), n_hypersteps=5)
        result = {
            "world_size": world.size,
            "sharded": sharded,
            "single": single,
            "learner_sharded": learner.log_prior.tolist(),
            "learner_single": alone.log_prior.tolist(),
        }
        Path(out).write_text(json.dumps(result))


def evidence(out: str) -> None:
    evidence_job(out)
    # every process waits for rank 0's single-process fit, then ends without tearing the
    # group down (rank 1 once aborted in the teardown while rank 0 still worked: CI,
    # 2026-11-24)
    distributed.end_process(0)


def fit_job(out: str) -> None:
    """``ella.fit`` of a small network on a shuffled loader of 22 examples in batches of 8
    (the last one 6), evidence after every epoch, a test loader; in one process or, under
    torchrun, in several (each loading its part of every batch). Rank 0 writes the result
    and the run directory ``OUT.json.run``."""
    import ella

    torch.manual_seed(0)
    data, test = _data(22), _data(9)
    model = user_model()
    result = ella.fit(
        model.double(),
        DataLoader(data, batch_size=8, shuffle=True),
        DataLoader(test, batch_size=4),
        epochs=3,
        n_epochs_burnin=1,
        marglik_frequency=1,
        n_hypersteps=3,
        ggn="exact",  # deterministic: a sampled GGN draws per process
        progress=False,
        out=f"{out}.run",
    )
    if distributed.current().is_main:
        Path(out).write_text(json.dumps(result.as_dict()))


def fit(out: str) -> None:
    fit_job(out)
    distributed.end_process(0)


#: the repulsive ensembles of ``test_torchrun_ensembles_match_one_process``: method, augmentation
ENSEMBLES = (("forde", "sampled"), ("function_rde", "orbit"))


def ensemble_options(method: str, augment: str) -> list[str]:
    """``ella ensemble``'s options of a small CNN ensemble with ``method`` and ``augment``."""
    return [
        "--train-size", "44", "--test-size", "24", "--epochs", "2", "--members", "3",
        "--batch-size", "16", "--no-progress", "--model", "cnn", "--method", method,
        "--augment", augment, "--augment-group", "C4",
    ]  # fmt: skip


def ensembles_job(out: str) -> int:
    """``ella ensemble`` of every one of :data:`ENSEMBLES` into ``OUT/METHOD``, in one
    process or, under torchrun, in several; its exit status."""
    from ella.cli import build_parser

    status = 0
    for method, augment in ENSEMBLES:
        argv = ["ensemble", *ensemble_options(method, augment), "--out", str(Path(out) / method)]
        args = build_parser().parse_args(argv)
        status = status or args.func(args)
    return status


def ensembles(out: str) -> None:
    sys.exit(distributed.end_process(ensembles_job(out)))


def every_job(out: str) -> None:
    """Under torchrun: :func:`evidence_job`, :func:`fit_job` and :func:`ensembles_job` into
    ``OUT/evidence.json``, ``OUT/fit.json`` and ``OUT/ensembles`` in one launch of one
    process group (each launch costs the suite about 15 s); with plain ``python``, the
    one-process fit and ensembles alike (the evidence compares with one process itself)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    if distributed.launched():
        evidence_job(str(Path(out) / "evidence.json"))
    fit_job(str(Path(out) / "fit.json"))
    sys.exit(distributed.end_process(ensembles_job(str(Path(out) / "ensembles"))))


if __name__ == "__main__":
    jobs = {"evidence": evidence, "fit": fit, "ensembles": ensembles, "every": every_job}
    jobs[sys.argv[1]](*sys.argv[2:])
