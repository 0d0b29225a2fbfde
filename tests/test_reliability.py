"""Security and reliability: no code runs from data files, no silent failure, no lost run,
every bad option refused before work starts (issue 11).

Each command-line case runs ``ella`` in-process on tiny data and checks the exit
status, that the message names the problem, and that no file of an earlier run
changed.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.cli import main
from ella.data.datasets import ImageData
from ella.ensembles import EnsembleConfig
from ella.errors import (
    CheckpointError,
    ConfigError,
    EvidenceError,
    InputDataError,
    TrainingDivergedError,
)
from ella.marglik import LaplaceEvidence, PriorStructure, UnsupportedModuleError
from ella.options import Config
from ella.rundir import new_run_directory, remove_orphan_temporaries
from ella.train import TrainConfig, Trainer
from tests.cli_runs import TINY, refused, snapshot

TINY_ENSEMBLE = [
    "--train-size", "32", "--test-size", "16", "--epochs", "1", "--members", "2",
    "--width", "1", "--corruption-severities", "--no-progress",
]  # fmt: skip


class Payload:
    """Unpickling this creates ``marker``: proof that code ran from a data file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def finished_ensemble(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "ensemble"
    assert main(["ensemble", "--out", str(out), *TINY_ENSEMBLE]) == 0
    return out


# ---------------------------------------------------------------- 1-2 security
def test_a_pickle_in_a_checkpoint_does_not_execute(run, tmp_path, capsys):
    marker = tmp_path / "pwned"
    torch.save({"config": {}, "model": Payload(marker)}, run / "checkpoint.pt")
    refused(capsys, ["train", "--out", str(run), "--resume"], 1, "cannot read checkpoint")
    refused(capsys, ["report", str(run), "--symmetry", "C4"], 1, "cannot read checkpoint")
    assert not marker.exists()


def test_a_pickle_in_a_cifar_batch_does_not_execute(tmp_path, capsys):
    marker = tmp_path / "pwned"
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps(Payload(marker)))
    argv = ["train", "--dataset", "cifar10", "--data-dir", str(tmp_path), "--out"]
    refused(capsys, [*argv, str(tmp_path / "r"), *TINY], 1, "data_batch_1 is truncated or corrupt")
    assert not marker.exists()


def test_a_cifar_batch_with_a_known_checksum_is_still_parsed_without_code(tmp_path):
    from ella.data.datasets import _unpickle_batch
    from ella.data.files import DataFileError

    marker = tmp_path / "pwned"
    with pytest.raises(DataFileError, match="refusing to load"):
        _unpickle_batch(pickle.dumps({b"data": Payload(marker)}), "data_batch_1")
    assert not marker.exists()


def test_every_real_checkpoint_loads_without_pickle(finished_run, finished_ensemble, tmp_path):
    for run_dir in (finished_run, finished_ensemble):
        ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
        assert ckpt["config"] == json.loads((run_dir / "config.json").read_text())


# ---------------------------------------------------------------- 3-5 silent failures
def test_a_diverged_run_exits_non_zero_and_keeps_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "r"
    # lr 1e30: the weights stay finite, but the test NLL of epoch 1 is not: never saved
    argv = ["train", "--out", str(out), *TINY, "--lr", "1e30", "--batch-size", "64"]
    refused(capsys, [*argv, "--n-epochs-burnin", "2"], 1, "test_nll nan", "smaller --lr",
            "there is no checkpoint yet")  # fmt: skip
    # with an evidence round after epoch 1, the round finds the outputs not finite
    err = refused(capsys, [*argv, "--overwrite"], 1, "smaller --lr", "there is no checkpoint yet")
    assert err.count("smaller --lr") == 1
    assert not (out / "checkpoint.pt").exists() and not (out / "results.json").exists()


def test_the_last_good_checkpoint_has_finite_weights_and_metrics(tmp_path):
    def blow_up(trainer):  # epoch 2 diverges: epoch 1's checkpoint is the last good one
        if trainer.state.epoch == 1:
            with torch.no_grad():
                for p in trainer.model.parameters():
                    p.mul_(1e30)

    config = TrainConfig(model="mlp", train_size=64, test_size=32, width=1, epochs=2,
                         n_epochs_burnin=2, batch_size=64, progress=False)  # fmt: skip
    out = tmp_path / "r"
    with pytest.raises(TrainingDivergedError, match="last good checkpoint is kept"):
        Trainer(config, out, on_epoch_end=blow_up).run()
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["state"]["epoch"] == 1
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and all(math.isfinite(rows[0][k]) for k in ("test_nll", "train_loss"))
    assert not (out / "results.json").exists()


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--lr-min", "nan", "lr_min must be a finite number"),
        ("--lr-min", "-0.01", "lr_min must be at least 0"),
        ("--lr-min", "0.5", "lr_min (0.5) must not exceed lr"),
        ("--lr", "inf", "lr must be a finite number"),
        ("--lr", "0", "lr must be greater than 0"),
        ("--momentum", "1.5", "momentum must be at most 1"),
        ("--prior-precision", "-1", "prior_precision must be greater than 0"),
        ("--epochs", "0", "epochs must be at least 1"),
        ("--n-hypersteps", "-1", "n_hypersteps must be at least 0"),
        ("--train-size", "0", "train_size must be at least 1"),
        ("--device", "foo", "unknown device 'foo'"),
    ],
)
def test_numeric_and_device_options_are_checked_before_any_work(
    tmp_path, capsys, option, value, message
):
    out = tmp_path / "r"
    refused(capsys, ["train", "--out", str(out), *TINY, option, value], 1, message)
    assert not out.exists()


def test_ensemble_options_are_checked_before_any_work(tmp_path, capsys):
    out = tmp_path / "e"
    argv = ["ensemble", "--out", str(out), *TINY_ENSEMBLE]
    refused(capsys, [*argv, "--lr-min", "-1"], 1, "lr_min must be at least 0")
    refused(capsys, [*argv, "--device", "foo"], 1, "unknown device 'foo'")
    refused(capsys, [*argv, "--alpha", "2"], 1, "alpha must be at most 1")
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("command", ["train", "ensemble"])
def test_cuda_without_a_gpu_is_one_clear_line(tmp_path, capsys, command):
    out = tmp_path / "r"
    tiny = TINY if command == "train" else TINY_ENSEMBLE
    refused(capsys, [command, "--out", str(out), *tiny, "--device", "cuda"], 1, "no CUDA GPU")
    assert not out.exists()


def test_nan_pixels_are_named_by_the_evidence_fit():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    x, y = torch.randn(8, 1, 2, 2), torch.randint(3, (8,))
    x[3, 0, 1, 1] = float("nan")
    evidence = LaplaceEvidence(model, PriorStructure(model))
    with pytest.raises(InputDataError, match="the input data contains NaN"):
        evidence.fit(DataLoader(TensorDataset(x, y), batch_size=4))


def test_laplace_torch_calling_exit_is_an_evidence_error(monkeypatch):
    """laplace-torch 0.3 calls exit() where it gives up (laplace.utils.utils.symeig); a fit
    whose dependency tries to end the process raises EvidenceError instead."""
    from laplace.baselaplace import ParametricLaplace

    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    x, y = torch.randn(8, 1, 2, 2), torch.randint(3, (8,))
    evidence = LaplaceEvidence(model, PriorStructure(model))
    monkeypatch.setattr(ParametricLaplace, "fit", lambda *args, **kwargs: exit())
    with pytest.raises(EvidenceError, match="tried to end the process"):
        evidence.fit(DataLoader(TensorDataset(x, y), batch_size=4))


def test_an_eigendecomposition_that_fails_is_an_evidence_error(monkeypatch):
    """ella decomposes the Kronecker factors itself; where LAPACK fails for good (laplace-torch
    would exit()), the fit raises EvidenceError naming the fix."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    x, y = torch.randn(8, 1, 2, 2), torch.randint(3, (8,))
    evidence = LaplaceEvidence(model, PriorStructure(model))

    def fails(*args, **kwargs):
        raise RuntimeError("eigh did not converge")

    monkeypatch.setattr(torch.linalg, "eigh", fails)
    monkeypatch.setattr(torch.linalg, "eigvalsh", fails)
    with pytest.raises(EvidenceError, match="could not be eigendecomposed.*smaller --lr"):
        evidence.fit(DataLoader(TensorDataset(x, y), batch_size=4))


def test_a_command_never_ends_silently_when_a_dependency_exits(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("ella.train.loop.Trainer.run", lambda self, **kw: exit())
    out = str(tmp_path / "run")
    refused(capsys, ["train", "--out", out, *TINY], 1, "a dependency tried to end the process")


def test_non_finite_factors_are_refused_before_any_decomposition(monkeypatch):
    from laplace.utils.matrix import Kron

    def decompose(self, *args, **kwargs):
        raise AssertionError("non-finite factors reached the decomposition")

    monkeypatch.setattr(Kron, "decompose", decompose)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    with torch.no_grad():
        model[1].weight.fill_(1e30)  # finite weights whose curvature overflows
    x, y = torch.randn(8, 1, 2, 2) * 1e20, torch.randint(3, (8,))
    for backend in ("native", "asdl", "curvlinops"):
        evidence = LaplaceEvidence(model, PriorStructure(model), backend=backend)
        with pytest.raises(EvidenceError, match="not finite"):
            evidence.fit(DataLoader(TensorDataset(x, y), batch_size=4))


def test_laplace_torch_cannot_end_the_process():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    with torch.no_grad():
        model[1].weight.fill_(1e30)  # finite weights whose curvature overflows
    x, y = torch.randn(8, 1, 2, 2) * 1e20, torch.randint(3, (8,))
    evidence = LaplaceEvidence(model, PriorStructure(model))
    from ella.errors import EvidenceError

    with pytest.raises(EvidenceError):
        evidence.fit(DataLoader(TensorDataset(x, y), batch_size=4))


# ---------------------------------------------------------------- 6-9 lost or overwritten runs
def test_overwrite_never_removes_a_users_files_beside_a_config(run, capsys):
    (run / "my_notes.txt").write_text("mine")  # a user's file: this is no longer only a run
    before = snapshot(run)
    refused(capsys, ["train", "--out", str(run), *TINY, "--overwrite"], 1, "my_notes.txt")
    assert snapshot(run) == before


def test_a_run_killed_while_writing_its_config_can_be_overwritten(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / ".config.json.x1y2.tmp").write_text("{")  # the only trace of the killed start
    assert main(["train", "--out", str(d), *TINY, "--overwrite"]) == 0
    capsys.readouterr()
    assert not (d / ".config.json.x1y2.tmp").exists() and (d / "results.json").is_file()


def test_a_non_empty_directory_that_is_not_a_run_is_never_written(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "results.json").write_text("x\n")
    before = snapshot(d)
    for extra in ([], ["--overwrite"]):
        refused(capsys, ["train", "--out", str(d), *TINY, *extra], 1, "holds no ella run")
    assert snapshot(d) == before


def test_an_existing_run_is_refused_without_resume_or_overwrite(run, capsys):
    before = snapshot(run)
    refused(capsys, ["train", "--out", str(run), *TINY], 1, "already holds a run")
    assert snapshot(run) == before


def test_default_run_directories_are_unique(tmp_path, monkeypatch):
    monkeypatch.setattr("time.strftime", lambda fmt: fmt.replace("%Y%m%d-%H%M%S", "same"))
    first, second = (new_run_directory("run", tmp_path) for _ in range(2))
    assert first != second and first.is_dir() and second.is_dir()
    assert {first.name, second.name} == {"run-same", "run-same-2"}


def test_a_failed_overwrite_leaves_no_stale_results(run, capsys):
    assert (run / "results.json").is_file()
    refused(capsys, ["train", "--out", str(run), *TINY, "--overwrite", "--lr", "1e30"], 1)
    assert not (run / "results.json").exists()
    assert json.loads((run / "config.json").read_text())["lr"] == 1e30


def test_orphan_temporaries_are_removed_on_the_next_start(run, capsys):
    orphan = run / ".checkpoint.pt.k2j3h4.tmp"
    orphan.write_bytes(b"\0" * 1000)
    user_file = run / ".notes.tmp"  # not a name a run writes: kept
    user_file.write_text("mine")
    (run / "results.json").unlink()  # killed after its last checkpoint: a resume finishes it
    assert main(["train", "--out", str(run), "--resume"]) == 0
    capsys.readouterr()
    assert not orphan.exists() and user_file.exists()
    assert remove_orphan_temporaries(run) == []


# ---------------------------------------------------------------- 10-12 options
@pytest.mark.parametrize(
    "option, value",
    [("--backend", "foo"), ("--hessian", "foo"), ("--ggn", "foo"), ("--group", "C5"),
     ("--optimizer", "rmsprop"), ("--paths", "mlp")],
)  # fmt: skip
def test_choice_options_are_refused_by_the_parser_with_their_choices(
    tmp_path, capsys, option, value
):
    out = tmp_path / "r"
    refused(capsys, ["train", "--out", str(out), *TINY, option, value], 2, "invalid choice")
    assert not out.exists()


@pytest.mark.parametrize(
    "config_cls, field, value",
    [(TrainConfig, "backend", "foo"), (TrainConfig, "hessian", "foo"), (TrainConfig, "ggn", "x"),
     (TrainConfig, "group", "C5"), (EnsembleConfig, "method", "svgd"),
     (EnsembleConfig, "lengthscales", "x")],
)  # fmt: skip
def test_choice_fields_are_checked_when_the_config_is_built(config_cls, field, value):
    with pytest.raises(ConfigError, match=f"unknown .*{value!r}; choose from"):
        config_cls(**{field: value})


def test_every_choice_option_lists_its_choices_in_help():
    from ella.cli import build_parser
    from ella.options import choice_type

    commands = build_parser()._subparsers._group_actions[0].choices
    for command, cls in (("train", TrainConfig), ("ensemble", EnsembleConfig)):
        text = commands[command].format_help().replace("\n", " ")
        for name, hint in cls.hints().items():
            choice = choice_type(hint)
            if choice is not None:
                assert "{" + ",".join(choice.values()) + "}" in text.replace(" ", ""), name


def test_a_full_hessian_that_cannot_fit_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "r"
    argv = [
        "train",
        "--out",
        str(out),
        "--hessian",
        "full",
        "--backend",
        "asdl",
        "--epochs",
        "1",
        "--no-progress",
        "--marglik-subset-size",  # the full Hessian has no subset estimator: all 3000 images
        "3000",
    ]
    refused(capsys, argv, 1, "full Laplace Hessian", "--hessian kron")
    assert not (out / "checkpoint.pt").exists()


def test_interpolated_groups_are_refused_for_layers():
    from ella.models import mixer

    with pytest.raises(ValueError, match="C8 rotates by interpolation"):
        mixer(1, 10, 28, group="C8")
    mixer(1, 10, 8, group="c4", width=1)  # exact groups, any case


def test_resume_refuses_a_changed_option_by_name(run, capsys):
    before = snapshot(run)
    refused(capsys, ["train", "--out", str(run), "--resume", "--ggn", "exact"], 1, "--ggn")
    # a default value given explicitly is a change too, never silently replaced
    refused(capsys, ["train", "--out", str(run), "--resume", "--seed", "0", "--lr", "3e-3",
                     "--batch-size", "128"], 1, "--batch-size")  # fmt: skip
    assert snapshot(run) == before


def test_resume_may_change_where_the_data_is_and_how_it_is_shown(run, tmp_path, capsys):
    argv = ["train", "--out", str(run), "--resume", "--progress", "--data-dir", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()


def test_a_relative_data_dir_is_stored_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TrainConfig(data_dir="data").data_dir == str(tmp_path / "data")
    assert EnsembleConfig(data_dir="~/d").data_dir == str(Path.home() / "d")


# ---------------------------------------------------------------- 13 clear errors
def test_out_naming_a_file_or_an_unwritable_place(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("mine")
    refused(capsys, ["train", "--out", str(f), *TINY], 1, "is a file")
    refused(capsys, ["train", "--out", str(f / "sub"), *TINY], 1, "cannot write")
    assert f.read_text() == "mine"


@pytest.mark.parametrize("content", ["", '{"test_accuracy": 0.5, "effe'])
def test_report_on_an_empty_or_truncated_results_file(run, capsys, content):
    (run / "results.json").write_text(content)
    refused(capsys, ["report", str(run)], 1, "results.json is empty, truncated or not JSON")


def test_report_on_an_ensemble_run(finished_ensemble, capsys):
    assert main(["report", str(finished_ensemble)]) == 0
    assert "de ensemble of 2 members" in capsys.readouterr().out
    refused(capsys, ["report", str(finished_ensemble), "--symmetry", "C4"], 1, "ensembles")
    refused(capsys, ["report", str(finished_ensemble), "--path-outputs"], 1, "ensembles")
    refused(capsys, ["select", str(finished_ensemble)], 1, "is an ensemble run; ella select")


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04truncated"])
def test_a_corrupt_checkpoint_is_one_clear_line(run, capsys, content):
    (run / "checkpoint.pt").write_bytes(content)
    refused(capsys, ["train", "--out", str(run), "--resume"], 1, "cannot read checkpoint")
    refused(capsys, ["report", str(run), "--symmetry", "C4"], 1, "cannot read checkpoint")


def test_a_corrupt_config_names_the_file(run, capsys):
    (run / "config.json").write_text('{"epochs": ')
    err = refused(capsys, ["train", "--out", str(run), "--resume"], 1, "config.json")
    assert "truncated" in err
    (run / "config.json").write_text('{"epochs": -3}')
    refused(capsys, ["train", "--out", str(run), "--resume"], 1, "config.json", "epochs")


def image_data(labels: torch.Tensor, x: torch.Tensor | None = None) -> ImageData:
    x = torch.randn(len(labels), 1, 8, 8) if x is None else x
    data = TensorDataset(x, labels)
    return ImageData("mine", data, data, num_classes=10)


@pytest.mark.parametrize(
    "labels, message",
    [(torch.tensor([0, 3, 10, 2]), r"labels must be in \[0, 9\]"),
     (torch.tensor([0, -1, 1, 2]), r"labels must be in \[0, 9\]"),
     (torch.tensor([0.0, 1.5, 2.0, 3.0]), "labels must be integers")],
)  # fmt: skip
def test_bad_labels_from_the_python_api_are_refused_before_training(labels, message):
    with pytest.raises(InputDataError, match=message):
        image_data(labels)


def test_nan_images_from_the_python_api_are_named():
    x = torch.randn(4, 1, 8, 8)
    x[0, 0, 0, 0] = float("nan")
    with pytest.raises(InputDataError, match="the input data contains NaN"):
        image_data(torch.tensor([0, 1, 2, 3]), x)


def test_an_empty_batch_into_a_mixer():
    from ella.models import mixer

    with pytest.raises(ValueError, match="the batch is empty"):
        mixer(1, 10, 8, width=1)(torch.zeros(0, 1, 8, 8))


def test_a_linear_with_only_its_weight_frozen():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    model[1].weight.requires_grad_(False)
    with pytest.raises(UnsupportedModuleError, match=r"1 \(weight frozen\)"):
        LaplaceEvidence(model, PriorStructure(model))


# ---------------------------------------------------------------- the base pieces
def test_config_round_trip_is_plain_json():
    for cls in (TrainConfig, EnsembleConfig):
        d = cls().to_dict()
        assert json.loads(json.dumps(d)) == d
        assert cls.from_dict(d) == cls()
        buffer = io.BytesIO()
        torch.save(d, buffer)
        buffer.seek(0)
        assert torch.load(buffer, weights_only=True) == d
    with pytest.raises(ConfigError, match="unknown configuration keys"):
        TrainConfig.from_dict({"epochs": 1, "colour": "red"})
    # another command's configuration is named as such, not as some 40 unknown keys
    with pytest.raises(ConfigError, match="configuration of ella ensemble, not of ella train"):
        TrainConfig.from_dict(EnsembleConfig().to_dict())
    with pytest.raises(ConfigError, match="configuration of ella train, not of ella ensemble"):
        EnsembleConfig.from_dict(TrainConfig().to_dict())


def test_run_fields_leave_out_paths_device_and_progress():
    for cls in (TrainConfig, EnsembleConfig):
        assert issubclass(cls, Config)
        assert {"data_dir", "device", "progress"}.isdisjoint(cls.run_fields())
        assert "epochs" in cls.run_fields()


def test_checkpoint_error_is_a_runtime_error_for_python_callers(tmp_path):
    from ella.io import load_torch

    (tmp_path / "c.pt").write_bytes(b"junk")
    with pytest.raises(RuntimeError, match="cannot read checkpoint"):
        load_torch(tmp_path / "c.pt")
    with pytest.raises(CheckpointError):
        load_torch(tmp_path / "c.pt")


# ---------------------------------------------------------------- threads
def test_threads_follow_the_cpus_available_unless_the_user_chooses(monkeypatch):
    from ella.runtime.system import available_cpus, configure_threads

    old = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv("ELLA_THREADS", "1")
        assert configure_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.delenv("ELLA_THREADS")
        assert configure_threads() == available_cpus() == torch.get_num_threads()
        assert 1 <= available_cpus() <= (len(__import__("os").sched_getaffinity(0)))
    finally:
        torch.set_num_threads(old)


def test_python_dash_m_ella_is_the_command():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ella", "train", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--backend {native,asdl,curvlinops}" in proc.stdout
    assert "ELLA_THREADS" in proc.stdout  # the threads note under each run command's help
    assert (
        "ELLA_THREADS"
        in subprocess.run(
            [sys.executable, "-m", "ella", "--help"], capture_output=True, text=True
        ).stdout
    )
