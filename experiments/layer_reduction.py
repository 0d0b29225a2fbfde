"""Issue 69's decisive experiment: can one trained CONV+GCONV network say which paths each
layer needs, by Bayesian model reduction (BMR) of its Laplace posterior, as the exhaustive
comparison of every per-layer architecture says it?

The network is :mod:`experiments.miniature`'s (14x14 MNIST lifted to C4, three relaxed
layers of CONV and GCONV paths, widths 1-1-4, no normalisation, max group pool, global
average, linear head), at its decisive size: 2,000 training and 500 validation images,
300 epochs of Adam at 3e-3, an evidence round (ella's KFAC, exact GGN on all images) every
10 epochs from epoch 20.

Reduction. For a group ``S`` (one path of one layer, weights and bias) with prior
``N(0, 1/delta_S)`` and Gaussian posterior ``N(theta, Sigma)``, ``Sigma = (G + D)^{-1}``,
the log evidence of the network without ``S`` against the network with it is (Friston &
Penny 2011; Markovic, Friston & Kiebel 2023)

    log BF(S) = -1/2 theta_S^T Sigma_SS^{-1} theta_S - 1/2 log det(D_S Sigma_SS),

the fit lost once the other weights compensate (through ``Sigma``'s blocks between ``S``
and the rest) plus the Occam factor gained (:func:`reduction`). Several groups at once
are one ``S``. ``G`` is one of four curvatures of the trained network, each at its own
optimal precisions (:func:`experiments.full_ggn.optimal_log_prior`):

* ``dense``: the dense GGN of all parameters (:func:`experiments.full_ggn.full_ggn`);
* ``dense_layer``: the dense GGN without its blocks between modules (each relaxed layer
  and the head keep their own block, a layer's paths their blocks between them): what
  ``layer_kron`` would be without the Kronecker factorisation, which separates the two
  differences between ``dense`` and ``layer_kron``;
* ``layer_kron``: one Kronecker factorisation of each layer's *total* map (the CONV path's
  factors: the CONV filter is the identity on the layer's lifted filter), with each path
  as a linear subspace of it (GCONV: its expanded filter, a 0/1 gather), so the blocks
  between a layer's paths are kept (:func:`layer_kron_ggn`);
* ``layer_kron_nocross``: the same without the blocks between paths (separates the two
  differences between ``layer_kron`` and ``per_tensor``);
* ``per_tensor``: ella's KFAC, one Kronecker block per tensor (today's evidence).

Each is used one-shot (every one of the 26 reduced architectures scored jointly from the
full posterior) and iteratively (remove the best-scoring group, condition the Gaussian on
it being zero, repeat while a removal raises the evidence; :func:`iterative_reduction`).

Reference: all 27 per-layer architectures (each layer keeps CONV, GCONV or both), each
trained from scratch from a random start of every path it keeps with the same budget and
scored by its dense-GGN Laplace evidence at its optimal precisions. Its winner per (data
set, seed) is the evidence's own per-layer answer. Beside it, greedy per-layer
drop-and-retrain: from scratch (read off the 27), and from the trained full network
(``--phase greedy``: the dropped path's layer keeps the function it had with the path at
zero, every candidate and the architecture it came from retrained ``--retrain-epochs``
with learned priors; a candidate whose validation accuracy falls below ``COLLAPSE`` is
excluded, as ``ella select`` excludes a collapsed one).

Measures (fixed before the runs, issue 69): each candidate's architecture against the
exhaustive winner (exact match; layers that agree), the rank correlation of its scores
with the exhaustive evidence over the 27, the per-layer contrast ``score(remove CONV) -
score(remove GCONV)`` on rotated against upright MNIST at each seed, and its cost.

Phases (``--phase``): ``networks`` (the 27 x data sets x seeds, resumable, ``--part i/n``
splits the list for ``n`` processes of one thread each), ``greedy``, ``summarise``
(``experiments/results/layer_reduction.{json,md}``). Every trained network is kept as a
checkpoint beside its row (``experiments/results/layer_reduction/``)::

    python -m experiments.layer_reduction --phase networks --part 0/2 --threads 1 &
    python -m experiments.layer_reduction --phase networks --part 1/2 --threads 1
    python -m experiments.layer_reduction --phase greedy
    python -m experiments.layer_reduction --phase summarise
    python -m experiments.layer_reduction --phase all --dry   # every phase in a minute
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from ella import PriorLearner
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.laplace_internals import hessian_scale, kron_factors
from ella.nn import RelaxedLayer
from experiments.full_ggn import FullEvidence, full_ggn, optimal_log_prior
from experiments.layer_reduction_setup import (
    ARCHITECTURES,
    BOTH,
    BUDGET,
    COLLAPSE,
    DATASETS,
    DRY,
    ESTIMATORS,
    FULL,
    LR,
    N_LAYERS,
    SEEDS,
    Architecture,
    dropped,
    key,
    short,
    tag,
    without,
)
from experiments.miniature import (
    Budget,
    Split,
    append_row,
    build,
    evaluate,
    load,
    read_rows,
    train_epoch,
)
from studies.results import EXPERIMENT_RESULTS, environment, write_between, write_results

NAME = "layer_reduction"


# ---------------------------------------------------------------------------- training
def learner(model: nn.Module, budget: Budget, n: int, seed: int) -> PriorLearner:
    return PriorLearner(
        model, n, prior_precision=budget.prior_precision, lr=budget.lr_hyp, ggn="exact",
        update="adam", subset_size=None, control="none", batch_size=250,
        n_hypersteps=budget.n_hypersteps, seed=seed,
    )  # fmt: skip


def train(
    model: nn.Module,
    priors: PriorLearner,
    split: Split,
    budget: Budget,
    epochs: int,
    seed: int,
    burnin: int | None = None,
) -> dict:
    """``epochs`` epochs of Adam at ``LR`` on the penalised loss, an evidence round every
    ``budget.frequency`` epochs from ``burnin`` (the budget's by default); returns the
    seconds per epoch and per round and the last training loss and accuracy."""
    burnin = budget.burnin if burnin is None else burnin
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    order = torch.Generator().manual_seed(seed)
    epoch_seconds, round_seconds = [], []
    train_loss = train_acc = math.nan
    for epoch in range(1, epochs + 1):
        tick = time.perf_counter()
        train_loss, train_acc = train_epoch(
            model, priors, optimizer, split, order, budget.batch_size
        )
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"training diverged at epoch {epoch}")
        epoch_seconds.append(time.perf_counter() - tick)
        if epoch >= burnin and epoch % budget.frequency == 0:
            tick = time.perf_counter()
            priors.evidence_round(split.train_set, epoch)
            round_seconds.append(time.perf_counter() - tick)
    return {
        "epoch_seconds": statistics.fmean(epoch_seconds),
        "round_seconds": statistics.fmean(round_seconds) if round_seconds else None,
        "train_loss": train_loss,
        "train_acc": train_acc,
    }


def score(model: nn.Module, priors: PriorLearner, split: Split) -> dict:
    """Validation accuracy and NLL, and the log evidence at the optimal precisions for
    these weights by the dense GGN (the reference) and by ella's KFAC."""
    val_acc, val_nll = evaluate(model, split.x_val, split.y_val)
    dense = FullEvidence.of_model(model, priors.prior, split.x, split.y)
    u, _ = optimal_log_prior(dense, priors.log_prior)
    kfac = LaplaceEvidence(model, priors.prior, ggn="exact")
    kfac.fit(DataLoader(split.train_set, batch_size=250))
    u_kfac = kfac.optimal_log_prior()
    return {
        "val_acc": val_acc,
        "val_nll": val_nll,
        "log_evidence": dense.log_marginal_likelihood(u),
        "log_prior_optimal": u.tolist(),
        "log_evidence_kfac": float(kfac.log_marginal_likelihood(u_kfac)),
        "groups": list(priors.prior.names),
    }


def save_checkpoint(path: Path, model: nn.Module, log_prior: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
        torch.save({"state": model.state_dict(), "log_prior": log_prior.detach().clone()}, f)
        temporary = f.name
    os.replace(temporary, path)


def checkpoint_path(results: Path, row_key: str) -> Path:
    return results / NAME / "checkpoints" / (row_key.replace("/", "_") + ".pt")


def restore(results: Path, row: dict, budget: Budget) -> tuple[nn.Module, torch.Tensor]:
    """The network and run precisions a row's checkpoint holds."""
    model = build(tuple(tuple(layer) for layer in row["arch"]), (), budget.widths)
    saved = torch.load(checkpoint_path(results, row["key"]), weights_only=True)
    model.load_state_dict(saved["state"])
    return model, saved["log_prior"]


def train_network(
    dataset: str, seed: int, arch: Architecture, budget: Budget, data_dir: str, results: Path
) -> dict:
    """One network of the exhaustive comparison, from a random start of every path."""
    split = load(dataset, budget, data_dir)
    torch.manual_seed(seed)
    model = build(arch, (), budget.widths)
    priors = learner(model, budget, len(split.y), seed)
    tick = time.perf_counter()
    timing = train(model, priors, split, budget, budget.epochs, seed)
    training = time.perf_counter() - tick
    row_key = key(dataset, seed, arch, budget)
    save_checkpoint(checkpoint_path(results, row_key), model, priors.log_prior)
    tick = time.perf_counter()
    scores = score(model, priors, split)
    return {
        "key": row_key, "dataset": dataset, "seed": seed, "arch": arch,
        "parameters": sum(p.numel() for p in model.parameters()),
        "log_prior": priors.log_prior.tolist(), **scores, **timing,
        "seconds": {"training": training, "scoring": time.perf_counter() - tick},
        "environment": environment("cpu"),
    }  # fmt: skip


# ---------------------------------------------------------------------------- curvatures
def group_slices(model: nn.Module) -> dict[tuple[int, str], list[int]]:
    """The flat parameter indices (in ``named_parameters`` order) of each (layer, path)
    group: its weight and bias."""
    out: dict[tuple[int, str], list[int]] = {}
    start = 0
    for name, p in model.named_parameters():
        parts = name.split(".")
        if parts[0].startswith("layer") and parts[1] == "paths":
            out.setdefault((int(parts[0][5:]) - 1, parts[2]), []).extend(
                range(start, start + p.numel())
            )
        start += p.numel()
    return out


def block_of(factors: list[torch.Tensor]) -> torch.Tensor:
    """A tensor's dense Kronecker block: ``B (x) A`` for a weight, ``B`` for a bias."""
    block = factors[0].double()
    for factor in factors[1:]:
        block = torch.kron(block, factor.double())
    return block


def per_tensor_ggn(model: nn.Module, prior: PriorStructure, split: Split) -> torch.Tensor:
    """ella's KFAC (native backend, exact GGN, every training image) as a dense (P, P)
    block-diagonal matrix, one block per parameter tensor in ``named_parameters`` order."""
    evidence = LaplaceEvidence(model, prior, ggn="exact")
    evidence.fit(DataLoader(split.train_set, batch_size=250))
    blocks = [block_of(f) for f in kron_factors(evidence.laplace)]
    return torch.block_diag(*blocks) * hessian_scale(evidence.laplace)


def lifted_gather(path: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each entry of a path's lifted filter (weight, bias) comes from in its own
    flattened weight and bias: two long tensors with the lifted shapes' numbers of entries."""
    weight, bias = path.conv.weight, path.conv.bias
    saved = weight.detach().clone(), bias.detach().clone()
    with torch.no_grad():
        weight.copy_(torch.arange(weight.numel(), dtype=weight.dtype).reshape(weight.shape))
        bias.copy_(torch.arange(bias.numel(), dtype=bias.dtype))
        w, b = path.lifted_filter()
        index = w.detach().round().long().flatten(), b.detach().round().long()
        weight.copy_(saved[0])
        bias.copy_(saved[1])
    return index


def layer_kron_ggn(model: nn.Module, per_tensor: torch.Tensor, cross: bool = True) -> torch.Tensor:
    """The Kronecker GGN of each layer's total map, with each path a subspace of it.

    A layer adds its paths' lifted filters, so its output depends on the CONV weight
    ``W_c`` and the GCONV weight ``W_g`` through ``W_c + E W_g`` (``E`` the 0/1 gather of
    :meth:`~ella.nn.GConvPath.lifted_filter`; likewise the biases). The CONV path's
    Kronecker block ``H_c`` is therefore the curvature of the total map, and the layer's
    block over both paths is ``[I E]^T H_c [I E]`` (biases alike). ``cross=False`` keeps
    only its diagonal blocks. Every other tensor keeps its ``per_tensor`` block."""
    G = per_tensor.clone()
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    starts = dict(zip(names, itertools.accumulate([0, *sizes[:-1]]), strict=True))
    spans = {n: torch.arange(starts[n], starts[n] + s) for n, s in zip(names, sizes, strict=True)}
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, RelaxedLayer)]
    for name, layer in layers:
        if set(layer.path_names) != set(BOTH):
            continue
        gather = lifted_gather(layer.paths["gconv"])
        for part, index in zip(("weight", "bias"), gather, strict=True):
            c = spans[f"{name}.paths.conv.conv.{part}"]
            g = spans[f"{name}.paths.gconv.conv.{part}"]
            H = per_tensor[c][:, c]
            E = torch.zeros(len(c), len(g), dtype=H.dtype)
            E[torch.arange(len(c)), index] = 1.0
            G[g[:, None], g] = E.T @ H @ E
            if cross:
                G[c[:, None], g] = H @ E
                G[g[:, None], c] = E.T @ H
    return G


def within_modules(model: nn.Module, G: torch.Tensor) -> torch.Tensor:
    """``G`` (P, P) without its blocks between parameters of different top-level modules
    (``layer1``, ``layer2``, ..., ``head``)."""
    modules = [name.split(".")[0] for name, _ in model.named_parameters()]
    number = {m: i for i, m in enumerate(dict.fromkeys(modules))}
    owner = torch.cat([
        torch.full((p.numel(),), number[m])
        for m, p in zip(modules, model.parameters(), strict=True)
    ])  # fmt: skip
    return G * (owner[:, None] == owner[None, :])


def curvature(
    model: nn.Module, prior: PriorStructure, split: Split, estimator: str
) -> torch.Tensor:
    if estimator in ("dense", "dense_layer"):
        G = full_ggn(model, split.x, split.y)[0]
        return G if estimator == "dense" else within_modules(model, G)
    per_tensor = per_tensor_ggn(model, prior, split)
    if estimator == "per_tensor":
        return per_tensor
    return layer_kron_ggn(model, per_tensor, cross=estimator == "layer_kron")


# ---------------------------------------------------------------------------- reduction
def reduction(precision: torch.Tensor, theta: torch.Tensor, delta: torch.Tensor,
              S: Sequence[int]) -> float:  # fmt: skip
    """``log BF`` of setting the entries ``S`` to zero: the posterior ``N(theta,
    precision^{-1})``, the prior precisions ``delta`` (P,), all float64.

    .. math::

        \\log BF = -\\tfrac12 \\theta_S^T \\Sigma_{SS}^{-1} \\theta_S
                   - \\tfrac12 \\log\\det(D_S \\Sigma_{SS}), \\qquad
                   \\Sigma = \\text{precision}^{-1}.
    """
    S = torch.as_tensor(list(S))
    sigma = torch.cholesky_inverse(torch.linalg.cholesky(precision))[S[:, None], S]
    L = torch.linalg.cholesky(sigma)
    fit = torch.cholesky_solve(theta[S, None], L).squeeze(1) @ theta[S]
    occam = delta[S].log().sum() + 2 * L.diagonal().log().sum()
    return float(-0.5 * fit - 0.5 * occam)


def condition(precision: torch.Tensor, theta: torch.Tensor, S: Sequence[int]):
    """The Gaussian of the other entries given ``theta_S = 0``: precision ``H_RR``, mean
    ``theta_R + H_RR^{-1} H_RS theta_S``; returns (precision, mean, kept indices)."""
    keep = torch.tensor([i for i in range(len(theta)) if i not in set(S)])
    S = torch.as_tensor(list(S))
    H_RR = precision[keep[:, None], keep]
    mean = theta[keep] + torch.linalg.solve(H_RR, precision[keep[:, None], S] @ theta[S])
    return H_RR, mean, keep


def iterative_reduction(
    precision: torch.Tensor, theta: torch.Tensor, delta: torch.Tensor,
    groups: dict[tuple[int, str], list[int]],
) -> tuple[Architecture, list[dict]]:  # fmt: skip
    """Remove the group with the largest ``log BF`` while it is positive (a layer keeps at
    least one path), conditioning the Gaussian each time; the architecture and steps."""
    arch, steps = FULL, []
    position = torch.arange(len(theta))  # where each original entry sits now
    alive = torch.ones(len(theta), dtype=torch.bool)
    while True:
        options = [(i, p) for i, layer in enumerate(arch) if len(layer) == 2 for p in layer]
        scored = {}
        for i, p in options:
            S = position[torch.tensor(groups[(i, p)])].tolist()
            scored[(i, p)] = reduction(precision, theta, delta, S)
        if not scored:
            break
        best = max(scored, key=scored.get)
        if scored[best] <= 0:
            break
        S = position[torch.tensor(groups[best])].tolist()
        precision, theta, keep = condition(precision, theta, S)
        delta = delta[keep]
        alive[torch.tensor(groups[best])] = False
        position = torch.full_like(position, -1)
        position[alive] = torch.arange(int(alive.sum()))
        arch = without(arch, *best)
        steps.append({"removed": f"layer{best[0] + 1}.{best[1]}", "log_bf": scored[best]})
    return arch, steps


def candidates(row: dict, budget: Budget, data_dir: str, results: Path) -> dict:
    """The reductions (a)-(c) of a trained full network: for each curvature, the joint
    one-shot ``log BF`` of the 26 reduced architectures, the single-group scores, the
    iterative reduction's architecture, and the seconds each took."""
    split = load(row["dataset"], budget, data_dir)
    model, log_prior = restore(results, row, budget)
    prior = PriorStructure(model)
    groups = group_slices(model)
    theta = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    sizes = torch.tensor(prior.numels)
    index = prior.index.repeat_interleave(sizes)
    with torch.no_grad():
        logits = model.eval()(split.x).double()
    log_likelihood = -float(F.cross_entropy(logits, split.y, reduction="sum"))
    out = {}
    for estimator in ESTIMATORS:
        tick = time.perf_counter()
        G = curvature(model, prior, split, estimator)
        evidence = FullEvidence(G, theta, index, prior.n_groups, log_likelihood)
        u, _ = optimal_log_prior(evidence, log_prior)
        delta = u.exp()[index]
        precision = G + torch.diag(delta)
        joint = {
            tag(arch): reduction(
                precision, theta, delta, [i for g in dropped(arch) for i in groups[g]]
            )
            for arch in ARCHITECTURES[1:]
        }  # fmt: skip
        single = {
            f"layer{i + 1}.{p}": joint[tag(without(FULL, i, p))]
            for i in range(N_LAYERS) for p in BOTH
        }  # fmt: skip
        reduced, steps = iterative_reduction(precision, theta, delta, groups)
        out[estimator] = {
            "log_evidence_full": evidence.log_marginal_likelihood(u),
            "log_bf": {tag(FULL): 0.0, **joint},
            "single": single,
            "one_shot": tag(max(ARCHITECTURES, key=lambda a: 0.0 if a == FULL else joint[tag(a)])),
            "iterative": tag(reduced),
            "iterative_steps": steps,
            "seconds": time.perf_counter() - tick,
        }
    return out


# ---------------------------------------------------------------------------- greedy retrain
def dropped_network(
    model: nn.Module, log_prior: torch.Tensor, arch: Architecture, layer: int, path: str,
    budget: Budget,
) -> tuple[nn.Module, Architecture, dict[str, float]]:  # fmt: skip
    """The network without ``path`` in ``layer``, computing what ``model`` computes with
    that path at zero: the kept path's weights scaled by ``1/sqrt(2)`` (a single path is
    not divided by ``sqrt(2)``), its log precision raised by ``log 2`` to match; every
    other tensor and precision as they were."""
    new_arch = without(arch, layer, path)
    reduced = build(new_arch, (), budget.widths)
    old_prior = dict(zip(PriorStructure(model).names, log_prior.tolist(), strict=True))
    state = model.state_dict()
    prefix = f"layer{layer + 1}.paths."
    new_state = {}
    for name, value in reduced.state_dict().items():
        value = state[name].clone()
        if name.startswith(prefix) and value.is_floating_point():
            value = value / math.sqrt(2)
        new_state[name] = value
    reduced.load_state_dict(new_state)
    kept = new_arch[layer][0]
    new_prior = {g: old_prior[g] for g in PriorStructure(reduced).names}
    new_prior[f"layer{layer + 1}.{kept}"] += math.log(2)
    return reduced, new_arch, new_prior


def retrain(model: nn.Module, log_prior: dict[str, float], split: Split, budget: Budget,
            epochs: int, seed: int) -> dict:  # fmt: skip
    priors = learner(model, budget, len(split.y), seed)
    with torch.no_grad():
        priors.log_prior.copy_(torch.tensor([log_prior[g] for g in priors.prior.names]))
    train(model, priors, split, budget, epochs, seed, burnin=budget.frequency)
    return {**score(model, priors, split), "log_prior_run": priors.log_prior.tolist()}


def greedy_retrain(row: dict, budget: Budget, data_dir: str, results: Path, epochs: int,
                   log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """(d) from the trained weights: each round retrains the current network and every
    network with one path of one two-path layer dropped (:func:`dropped_network`), all for
    ``epochs``, and moves to the best non-collapsed candidate while its dense evidence is
    above the retrained current network's."""
    split = load(row["dataset"], budget, data_dir)
    model, log_prior = restore(results, row, budget)
    arch = FULL
    current_prior = dict(zip(PriorStructure(model).names, log_prior.tolist(), strict=True))
    rounds, tick = [], time.perf_counter()
    while any(len(layer) == 2 for layer in arch):
        torch.manual_seed(row["seed"])
        stay = build(arch, (), budget.widths)
        stay.load_state_dict(model.state_dict())
        tried = {tag(arch): retrain(stay, current_prior, split, budget, epochs, row["seed"])}
        nets = {}
        for i, layer in enumerate(arch):
            for p in layer if len(layer) == 2 else ():
                torch.manual_seed(row["seed"])
                net, new_arch, new_prior = dropped_network(model, log_prior, arch, i, p, budget)
                tried[tag(new_arch)] = retrain(net, new_prior, split, budget, epochs, row["seed"])
                nets[tag(new_arch)] = (net, new_arch)
        for t, s in tried.items():
            s["collapsed"] = s["val_acc"] < COLLAPSE
            log(f"    {t}: log evidence {s['log_evidence']:.1f}, val {s['val_acc']:.3f}"
                f"{' (collapsed)' if s['collapsed'] else ''}")  # fmt: skip
        alive = {t: s for t, s in tried.items() if t in nets and not s["collapsed"]}
        rounds.append({"from": tag(arch), "tried": tried})
        if not alive:
            break
        best = max(alive, key=lambda t: alive[t]["log_evidence"])
        if alive[best]["log_evidence"] <= tried[tag(arch)]["log_evidence"]:
            break
        model, arch = nets[best]
        groups = PriorStructure(model).names
        log_prior = torch.tensor(tried[best]["log_prior_run"])
        current_prior = dict(zip(groups, log_prior.tolist(), strict=True))
    return {
        "key": key(row["dataset"], row["seed"], FULL, budget, what=f"greedy{epochs}"),
        "dataset": row["dataset"], "seed": row["seed"], "selected": tag(arch),
        "rounds": rounds, "seconds": time.perf_counter() - tick, "epochs": epochs,
    }  # fmt: skip


# ---------------------------------------------------------------------------- phases
def network_specs(seeds: Sequence[int]) -> list[tuple[str, int, Architecture]]:
    """The full networks first (the reductions start from them), then seed by seed and
    data set by data set."""
    fulls = [(d, s, FULL) for s in seeds for d in DATASETS]
    return fulls + [(d, s, a) for s in seeds for d in DATASETS for a in ARCHITECTURES[1:]]


def results_file(results: Path, what: str) -> Path:
    return results / NAME / f"{what}.jsonl"


def all_rows(results: Path) -> dict[str, dict]:
    rows = {}
    for path in sorted((results / NAME).glob("*.jsonl")):
        rows.update({r["key"]: r for r in read_rows(path)})
    return rows


def phase_networks(args, budget: Budget) -> None:
    index, parts = (int(v) for v in args.part.split("/"))
    specs = network_specs(args.seeds)[index::parts]
    done = all_rows(args.results_dir)
    todo = [s for s in specs if key(*s, budget) not in done]
    print(f"== networks, part {index}/{parts}: {len(specs)}, {len(specs) - len(todo)} done")
    out = results_file(args.results_dir, f"networks.part{index}")
    times: list[float] = []
    for i, (dataset, seed, arch) in enumerate(todo, 1):
        eta = (
            f", about {statistics.fmean(times) * (len(todo) - i + 1) / 60:.0f} min left"
            if times
            else ""
        )
        print(f"  [{i}/{len(todo)}] {dataset} seed {seed} {short(arch)}{eta}", flush=True)
        tick = time.perf_counter()
        row = train_network(dataset, seed, arch, budget, args.data_dir, args.results_dir)
        append_row(out, row)
        times.append(time.perf_counter() - tick)
        print(f"    val {row['val_acc']:.3f}/{row['val_nll']:.3f}, log evidence "
              f"{row['log_evidence']:.1f} (KFAC {row['log_evidence_kfac']:.1f}), "
              f"{times[-1]:.0f} s", flush=True)  # fmt: skip


def phase_candidates(args, budget: Budget) -> None:
    done = all_rows(args.results_dir)
    out = results_file(args.results_dir, "candidates")
    for dataset, seed in itertools.product(DATASETS, args.seeds):
        full = done.get(key(dataset, seed, FULL, budget))
        k = key(dataset, seed, FULL, budget, what="reduce")
        if full is None or k in done:
            continue
        print(f"== reductions of {dataset} seed {seed}", flush=True)
        row = {"key": k, "dataset": dataset, "seed": seed,
               **candidates(full, budget, args.data_dir, args.results_dir)}  # fmt: skip
        append_row(out, row)
        for e in ESTIMATORS:
            print(f"  {e}: one-shot {row[e]['one_shot']}, iterative {row[e]['iterative']}")


def phase_greedy(args, budget: Budget) -> None:
    done = all_rows(args.results_dir)
    out = results_file(args.results_dir, "greedy")
    for seed, dataset in itertools.product(args.seeds, DATASETS):
        full = done.get(key(dataset, seed, FULL, budget))
        k = key(dataset, seed, FULL, budget, what=f"greedy{args.retrain_epochs}")
        if full is None or k in done:
            continue
        print(f"== greedy drop-and-retrain of {dataset} seed {seed}", flush=True)
        row = greedy_retrain(full, budget, args.data_dir, args.results_dir, args.retrain_epochs)
        append_row(out, row)
        print(f"  selected {row['selected']} in {row['seconds']:.0f} s", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = ("networks", "candidates", "greedy", "summarise", "all")
    parser.add_argument("--phase", required=True, choices=names)
    parser.add_argument("--data-dir", default=os.environ.get("ELLA_DATA", "../shared/data"))
    parser.add_argument("--results-dir", type=Path, default=EXPERIMENT_RESULTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--part", default="0/1", help="i/n: this process's share of networks")
    parser.add_argument("--retrain-epochs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dry", action="store_true", help="every phase on 64 images")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    budget = DRY if args.dry else BUDGET
    if args.dry:
        args.retrain_epochs = 2
    phases = {"networks": phase_networks, "candidates": phase_candidates,
              "greedy": phase_greedy, "summarise": phase_summarise}  # fmt: skip
    for name in phases if args.phase == "all" else (args.phase,):
        phases[name](args, budget)


def phase_summarise(args, budget: Budget) -> None:
    from experiments.layer_reduction_summary import BEGIN, END, GUIDE, reliability_table, summarise

    payload, markdown = summarise(all_rows(args.results_dir), budget, args)
    write_results(NAME, payload, markdown, args.results_dir)
    print(markdown)
    if not args.dry and args.results_dir == EXPERIMENT_RESULTS:
        changed = write_between(GUIDE, BEGIN, END, reliability_table(payload))
        print(f"{'wrote' if changed else 'unchanged:'} {GUIDE}")


__all__ = ["main", "reduction", "condition", "iterative_reduction", "layer_kron_ggn"]

if __name__ == "__main__":
    main()
