"""``ella train`` and :func:`ella.fit` are one loop: the same mixer, data, options and
seed give the same weights, precisions, evidence and test accuracy through either
(``one_loop``: :func:`tests.one_loop.train_both_ways`)."""

from __future__ import annotations

import torch


def test_ella_train_and_ella_fit_give_the_same_run(one_loop):
    trainer, results, fitted = one_loop.trainer, one_loop.results, one_loop.fitted
    assert fitted.log_marglik_epochs == results["log_marglik_epochs"] == [1, 2, 3]
    assert fitted.log_marglik == results["log_marglik"]
    assert fitted.prior_precision == results["prior_precision"]
    for (name, a), b in zip(trainer.net.named_parameters(), fitted.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    rows = trainer.state.metrics  # bit for bit: one loop, not two that agree
    assert all("curvature_ratio" in row for row in rows if "log_marglik" in row)
    for key in ("train_nll", "train_accuracy", "test_accuracy", "test_nll", "curvature_ratio"):
        assert [r.get(key) for r in fitted.metrics] == [r.get(key) for r in rows], key
