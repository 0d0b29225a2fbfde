"""Stochastic subset evidence: M = N is the full evidence; M < N is the documented estimator."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from ella.data.subsets import balanced_subset
from ella.marglik import LaplaceEvidence, PriorStructure


def problem(n=20, d=4, k=3):
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(d, k))
    x, y = torch.randn(n, 1, 1, d, generator=g), torch.randint(k, (n,), generator=g)
    return model, TensorDataset(x, y)


def test_full_subset_is_the_full_evidence(float64):
    model, data = problem()
    prior = PriorStructure(model, "tensor")
    log_delta = torch.tensor([0.3, -1.2])
    values = []
    for n_data in (None, len(data)):
        evidence = LaplaceEvidence(model, prior)
        evidence.fit(DataLoader(data, batch_size=7), n_data=n_data)
        values.append(evidence.log_marginal_likelihood(log_delta).item())
    assert values[0] == values[1]


def test_subset_evidence_is_the_scaled_estimator_by_hand(float64):
    model, data = problem()
    n, idx = len(data), torch.tensor([1, 4, 5, 9, 12, 13, 17, 19])
    m = len(idx)
    prior = PriorStructure(model, "tensor")
    evidence = LaplaceEvidence(model, prior)
    evidence.fit(DataLoader(Subset(data, idx), batch_size=3), n_data=n)
    log_delta = torch.tensor([0.3, -1.2])
    value = evidence.log_marginal_likelihood(log_delta).item()

    # by hand: B = N/M sum_S (diag p - p p^T), A = sum_S x x^T / M, log lik scaled by N/M
    x, y = data.tensors[0][idx].flatten(1), data.tensors[1][idx]
    lin = model[1]
    with torch.no_grad():
        logits = lin(x)
        p = logits.softmax(-1)
        B = (n / m) * sum(torch.diag(q) - torch.outer(q, q) for q in p)
        A = x.T @ x / m
        log_lik = -(n / m) * nn.functional.cross_entropy(logits, y, reduction="sum")
        delta = log_delta.exp()
        lam_b, lam_a = torch.linalg.eigvalsh(B), torch.linalg.eigvalsh(A)
        log_det_post = torch.log(torch.outer(lam_b, lam_a).flatten() + delta[0]).sum()
        log_det_post += torch.log(lam_b + delta[1]).sum()
        log_det_prior = lin.weight.numel() * log_delta[0] + lin.bias.numel() * log_delta[1]
        scatter = delta[0] * lin.weight.square().sum() + delta[1] * lin.bias.square().sum()
        by_hand = log_lik - 0.5 * (log_det_post - log_det_prior + scatter)
    assert value == pytest.approx(by_hand.item(), rel=1e-10)


def test_balanced_subsets():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 3)
    idx = balanced_subset(labels, 30, torch.Generator().manual_seed(0))
    assert len(idx) == len(set(idx.tolist())) == 30
    counts = torch.bincount(labels[idx], minlength=3).tolist()
    assert counts[2] == 3 and min(counts[:2]) >= 10  # the small class whole, others fill
    again = balanced_subset(labels, 30, torch.Generator().manual_seed(0))
    assert torch.equal(idx, again)
    with pytest.raises(ValueError, match="between 1 and 83"):
        balanced_subset(labels, 84, torch.Generator())


def test_trainer_draws_a_fresh_subset_each_round(tmp_path):
    from ella.train import TrainConfig, Trainer

    cfg = TrainConfig(model="mlp", train_size=64, test_size=16, width=1, marglik_subset_size=20,
                      progress=False)  # fmt: skip
    trainer = Trainer(cfg, tmp_path)
    first = trainer.evidence_data().indices
    trainer.state.epoch += 1
    second = trainer.evidence_data().indices
    assert len(first) == len(second) == 20 and not torch.equal(first, second)
    evidence = trainer.fit_evidence()
    assert evidence.n_data == 64
    full = Trainer(TrainConfig(model="mlp", train_size=64, test_size=16, width=1,
                               marglik_subset_size=64, progress=False), tmp_path / "b")  # fmt: skip
    assert full.evidence_data() is full.data.train
    assert math.isfinite(evidence.log_marginal_likelihood(trainer.log_prior).item())


def test_trainer_controls_the_subset_curvature(tmp_path):
    from ella.choices import SubsetControl
    from ella.marglik.control import curvature_ratio, output_hessian_trace
    from ella.train import TrainConfig, Trainer

    def trainer(control, subset=20, name="a", **options):
        cfg = TrainConfig(model="mlp", train_size=64, test_size=16, width=1, progress=False,
                          marglik_subset_size=subset, subset_control=control,
                          **options)  # fmt: skip
        return Trainer(cfg, tmp_path / name)

    assert TrainConfig().subset_control is SubsetControl.TRAINING  # ella train's default
    # training: the traces of the training passes, the mean of the last two epochs'
    train = trainer("training")
    assert train.output_trace.isnan().all()
    assert train.subset_curvature_ratio(train.evidence_data()) == 1.0  # nothing recorded yet
    train.train_epoch()
    first = train.output_trace.clone()
    assert torch.isfinite(first).all() and (first >= 0).all() and (first <= 0.9).all()
    data = train.evidence_data()
    assert train.subset_curvature_ratio(data) == curvature_ratio(first, data.indices)
    train.state.epoch += 1
    train.train_epoch()  # the second epoch's traces, recorded alike, are averaged in
    assert not torch.equal(train.output_trace, first)
    # forward: the traces of every training image at the current weights
    forward = trainer("forward", name="b")
    data = forward.evidence_data()
    with torch.no_grad():
        forward.model.eval()
        direct = output_hessian_trace(forward.model(forward.data.train.tensors[0]))
    forward.model.train()
    assert forward.subset_curvature_ratio(data) == pytest.approx(
        curvature_ratio(direct, data.indices), rel=1e-12
    )
    assert forward.model.training  # left as it was
    # none, or every image in the round: no control
    assert trainer("none", name="c").subset_curvature_ratio(data) == 1.0
    assert trainer("forward", subset=64, name="d").priors.recipe.control is SubsetControl.NONE
    # an invariant model's rounds fit the invariance evidence, not the subset's GGN
    learned = trainer("training", name="e", invariance="learned", augment="none")
    assert learned.priors.recipe.control is SubsetControl.NONE


def test_a_run_records_the_control_per_round_and_resumes_it(tmp_path):
    from ella.rundir import load_checkpoint
    from ella.train import TrainConfig, Trainer

    cfg = TrainConfig(model="mlp", train_size=64, test_size=16, width=1, progress=False,
                      marglik_subset_size=20, epochs=3, n_epochs_burnin=1,
                      marglik_frequency=1)  # fmt: skip
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    rounds = [row for row in trainer.state.metrics if "log_marglik" in row]
    assert rounds and all(0 < row["curvature_ratio"] < 10 for row in rounds)
    again = Trainer(cfg, tmp_path)
    again.load()
    assert torch.equal(again.output_trace, trainer.output_trace)
    assert "output_trace" in load_checkpoint(tmp_path / "checkpoint.pt", cfg)


@pytest.mark.slow
def test_a_rounds_scaled_likelihood_and_curvature_are_the_full_ones_in_expectation(float64):
    """ella.fit's and ella train's rounds (PriorLearner.fit_round) fit the GGN on a fresh
    class-balanced subset and scale it by N / M. With equal classes every example is drawn
    with probability M / N, so the parts linear in the examples are unbiased: the mean over
    rounds of the scaled log likelihood and of the scaled output curvature (the bias block,
    sum_n diag p_n - p_n p_n^T) is the full fit's, within the rounds' standard error. (The
    log evidence itself is not: its log-determinants are concave in the curvature.)"""
    from ella import PriorLearner

    g = torch.Generator().manual_seed(0)
    n, d, k, rounds = 24, 4, 3, 120
    x = torch.randn(n, 1, 1, d, generator=g)
    y = torch.arange(n) % k  # equal classes: a balanced subset draws each example alike
    data = TensorDataset(x, y)
    model = nn.Sequential(nn.Flatten(), nn.Linear(d, k))

    def parts(evidence) -> torch.Tensor:
        la = evidence.laplace
        return torch.cat([torch.as_tensor(la.loss).reshape(1), la.H_facs.kfacs[1][0].flatten()])

    whole = PriorLearner(model, n, ggn="exact", subset_size=None)
    full = parts(whole.fit_round(data, 1))
    sub = PriorLearner(model, n, ggn="exact", subset_size=12, control="none")
    draws = torch.stack([parts(sub.fit_round(data, epoch)) for epoch in range(1, rounds + 1)])
    assert sub.evidence.n_data == n and len(sub.round_subset(data, 1)) == 12
    mean, error = draws.mean(0), draws.std(0) / rounds**0.5
    assert (error > 0).all()  # the rounds differ
    assert ((mean - full).abs() <= 4 * error + 1e-12).all(), (mean - full) / error
