"""Dropping one path of a trained mixer: what the Laplace evidence predicts, and what happens.

The evidence ranks single-path mixers that were each trained on their own (recipe.md,
"The evidence ranks the single-path mixers ..."), but a mixture's per-path priors never
move to the corner it prefers. This asks the mixture's own Laplace posterior instead,
layer by layer: how much evidence would the model gain by dropping one path (its
weights at the prior mean, zero), everything else as trained?

For nested models with independent priors, the Savage-Dickey ratio gives that Bayes
factor from the larger model's posterior alone (Dickey, Annals of Mathematical Statistics
1971; Verdinelli & Wasserman, JASA 1995): ``log p(D | drop) - log p(D | keep)
= log q(theta_p = mu_p | D) - log p(theta_p = mu_p)``. Under the Kronecker-factored
Laplace posterior (block-diagonal over tensors; precision ``h G_t + delta_t I`` per
tensor, ``d_t = theta_t - mu_t``) it is, summed over the path's tensors,

    occam   = 1/2 sum_i log(1 + h lambda_i / delta_t)   (the Occam factor dropping saves)
    scatter = 1/2 delta_t ||d_t||^2                       (the prior's scatter dropping saves)
    fit     = -1/2 h d_t^T G_t d_t - delta_t ||d_t||^2    (the change of the log likelihood)
    log BF  = occam + scatter + fit                       (> 0: the evidence drops the path)

``fit`` is the change of the training log likelihood that the Laplace approximation
predicts at a MAP, where the likelihood's gradient balances the prior's pull (the first-order
``-delta ||d||^2``) and the GGN gives the curvature. The table gives next to it that change
as measured, the log likelihood of the same images with the path's weights set to the prior
mean minus that of the trained model, and the log Bayes factor with the measured change in
place of the predicted one (the Laplace evidence of the model without the path, at the
trained weights of the rest, minus the mixture's). Where they disagree, the local Laplace
view cannot judge a whole path.

With ``--retrain-epochs E`` it also drops each path from every relaxed layer at once and
trains the rest on for ``E`` epochs (the run's recipe, its last prior precisions, the
dropped weights held at zero), trains the whole mixture on the same way as the control,
and compares their Laplace evidence: each kept group's precision at its optimum
(:func:`ella.marglik.kept_log_evidence`), the dropped tensors left out; ``ella select
RUN --drop-only`` does the same for a user's run.

    python -m experiments.path_drop runs/mnist runs/rotated_mnist --data-dir ../shared/data
    python -m experiments.path_drop RUN --data-dir ../shared/data --retrain-epochs 5
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm

from ella.choices import GGN, HessianStructure
from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence, PriorStructure, tensor_terms
from ella.marglik.laplace_internals import hessian_scale
from ella.nn import PATH_NAMES
from ella.selection import load_learned_run, relaxed_paths, train_on_without

TERMS = ("occam", "scatter", "fit", "log_bayes_factor")


def drop_terms(
    evidence: LaplaceEvidence, log_prior_precision: torch.Tensor, groups: Sequence[str]
) -> dict[str, dict[str, float]]:
    """The Savage-Dickey log Bayes factor of setting each group's weights to the prior mean.

    Args:
        evidence: a :class:`~ella.marglik.LaplaceEvidence` fitted with the Kronecker
            Hessian (block-diagonal over parameter tensors).
        log_prior_precision: the log prior precision per group of ``evidence.prior``.
        groups: the group each parameter tensor is dropped with, in the order of
            ``evidence.prior.param_names`` (e.g. a relaxed layer's path).

    Returns:
        ``{group: {"occam", "scatter", "fit", "log_bayes_factor"}}`` in nats, in the order
        the groups first appear; see the module docstring for the terms.
    """
    if evidence.structure is not HessianStructure.KRON:
        raise ConfigError("the path-drop Bayes factor needs a Kronecker-factored evidence (kron)")
    if len(groups) != evidence.prior.n_tensors:
        raise ValueError(f"{len(groups)} groups for {evidence.prior.n_tensors} parameter tensors")
    la = evidence.laplace
    h = hessian_scale(la)
    with torch.no_grad():
        d = (la.mean - la.prior_mean).detach()
        # laplace-torch's own Kron product, so its layout of the factors is the one used
        g_d = la.H_facs.bmm(d)
        sizes = [int(n) for n in evidence.prior.numels]
        parts = zip(
            groups,
            torch.split(d, sizes),
            torch.split(g_d, sizes),
            tensor_terms(evidence, log_prior_precision),
            strict=True,
        )
        out: dict[str, dict[str, float]] = {}
        for group, d_t, g_d_t, terms in parts:
            row = out.setdefault(group, dict.fromkeys(TERMS, 0.0))
            row["occam"] += terms["occam"]
            row["scatter"] += terms["scatter"]
            # -delta ||d||^2 is twice the scatter term
            row["fit"] -= 0.5 * h * float(d_t @ g_d_t) + 2 * terms["scatter"]
    for row in out.values():
        row["log_bayes_factor"] = row["occam"] + row["scatter"] + row["fit"]
    return out


@torch.no_grad()
def log_likelihood(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 500) -> float:
    """``sum_n log p(y_n | x_n)`` of a classifier, in evaluation mode."""
    model.eval()
    return -sum(
        float(F.cross_entropy(model(xb), yb, reduction="sum"))
        for xb, yb in zip(x.split(batch), y.split(batch), strict=True)
    )


@torch.no_grad()
def dropped_fit_change(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    params: Sequence[nn.Parameter],
    prior_means: Sequence[torch.Tensor | float] | None = None,
) -> float:
    """The change of the log likelihood of ``(x, y)`` when ``params`` are set to their prior
    means (zero by default); the weights are restored afterwards, also on an error."""
    before = log_likelihood(model, x, y)
    saved = [p.detach().clone() for p in params]
    means = prior_means if prior_means is not None else [0.0] * len(params)
    try:
        for p, mu in zip(params, means, strict=True):
            p.copy_(torch.as_tensor(mu, dtype=p.dtype).expand_as(p))
        return log_likelihood(model, x, y) - before
    finally:
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)


def analyse_run(run_dir: str, data_dir: str | None, images: int | None, ggn: str) -> list[dict]:
    """One row per relaxed layer and path of a learned run: :func:`drop_terms` at the run's
    reported weights and last priors, the evidence fitted on its first ``images`` training
    images (all by default; fewer are scaled to all, as subset evidence is) with the ``ggn``
    GGN, and the fit change measured on the same images (scaled the same way)."""
    from ella.learner import PriorLearner

    run, log_prior = load_learned_run(run_dir, data_dir)
    x, y = run.data.train.tensors
    n = len(x) if images is None else min(images, len(x))
    config = dataclasses.replace(run.config, ggn=GGN.parse(ggn, "--ggn"))
    learner = PriorLearner.from_config(run.net, len(x), config)
    with torch.no_grad():
        learner.log_prior.copy_(log_prior)
    torch.manual_seed(0)  # the labels of an MC GGN
    evidence = learner.fit(DataLoader(Subset(run.data.train, range(n)), batch_size=500))
    groups = PriorStructure(evidence.view.network, "layer_path").tensor_groups
    terms = drop_terms(evidence, learner.log_prior, groups)
    own = PriorStructure(run.net, "layer_path")  # the network's own tensors, to zero
    names, params = own.param_names, dict(run.net.named_parameters())
    paths = [g for g in terms if g.rpartition(".")[2] in PATH_NAMES]
    rows = []
    for group in tqdm(paths, desc="paths dropped", leave=False):
        members = [params[n] for n, g in zip(names, own.tensor_groups, strict=True) if g == group]
        # on n of the N images; scaled to N as the evidence's terms are
        change = dropped_fit_change(run.model, x[:n], y[:n], members) * len(x) / n
        layer, _, path = group.rpartition(".")
        row = {"layer": layer, "path": path, **terms[group], "measured_fit": change}
        row["log_bayes_factor_measured"] = row["occam"] + row["scatter"] + change
        rows.append(row)
    return rows


def format_retrained(rows: list[dict]) -> str:
    """A markdown table of :func:`ella.selection.train_on_without`'s rows, the control first."""
    lines = [
        "| dropped from every layer | test accuracy | log evidence | against the mixture |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        gain = r["log_evidence"] - rows[0]["log_evidence"]
        lines.append(
            f"| {r['dropped']} | {100 * r['test_accuracy']:.2f} | {r['log_evidence']:.0f} "
            f"| {gain:+.0f} |"
        )
    return "\n".join(lines)


def format_rows(rows: list[dict]) -> str:
    """A markdown table of :func:`analyse_run`'s rows."""
    lines = [
        "| layer | path | log BF (drop) | Occam | scatter | fit, predicted | fit, measured "
        "| log BF, measured fit |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    keys = ("log_bayes_factor", "occam", "scatter", "fit", "measured_fit")
    for r in rows:
        values = " | ".join(f"{r[k]:.0f}" for k in (*keys, "log_bayes_factor_measured"))
        lines.append(f"| {r['layer']} | {r['path']} | {values} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, list[dict]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories of ella train (learned priors)")
    parser.add_argument("--data-dir", default=None, help="where the runs' data files are")
    parser.add_argument("--images", type=int, default=None, help="training images (default all)")
    parser.add_argument("--ggn", default="exact", choices=[g.value for g in GGN])
    parser.add_argument(
        "--retrain-epochs",
        type=int,
        default=0,
        help="also drop each path from every layer, train on this many epochs and compare",
    )
    parser.add_argument(
        "--retrain-only", action="store_true", help="skip the table of single-path drops"
    )
    args = parser.parse_args(argv)
    if args.retrain_epochs < 0:
        parser.error("--retrain-epochs must be >= 0")
    if args.retrain_only and not args.retrain_epochs:
        parser.error("--retrain-only needs --retrain-epochs")
    out = {}
    for run_dir in args.runs:
        if not args.retrain_only:
            rows = analyse_run(run_dir, args.data_dir, args.images, args.ggn)
            print(f"\n{run_dir}\n\n{format_rows(rows)}")
            out[run_dir] = rows
        if args.retrain_epochs:
            paths = relaxed_paths(run_dir)
            retrained = [
                train_on_without(run_dir, drop, args.retrain_epochs, args.data_dir, progress=True)
                for drop in [None, *paths]
                if len(paths) > 1 or drop is None
            ]
            table = format_retrained(retrained)
            print(f"\n{run_dir}, trained on {args.retrain_epochs} epochs:\n\n{table}")
            out[f"{run_dir} retrained"] = retrained
    return out


if __name__ == "__main__":
    main()
