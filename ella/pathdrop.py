"""Which paths does a trained mixer need? Drop each one, train on, compare the evidence.

The per-path prior variances that ``ella train`` learns follow the weights training grew;
they never switch a path off on their own (benchmarks/results/recipe.md, "The CONV+GCONV
mixer on 5000 images"). This module asks the evidence a discrete question instead. It is
model selection by the marginal likelihood (MacKay, Neural Computation 1992), with one
candidate model per path of the run:

1. the control: the run's network, trained on for ``epochs`` more epochs;
2. for each path: the same network with that path's weights at zero in every relaxed
   layer (held there), trained on the same way.

Each is trained with the run's own recipe and last prior precisions. Each gets the Laplace
log evidence of the tensors it keeps (:func:`kept_log_evidence`: exact GGN on all training
images, every kept group's precision at its optimum). A path whose removal raises the
evidence above the control's is one the data does not ask for. On 5000 images
(benchmarks/results/recipe.md, "Dropping a path"), dropping CONV from a CONV+GCONV mixer
and training 20 epochs raised the evidence by about 9000 nats on rotated MNIST and
lowered it by about the same on MNIST, at two seeds. With the FC path as well, the
answer was not settled: seed 0 kept all three paths on both sets, seed 1 dropped CONV on
both.

``ella report RUN --drop-paths`` runs it and writes ``path_drops.json`` into the run
directory after every candidate, so an interrupted call resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from ella.choices import GGN, PriorMean
from ella.errors import ConfigError, RunDirectoryError
from ella.io import load_torch, save_json
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.nn import PATH_NAMES
from ella.rundir import CHECKPOINT, CONFIG, PATH_DROPS, read_json

__all__ = [
    "check_droppable",
    "drop_each_path",
    "format_path_drops",
    "kept_log_evidence",
    "tensor_terms",
    "train_on_without",
]

#: the candidate that drops nothing
CONTROL = "none"


def tensor_terms(
    evidence: LaplaceEvidence, log_prior_precision: torch.Tensor
) -> list[dict[str, float]]:
    """Per parameter tensor ``t`` of a Kronecker-factored evidence, the two Occam terms:
    ``"occam"``, ``1/2 sum_i log(1 + h lambda_i / delta_t)`` over the eigenvalues of its GGN
    block, and ``"scatter"``, ``1/2 delta_t ||theta_t - mu_t||^2``."""
    la = evidence.laplace
    delta = evidence.prior.expand(log_prior_precision.detach().exp()).tolist()
    sizes = [int(n) for n in evidence.prior.numels]
    with torch.no_grad():
        d = (la.mean - la.prior_mean).detach()
        parts = zip(torch.split(d, sizes), evidence.block_eigenvalues(), delta, strict=True)
        return [
            {
                "occam": 0.5 * float(torch.log1p(lam / delta_t).sum()),
                "scatter": 0.5 * delta_t * float(d_t @ d_t),
            }
            for d_t, lam, delta_t in parts
        ]


def kept_log_evidence(evidence: LaplaceEvidence, dropped: Sequence[bool]) -> float:
    """The Laplace log evidence of the network without the ``dropped`` tensors.

    One flag per parameter tensor of ``evidence.prior``. The evidence is taken at the
    fitted weights, with each group's prior precision at its optimum
    (:meth:`~ella.marglik.LaplaceEvidence.optimal_log_prior`; the groups separate):
    ``log p(D | theta) - sum_(t kept) (occam_t + scatter_t)``, the terms of
    :func:`tensor_terms`.
    """
    log_prior = evidence.optimal_log_prior()
    total = float(evidence.terms(log_prior)["log_likelihood"])
    for drop, terms in zip(dropped, tensor_terms(evidence, log_prior), strict=True):
        if not drop:
            total -= terms["occam"] + terms["scatter"]
    return total


def _refuse_unless_learned(run_dir: str | Path, learn_priors: bool, prior_mean: str) -> None:
    """Refuse a MAP run and a run whose prior is not centred at zero."""
    if not learn_priors:
        raise RunDirectoryError(f"{run_dir} is a MAP run: give a run with learned priors")
    if prior_mean != PriorMean.ZERO:
        raise ConfigError(
            "dropping a path sets its weights to zero, and this run's prior is centred at "
            "its initial weights (--prior-mean init)"
        )


def load_learned_run(run_dir: str | Path, data_dir: str | Path | None = None):
    """A run with learned priors centred at zero (:func:`ella.train.runs.load_run`) and its
    last log prior precisions; other runs are refused with the reason."""
    from ella.train.runs import load_run

    run = load_run(run_dir, data_dir)
    _refuse_unless_learned(run_dir, run.config.learn_priors, run.config.prior_mean)
    return run, load_torch(Path(run_dir) / CHECKPOINT)["log_prior"]


def relaxed_paths(run_dir: str | Path) -> list[str]:
    """The paths of a run's relaxed layers, in ``PATH_NAMES`` order."""
    paths = read_json(Path(run_dir) / CONFIG, "run's configuration").get("paths", [])
    return [p for p in PATH_NAMES if p in paths]


def check_droppable(run_dir: str | Path, epochs: int) -> list[str]:
    """Refuse, before any work, what :func:`drop_each_path` cannot do; return the paths.

    Raises:
        ConfigError: ``epochs`` below 1, a mixer of one path, or a prior centred at the
            initial weights.
        RunDirectoryError: a MAP run, or no config.json.
    """
    if epochs < 1:
        raise ConfigError(f"--drop-epochs must be at least 1, got {epochs}")
    config = read_json(Path(run_dir) / CONFIG, "run's configuration")
    learn, mean = config.get("learn_priors", False), config.get("prior_mean", PriorMean.ZERO)
    _refuse_unless_learned(run_dir, learn, mean)
    paths = relaxed_paths(run_dir)
    if len(paths) < 2:
        raise ConfigError(
            f"dropping a path needs a mixer of two or more paths; this run has {paths or 'none'}"
        )
    return paths


def train_on_without(
    run_dir: str | Path,
    drop: str | None,
    epochs: int,
    data_dir: str | Path | None = None,
    progress: bool = False,
) -> dict:
    """Train a learned run on for ``epochs`` with path ``drop`` (or nothing) at zero in every
    relaxed layer.

    Returns:
        ``{"dropped": drop or "none", "test_accuracy", "log_evidence"}``, the evidence
        being :func:`kept_log_evidence` (exact GGN, all training images).
    """
    from ella.learner import PriorLearner
    from ella.train.loop import Trainer, evaluate

    run, log_prior = load_learned_run(run_dir, data_dir)
    config = dataclasses.replace(run.config, epochs=epochs, progress=False, data_dir=data_dir)
    with tempfile.TemporaryDirectory() as scratch:  # the trainer writes nothing there
        trainer = Trainer(config, scratch)
    trainer.net.load_state_dict(run.net.state_dict())
    with torch.no_grad():
        trainer.log_prior.copy_(log_prior)
    groups = PriorStructure(trainer.net, "layer_path").tensor_groups
    params = [p for p in trainer.net.parameters() if p.requires_grad]
    dropped = [drop is not None and g.rpartition(".")[2] == drop for g in groups]
    for p, flag in zip(params, dropped, strict=True):
        if flag:
            with torch.no_grad():
                p.zero_()
            p.register_hook(torch.zeros_like)  # Adam and SGD then leave it at zero
    label = CONTROL if drop is None else f"without {drop}"
    for epoch in tqdm(range(1, epochs + 1), desc=label, leave=False, disable=not progress):
        trainer.state.epoch = epoch
        trainer.train_epoch()
    if any(bool(p.any()) for p, flag in zip(params, dropped, strict=True) if flag):
        raise RuntimeError(f"the dropped {drop} weights left zero while training on")
    exact = dataclasses.replace(config, ggn=GGN.EXACT)
    learner = PriorLearner.from_config(trainer.net, len(trainer.data.train), exact)
    evidence = learner.fit(DataLoader(trainer.data.train, batch_size=config.marglik_batch_size))
    return {
        "dropped": drop or CONTROL,
        "test_accuracy": evaluate(trainer.model, trainer.data.test)["accuracy"],
        "log_evidence": kept_log_evidence(evidence, dropped),
    }


def drop_each_path(
    run_dir: str | Path,
    epochs: int = 20,
    data_dir: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """:func:`train_on_without` for the control and for each path of a learned mixer.

    Writes ``path_drops.json`` into ``run_dir`` after every candidate and reuses the
    candidates of an earlier call with the same ``epochs`` found there.

    Returns:
        ``{"epochs": epochs, "rows": [...]}``, the control first.

    Raises:
        ConfigError, RunDirectoryError: as :func:`check_droppable`.
    """
    paths = check_droppable(run_dir, epochs)
    path = Path(run_dir) / PATH_DROPS
    done: dict[str, dict] = {}
    if path.is_file():
        earlier = read_json(path, "earlier path drops")
        if earlier.get("epochs") == epochs:
            done = {row["dropped"]: row for row in earlier.get("rows", [])}
    rows = []
    for drop in [None, *paths]:
        key = drop or CONTROL
        row = done.get(key) or train_on_without(run_dir, drop, epochs, data_dir, progress)
        rows.append(row)
        save_json({"epochs": epochs, "rows": rows}, path)
    return {"epochs": epochs, "rows": rows}


def format_path_drops(result: dict) -> str:
    """A table of :func:`drop_each_path`'s result and the paths the evidence would drop."""
    rows = result["rows"]
    control = rows[0]["log_evidence"]
    lines = [
        f"path drops: each path at zero in every relaxed layer, the rest trained on for "
        f"{result['epochs']} epochs (the control: nothing dropped)",
        f"{'dropped':<10}{'test acc %':>11}{'log evidence':>15}{'vs control':>12}",
    ]
    for r in rows:
        lines.append(
            f"{r['dropped']:<10}{100 * r['test_accuracy']:>11.2f}{r['log_evidence']:>15.1f}"
            f"{r['log_evidence'] - control:>+12.1f}"
        )
    gains = [r for r in rows[1:] if r["log_evidence"] > control]
    if gains:
        best = max(gains, key=lambda r: r["log_evidence"])
        names = ", ".join(r["dropped"].upper() for r in gains)
        lines.append(
            f"the evidence would drop: {names} (most: {best['dropped'].upper()}, "
            f"{best['log_evidence'] - control:+.0f} nats)"
        )
    else:
        lines.append("the evidence keeps every path")
    return "\n".join(lines)
