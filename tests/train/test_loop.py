import json
import math

import pytest
import torch

from ella.errors import CheckpointError
from ella.train import Trainer, TrainingDivergedError, cosine_lr
from ella.train.runs import load_run
from tests.runs import tiny_config


class InterruptError(Exception):
    pass


def test_cosine_schedule():
    assert cosine_lr(0, 100, 0.1, 1e-6) == pytest.approx(0.1)
    assert cosine_lr(50, 100, 0.1, 0.0) == pytest.approx(0.05)
    assert cosine_lr(100, 100, 0.1, 1e-6) == pytest.approx(1e-6)


def test_evidence_schedule(tmp_path):
    trainer = Trainer(tiny_config(epochs=12, n_epochs_burnin=4, marglik_frequency=3), tmp_path)
    due = []
    for epoch in range(1, 13):
        trainer.state.epoch = epoch
        due.append(trainer.evidence_due())
    assert [e for e, d in zip(range(1, 13), due, strict=True) if d] == [6, 9, 12]
    trainer.config.learn_priors = False
    assert not trainer.evidence_due()


def test_map_only_never_fits_the_evidence(tmp_path, capsys):
    from ella.marglik import class_frequency_model

    trainer = Trainer(tiny_config(learn_priors=False, epochs=2), tmp_path)
    results = trainer.run()
    assert results["log_marglik"] == []
    # MAP by intent: no warning that the evidence learned nothing
    assert "no evidence round" not in capsys.readouterr().err + results["table"]
    assert results["reported_state"] == "final"
    assert all(v == pytest.approx(0.01) for v in results["prior_precision"].values())
    assert math.isfinite(results["log_marglik_reported_state"])
    null = class_frequency_model(trainer.data.train.tensors[1], 10)["log_evidence"]
    assert results["class_frequency_log_evidence"] == pytest.approx(null)  # of the 48 images


def test_a_run_whose_epochs_end_before_the_first_round_says_so_before_and_after(
    tmp_path, monkeypatch, capsys
):
    said = []  # stderr as each epoch begins
    epoch = Trainer.train_epoch

    def train_epoch(self):
        said.append(capsys.readouterr().err)
        return epoch(self)

    monkeypatch.setattr(Trainer, "train_epoch", train_epoch)
    results = Trainer(tiny_config(epochs=1, n_epochs_burnin=2), tmp_path).run()
    assert results["log_marglik_epochs"] == [] and len(said) == 1
    words = (
        "warning: no evidence round: --epochs 1 ends before the first round, after epoch 2 "
        "(--n-epochs-burnin 2, --marglik-frequency 1), so the evidence learns nothing"
    )
    assert said[0].count(words) == 1  # before the first epoch
    assert "give --epochs 2 or more, or --n-epochs-burnin 1 (a round after epoch 1)" in said[0]
    assert all(v == pytest.approx(0.01) for v in results["prior_precision"].values())
    # the table ella train prints, and ella report again, ends with it
    assert results["table"].splitlines()[-1].startswith(words)
    assert "no evidence round" not in capsys.readouterr().err  # said once


@pytest.mark.slow
def test_resume_after_interruption_equals_uninterrupted_run(tmp_path):
    full = Trainer(tiny_config(), tmp_path / "full")
    full_results = full.run()

    def stop_after_two(trainer):
        if trainer.state.epoch == 2:
            raise InterruptError

    with pytest.raises(InterruptError):
        Trainer(tiny_config(), tmp_path / "cut", on_epoch_end=stop_after_two).run()
    resumed = Trainer(tiny_config(), tmp_path / "cut")
    resumed_results = resumed.run(resume=True)

    for (name, a), b in zip(
        full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert torch.equal(full.log_prior, resumed.log_prior)
    assert full_results["log_marglik"] == resumed_results["log_marglik"]
    assert full_results["test_accuracy"] == resumed_results["test_accuracy"]
    metrics = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["epoch"] for m in metrics] == [1, 2, 3]


def test_learned_run_writes_the_contract(tmp_path):
    results = Trainer(tiny_config(epochs=2), tmp_path).run()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert 0 <= saved["test_accuracy"] <= 1
    assert len(saved["log_marglik"]) == 2
    assert saved["prior_precision"].keys() >= {"layer1.fc", "layer1.conv", "layer8.gconv"}
    assert saved["prior_precision"] != {k: 1.0 for k in saved["prior_precision"]}
    layers = saved["effective_parameters"]
    assert [r["layer"] for r in layers] == [f"layer{i}" for i in range(1, 9)]
    for row in layers:
        assert sum(row[p] for p in ("fc", "conv", "gconv")) == pytest.approx(100)
        for p in ("fc", "conv", "gconv"):
            assert 0 <= row["effective"][p] <= row["parameters"][p]
        # the paper's measure (per parameter of each path) sums to 100 as well
        assert sum(row["relative"].values()) == pytest.approx(100)
    assert "relative effective parameters (the paper's Table 3 measure" in results["table"]
    assert (tmp_path / "effective_parameters.png").stat().st_size > 1000
    assert (tmp_path / "checkpoint.pt").is_file()
    assert results["table"].startswith("layer")
    # per round: how far the Adam steps left the priors from the round's optimum
    rounds = [
        row for row in map(json.loads, (tmp_path / "metrics.jsonl").open()) if "log_marglik" in row
    ]
    assert len(rounds) == 2 and all(row["prior_gap"] > 0 for row in rounds)
    assert "training_collapse" in saved  # None unless the training accuracy fell by 20 points
    convergence = saved["prior_convergence"]
    assert convergence["rounds"] == 2 and convergence["last_change"] > 0
    assert "priors: " in results["table"] and "after 2 evidence rounds" in results["table"]
    # per round: the mean shares; the last round's are the final report's (same weights)
    assert all(sum(row["shares"].values()) == pytest.approx(100) for row in rounds)
    history = saved["shares_history"]
    assert [h["epoch"] for h in history] == [1, 2]
    final = {p: sum(row[p] for row in layers) / len(layers) for p in ("fc", "conv", "gconv")}
    assert {p: history[-1][p] for p in final} == pytest.approx(final, rel=1e-6)
    assert "shares by evidence round (FC/CONV/GCONV %): epoch 1 " in results["table"]


def test_nan_stops_with_a_clear_message_and_keeps_the_checkpoint(tmp_path):
    def poison(trainer):
        with torch.no_grad():
            next(trainer.model.parameters()).fill_(float("nan"))

    trainer = Trainer(tiny_config(learn_priors=False), tmp_path, on_epoch_end=poison)
    with pytest.raises(TrainingDivergedError, match="became nan at epoch 2.*last good checkpoint"):
        trainer.run()
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["epoch"] == 1


def test_bad_configuration(tmp_path):
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        Trainer(tiny_config(epochs=0), tmp_path)
    with pytest.raises(ValueError, match="unknown dataset 'cifar100'"):
        Trainer(tiny_config(dataset="cifar100"), tmp_path)
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'; choose from adam, sgd"):
        Trainer(tiny_config(optimizer="rmsprop"), tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        Trainer(tiny_config(), tmp_path / "empty").run(resume=True)
    with pytest.raises(ValueError, match="prior_step=0.5, prior_update='adam': a step"):
        Trainer(tiny_config(prior_step=0.5, prior_update="adam"), tmp_path)
    with pytest.raises(ValueError, match="prior_step must be greater than 0"):
        Trainer(tiny_config(prior_step=0.0, prior_update="optimum"), tmp_path)
    with pytest.raises(ValueError, match="--fc-rank 2 .* use --fc-mode factorized"):
        Trainer(tiny_config(fc_rank=2, fc_mode="dense"), tmp_path)
    with pytest.raises(ValueError, match="fc_rank must be at least 1"):
        Trainer(tiny_config(fc_rank=0), tmp_path)
    with pytest.raises(ValueError, match="--zero-init conv fc with --paths fc conv: it starts"):
        Trainer(tiny_config(paths=("fc", "conv"), zero_init=("conv", "fc")), tmp_path)
    with pytest.raises(ValueError, match="--zero-init must not repeat a path, got fc fc"):
        Trainer(tiny_config(zero_init=("fc", "fc")), tmp_path)
    with pytest.raises(ValueError, match="unknown pool 'median'; choose from max, mean, none"):
        Trainer(tiny_config(pool="median"), tmp_path)


def test_pool_none_builds_a_head_that_sees_every_group_copy(tmp_path):
    trainer = Trainer(tiny_config(pool="none"), tmp_path)
    c_last = trainer.net.specs[-1].out_channels
    assert trainer.net.pool.mode == "none" and trainer.net.head[0].in_features == 4 * c_last


def test_validation_split_holds_out_the_last_training_images(tmp_path):
    trainer = Trainer(tiny_config(train_size=48, validation_size=16, epochs=1), tmp_path)
    full = Trainer(tiny_config(train_size=48, epochs=1), tmp_path / "full")
    x_all, y_all = full.data.train.tensors
    x_train, _ = trainer.data.train.tensors
    x_val, y_val = trainer.validation.tensors
    assert trainer.n_train == 32 and len(x_val) == 16
    assert torch.equal(x_train, x_all[:32]) and torch.equal(x_val, x_all[32:])
    assert torch.equal(y_val, y_all[32:])
    results = trainer.run()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0 <= row["validation_accuracy"] <= 1 and row["validation_nll"] > 0
    assert results["validation_size"] == 16 and results["train_size"] == 32
    assert 0 <= results["validation_accuracy"] <= 1
    assert "validation_accuracy" not in full.run()
    with pytest.raises(ValueError, match="validation-size 48 leaves 0 training images"):
        Trainer(tiny_config(train_size=48, validation_size=48), tmp_path / "bad")


def test_head_init_standardises_the_mixer_head_on_training_images(tmp_path):
    from ella.train.config import HEAD_INIT_IMAGES

    data_init = Trainer(tiny_config(), tmp_path / "data")
    plain = Trainer(tiny_config(head_init="default"), tmp_path / "plain")
    # the same random initialisation, then the data-dependent rescaling of the head
    plain.net.standardise_head(plain.data.train.tensors[0][:HEAD_INIT_IMAGES])
    for a, b in zip(data_init.net.parameters(), plain.net.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown head-init 'zero'; choose from data, default"):
        tiny_config(head_init="zero")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_learned_run_on_cuda_resumes_on_the_cpu(tmp_path):
    """The same code on a GPU: two epochs with evidence rounds on CUDA, then the run
    resumed on the CPU for its third (the device may change on resume)."""

    def stop_after_two(trainer):
        if trainer.state.epoch == 2:
            raise InterruptError

    with pytest.raises(InterruptError):
        Trainer(tiny_config(device="cuda"), tmp_path, on_epoch_end=stop_after_two).run()
    assert (tmp_path / "checkpoint.pt").is_file()
    resumed = Trainer(tiny_config(device="cpu"), tmp_path)
    results = resumed.run(resume=True)
    assert 0 <= results["test_accuracy"] <= 1 and len(results["log_marglik"]) == 3
    assert all(math.isfinite(v) for v in results["log_marglik"])
    assert torch.isfinite(resumed.log_prior).all()


@pytest.mark.parametrize("state", ["best_evidence", "final"])
def test_the_reported_state_is_the_one_asked_for(tmp_path, state):
    results = Trainer(tiny_config(epochs=3, report_state=state), tmp_path).run()
    values, epochs = results["log_marglik"], results["log_marglik_epochs"]
    assert results["reported_state"] == state
    if state == "final":
        assert results["reported_epoch"] == 3
        assert results["test_accuracy"] == results["final_test_accuracy"]
    else:
        assert results["reported_epoch"] == epochs[values.index(max(values))]
    run = load_run(tmp_path)
    assert run.state == state
    reloaded = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert (reloaded["state"].get("best") is None) == (state == "final")


def test_the_epoch_bar_shows_the_data_fit_apart_from_the_prior_term(tmp_path, capsys):
    """``train_loss`` = the data's NLL + 1/2 sum delta theta^2 / N, which grows as the learned
    precisions do; the bar shows ``train_nll`` (and the accuracy), so it never reads as
    divergence, and laplace-torch's own "[Computing Hessian]" bar is never drawn."""
    trainer = Trainer(tiny_config(epochs=2, progress=True), tmp_path)
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    for row in rows:
        prior = row["train_loss"] - row["train_nll"]
        assert 0 < prior < row["train_loss"]  # a positive prior term, apart from the NLL
    shown = trainer.postfix(rows[-1])
    assert shown["nll"] == f"{rows[-1]['train_nll']:.3f}" and "loss" not in shown
    assert shown["acc"] == f"{rows[-1]['train_accuracy']:.3f}"
    assert "Computing Hessian" not in capsys.readouterr().err


def test_a_run_is_finished_only_once_its_figures_are_written(tmp_path, monkeypatch):
    """results.json is written last: a figure that cannot be written leaves the run
    unfinished (resumable), never counted as finished without it."""
    import ella.train.loop
    from ella.errors import FileWriteError

    def no_space(results, path):
        raise FileWriteError(f"could not write {path}: the disk is full")

    monkeypatch.setattr(ella.train.loop, "save_figure", no_space)
    config = tiny_config(epochs=1)
    with pytest.raises(FileWriteError, match="effective_parameters.png"):
        Trainer(config, tmp_path / "run").run()
    assert not (tmp_path / "run" / "results.json").exists()
    monkeypatch.undo()
    Trainer(config, tmp_path / "run").run(resume=True)
    assert {"results.json", "effective_parameters.png"} <= {
        p.name for p in (tmp_path / "run").iterdir()
    }
