"""Hostile and mistaken inputs, one row each: the command, its exit status and the words its
error must contain; and the run directory's ownership: one process at a time, a finished run
final, a killed run's lock never stale.

Each command runs ``ella`` in-process on tiny data (:func:`refused`), except where two
processes or a killed one are the point. The Python API's rows are in
``tests/test_api_inputs.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ella.cli import main
from ella.engine.recipe import OPTIMUM_STEP
from ella.errors import RunDirectoryError
from ella.groups import MAX_ROTATIONS
from ella.io import load_torch, save_jsonl, save_torch, strict_json
from ella.options import MAX_SEED
from ella.rundir import LOCK, check_run_directory, run_lock
from ella.train import TrainConfig
from tests.cli_runs import TINY, refused, snapshot
from tests.damage import flip_bits_in_tensor_data

#: a mixer whose evidence rounds draw a subset and use the control variate, as by default
SUBSET = [
    "--train-size", "192", "--test-size", "32", "--width", "1", "--epochs", "2",
    "--n-epochs-burnin", "1", "--marglik-frequency", "1", "--marglik-subset-size", "64",
    "--batch-size", "64", "--seed", "3", "--no-progress",
]  # fmt: skip


# ---------------------------------------------------------------- the table
def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _config_only_checkpoint(run: Path) -> None:
    ckpt = load_torch(run / "checkpoint.pt")
    save_torch({"config": ckpt["config"]}, run / "checkpoint.pt")


def _other_width_checkpoint(run: Path) -> None:
    ckpt = load_torch(run / "checkpoint.pt")
    ckpt["model"] = {k: torch.zeros(*(2 * n for n in v.shape)) for k, v in ckpt["model"].items()}
    save_torch(ckpt, run / "checkpoint.pt")


def _non_dict_state_checkpoint(run: Path) -> None:
    ckpt = load_torch(run / "checkpoint.pt")
    ckpt["state"] = [1, 2]
    save_torch(ckpt, run / "checkpoint.pt")


def _results_directory(run: Path) -> None:
    (run / "results.json").unlink()
    (run / "results.json").mkdir()


def _unfinished_mixer(run: Path) -> None:
    """A learned mixer's config (the run is an MLP's) without its results.json."""
    _edit_json(run / "config.json", model="mixer", paths=["conv", "gconv"])
    (run / "results.json").unlink()


def _pickle_checkpoint(run: Path) -> None:
    class Payload:
        def __reduce__(self):
            return (Path.touch, (run / "pwned",))

    torch.save({"config": {}, "model": Payload()}, run / "checkpoint.pt")


def _random_bytes_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").write_bytes(random.Random(0).randbytes(2048))


def _json_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").write_text(json.dumps({"config": {}, "model": [1, 2]}))


def _dangling_link(run: Path) -> None:
    (run / "link").symlink_to(run.parent / "nowhere")


def _ensemble_config(run: Path) -> None:
    """The config.json of an ella ensemble run (the checkpoint stays the train run's)."""
    from ella.ensembles.config import EnsembleConfig

    (run / "config.json").write_text(json.dumps(EnsembleConfig().to_dict()))


def _stopped_before_checkpoint(run: Path) -> None:
    """What a run interrupted in its first epoch leaves: config.json alone."""
    for path in run.iterdir():
        if path.name != "config.json":
            path.unlink()


def _no_checkpoint(run: Path) -> None:
    (run / "checkpoint.pt").unlink()


def _drop_config_keys(run: Path) -> None:
    """A config.json cut short: without two keys that every version of ella wrote."""
    data = json.loads((run / "config.json").read_text())
    del data["train_size"], data["test_size"]
    (run / "config.json").write_text(json.dumps(data))


def _fc_per_channel_checkpoint(run: Path) -> None:
    """The checkpoint of ella 0.2, whose FC paths held one tensor per channel."""
    ckpt = load_torch(run / "checkpoint.pt")
    ckpt["model"]["layer1.paths.fc.pixel_maps.0.weight"] = torch.zeros(2, 2)
    save_torch(ckpt, run / "checkpoint.pt")


def _cut(path: Path) -> None:
    """``path`` cut to its first half, as a full disk or a killed copy leaves it."""
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def _config_without_norm(run: Path) -> None:
    """config.json without ``norm``, which the checkpoint and results.json hold."""
    data = json.loads((run / "config.json").read_text())
    del data["norm"]
    (run / "config.json").write_text(json.dumps(data))


def _results_of_another_seed(run: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    _edit_json(run / "results.json", config={**results["config"], "seed": 7})


def _unfinished_fc_per_channel_checkpoint(run: Path) -> None:
    _fc_per_channel_checkpoint(run)
    (run / "results.json").unlink()


def _selection(run: Path, **changes) -> None:
    """A finished path_selection.json with ``changes``."""
    row = {
        "dropped": "none", "kept": ["conv", "gconv"], "test_accuracy": 0.5,
        "log_evidence": -10.0, "log_likelihood": -5.0, "shares": {"conv": 50.0, "gconv": 50.0},
    }  # fmt: skip
    record = {
        "epochs": 2, "paths": ["conv", "gconv"], "kept": ["conv", "gconv"], "finished": True,
        "rounds": [{"kept": ["conv", "gconv"], "rows": [row], "winner": "none"}],
        "null": {"log_likelihood": -20.0, "log_evidence": -21.0},
    }  # fmt: skip
    (run / "path_selection.json").write_text(json.dumps({**record, **changes}))


#: ella report's measurement of symmetry, which rebuilds the run's network from its files
SYMMETRY = ["report", "RUN", "--symmetry", "C4", "--symmetry-images", "2"]

# (name, prepare(run) or None, argv with RUN for the run's directory, status, needles)
CASES = [
    ("shift beyond the image", None, ["train", *TINY, "--augment-shift", "1000"], 1,
     ["--augment-shift 1000", "at most 14"]),
    ("shift on CIFAR's 32 pixels", None,
     ["train", *TINY, "--dataset", "cifar10_subset", "--augment-shift", "17"], 1, ["at most 16"]),
    ("seed past torch's generators", None, ["train", *TINY, "--seed", str(2**50)], 1,
     [f"seed must be at most {MAX_SEED}"]),
    ("negative seed", None, ["train", *TINY, "--seed", "-1"], 1, ["seed must be at least 0"]),
    ("ensemble seed past the generators", None,
     ["ensemble", "--train-size", "16", "--test-size", "8", "--epochs", "1", "--members", "2",
      "--width", "1", "--no-progress", "--seed", str(2**40)], 1, ["seed must be at most"]),
    ("validation leaves one image", None,
     ["train", *TINY, "--validation-size", "63"], 1, ["leaves 1 training images", "at most 62"]),
    ("a prior precision that overflows", None, ["train", *TINY, "--prior-precision", "1e300"], 1,
     ["prior term", "smaller --prior-precision", "there is no checkpoint yet"]),
    ("checkpoint with only a config", _config_only_checkpoint, ["train", "--out", "RUN",
     "--resume"], 1, ["does not fit this run", "lacks the entry 'model'"]),
    ("checkpoint of another width", _other_width_checkpoint, ["train", "--out", "RUN", "--resume"],
     1, ["does not fit this run", "size mismatch"]),
    ("checkpoint whose state is a list", _non_dict_state_checkpoint,
     ["train", "--out", "RUN", "--resume"], 1, ["does not fit this run"]),
    ("checkpoint with a pickled object", _pickle_checkpoint, ["train", "--out", "RUN", "--resume"],
     1, ["cannot read checkpoint", "never loads"]),
    ("config with a number for a name", lambda r: _edit_json(r / "config.json", dataset=5),
     ["train", "--out", "RUN", "--resume"], 1, ["config.json", "dataset must be a string"]),
    ("config with a string for a list", lambda r: _edit_json(r / "config.json", paths="fc"),
     ["train", "--out", "RUN", "--resume"], 1, ["config.json", "paths must be a list"]),
    ("config with a string for a number", lambda r: _edit_json(r / "config.json", lr="big"),
     ["train", "--out", "RUN", "--resume"], 1, ["config.json", "lr must be a number"]),
    ("results with a broken eta history",
     lambda r: _edit_json(r / "results.json", eta_history=[{"x": 1}]), ["report", "RUN"], 1,
     ["results.json is incomplete, changed"]),
    ("results with a broken layer row",
     lambda r: _edit_json(r / "results.json", effective_parameters=[{"layer": 1}]),
     ["report", "RUN"], 1, ["results.json is not as ella writes it",
     "effective_parameters[0].layer should be a string, found the number 1",
     "--resume to write it again"]),
    ("results.json a directory", _results_directory, ["train", "--out", "RUN", "--resume"], 1,
     ["results.json is not a file"]),
    ("a group too large to measure", None,
     ["report", "RUN", "--symmetry", "C100000", "--symmetry-images", "2"], 1,
     [f"N up to {MAX_ROTATIONS}"]),
    ("a group that is no group", None, ["report", "RUN", "--symmetry", "C0"], 1,
     ["unknown group"]),
    ("select on a network without paths", None, ["select", "RUN"], 1,
     ["(--model mlp) has none", "ella train --model mixer"]),
    ("select with no epochs", None, ["select", "RUN", "--epochs", "0"], 1,
     ["ella select --epochs", "at least 1, got 0"]),
    ("select on an unfinished run", _unfinished_mixer, ["select", "RUN"], 1,
     ["the run is not finished", "--resume, then select"]),
    ("report asked to select", None, ["report", "RUN", "--select-paths"], 2,
     ["--select-paths moved", "use `ella select RUN`"]),
    ("report asked to drop paths", None, ["report", "RUN", "--drop-paths", "--drop-epochs", "3"],
     2, ["--drop-paths moved", "use `ella select RUN --drop-only`"]),
    ("checkpoint of random bytes", _random_bytes_checkpoint, ["train", "--out", "RUN",
     "--resume"], 1, ["is corrupt, truncated or not a checkpoint", "--overwrite"]),
    ("checkpoint of JSON text", _json_checkpoint, ["train", "--out", "RUN", "--resume"], 1,
     ["is corrupt, truncated or not a checkpoint", "restore it from a copy"]),
    ("--out a dangling symbolic link", _dangling_link, ["train", *TINY, "--out", "RUN/link"], 1,
     ["is a symbolic link to", "which does not exist", "create the directory it points to"]),
    ("one training image", None, ["train", *TINY, "--train-size", "1"], 1,
     ["--train-size 1: a run needs at least 2 training images", "--train-size 2 or more"]),
    ("a path named twice", None, ["train", *TINY, "--paths", "fc", "fc"], 1,
     ["--paths fc fc: names fc more than once", "use --paths fc"]),
    ("a residual path alone", None, ["train", *TINY, "--paths", "residual"], 1,
     ["a residual path is the part of a CONV path", "use --paths gconv residual"]),
    ("a residual path beside fc alone", None, ["train", *TINY, "--paths", "fc", "residual"], 1,
     ["use --paths fc gconv residual"]),
    ("--lr-hyp under the closed-form update", None, ["train", *TINY, "--lr-hyp", "0.05"], 1,
     ["--lr-hyp 0.05 sets the Adam steps", "the update in force is optimum",
      "add --prior-update adam"]),
    ("--lr-hyp without learned priors", None,
     ["train", *TINY, "--lr-hyp", "0.05", "--no-learn-priors"], 1,
     ["--no-learn-priors has none", "drop --lr-hyp"]),
    ("ensemble --resume of a train run", None, ["ensemble", "--out", "RUN", "--resume"], 1,
     ["holds a run of ella train, not of ella ensemble", "`ella train --out"]),
    ("train --resume of an ensemble run", _ensemble_config, ["train", "--out", "RUN", "--resume"],
     1, ["holds a run of ella ensemble, not of ella train", "`ella ensemble --out"]),
    ("a rerun of a run stopped before its first checkpoint", _stopped_before_checkpoint,
     ["train", *TINY, "--out", "RUN"], 1,
     ["stopped before its first checkpoint", "--resume to start it again", "--overwrite"]),
    ("config without keys every version wrote", _drop_config_keys,
     ["train", "--out", "RUN", "--resume"], 1,
     ["config.json", "it lacks ['test_size', 'train_size']", "restore it from a copy"]),
    ("--resume of a finished run of ella 0.2", _fc_per_channel_checkpoint,
     ["train", "--out", "RUN", "--resume"], 1,
     ["ella 0.2 or earlier", "its run is finished", "nothing to resume",
      "--overwrite would discard its results"]),
    ("--resume of an unfinished run of ella 0.2", _unfinished_fc_per_channel_checkpoint,
     ["train", "--out", "RUN", "--resume"], 1,
     ["ella 0.2 or earlier", "Finish the run with ella 0.2", "--overwrite"]),
    ("a selection whose kept paths are a string",
     lambda r: _selection(r, kept="conv+gconv"), ["report", "RUN"], 1,
     ["path_selection.json is not as ella writes it",
      "kept should be a list of strings, found the string 'conv+gconv'", "--overwrite"]),
    ("a selection whose rounds are strings", lambda r: _selection(r, rounds=["a", "b"]),
     ["report", "RUN"], 1, ["path_selection.json", "rounds[0] should be an object"]),
    ("a selection whose winner is no row",
     lambda r: _selection(r, rounds=[{"kept": [], "rows": [], "winner": "conv"}]),
     ["report", "RUN"], 1, ["path_selection.json", "round 1's winner 'conv' is none of its rows"]),
    ("an --out name too long for the file system", None,
     ["train", *TINY, "--out", "RUN/" + "a" * 300], 1,
     ["a name in it is too long for the file system", "300 bytes", "choose a shorter --out"]),
    ("a run beside a file of the user's", lambda r: (r / "notes.txt").write_text("mine"),
     ["train", *TINY, "--out", "RUN"], 1,
     ["holds an ella run beside files ella did not write: notes.txt", "move them out"]),
    ("a results.json cut short", lambda r: _cut(r / "results.json"), ["report", "RUN"], 1,
     ["results.json is empty, truncated or not JSON", "cannot be read: move it away",
      "--resume to write it again"]),
    ("a config.json cut short", lambda r: _cut(r / "config.json"),
     ["train", "--out", "RUN", "--resume"], 1,
     ["config.json is empty, truncated or not JSON", "cannot be read: restore it from a copy"]),
    ("a selection record cut short",
     lambda r: (_selection(r), _cut(r / "path_selection.json")), ["report", "RUN"], 1,
     ["path_selection.json is empty, truncated or not JSON", "--overwrite to ella select"]),
    ("a config.json garbled", lambda r: _edit_json(r / "config.json", model=5),
     ["report", "RUN"], 1, ["config.json is not a valid configuration", "restore it"]),
    ("a config.json that lost a key the checkpoint has", _config_without_norm,
     SYMMETRY, 1, ["config.json and checkpoint.pt describe different runs",
     "norm: 'none' in config.json, 'instance' in checkpoint.pt", "Restore config.json"]),
    ("a results.json of another seed", _results_of_another_seed, SYMMETRY, 1,
     ["config.json and results.json describe different runs", "seed: 0 in config.json, 7 in"]),
    ("a checkpoint with flipped bits", lambda r: flip_bits_in_tensor_data(r / "checkpoint.pt"),
     SYMMETRY, 1, ["checkpoint.pt", "does not match", "restore it from a copy"]),
    ("--resume of a run without a checkpoint but with metrics", _no_checkpoint,
     ["train", "--out", "RUN", "--resume"], 1,
     ["no checkpoint at", "start the run again with --overwrite"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "prepare, argv, status, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_bad_input_is_one_clear_error_before_any_harm(
    run, tmp_path, capsys, prepare, argv, status, needles
):
    if prepare is not None:
        prepare(run)
    argv = [str(run) + a[3:] if a == "RUN" or a.startswith("RUN/") else a for a in argv]
    if argv[0] in ("train", "ensemble") and "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "new")]
    before = snapshot(run)
    err = refused(capsys, argv, status, *needles)
    assert "weights_only" not in err  # never torch's hint to load a file's code
    assert snapshot(run) == before  # the run directory is as it was
    assert not (run / "pwned").exists()


def test_a_default_the_user_did_not_type_never_refuses(tmp_path, capsys):
    config = TrainConfig(prior_update="adam")
    assert config.prior_step == 1.0 and config.prior_update_rule() == "adam"
    assert TrainConfig().prior_step == OPTIMUM_STEP
    out = tmp_path / "r"
    assert main(["train", "--out", str(out), *TINY, "--prior-update", "adam"]) == 0
    capsys.readouterr()
    # typed, a step that adam cannot use is still refused
    argv = ["train", *TINY, "--prior-update", "adam", "--prior-step", "0.5", "--out", "s"]
    refused(capsys, argv, 1, "--prior-step 0.5 --prior-update adam: a step towards the optimum")
    # lr_hyp: its default is never refused; typed, it is where no round takes Adam steps
    assert TrainConfig(lr_hyp=0.05).lr_hyp == 0.05  # built in Python: nothing was typed
    argv = ["train", *TINY, "--lr-hyp", "0.05", "--out", "t"]
    refused(capsys, argv, 1, "--lr-hyp 0.05", "add --prior-update adam")
    TrainConfig(lr_hyp=0.05, prior_update="adam").check_given(["lr_hyp"])
    TrainConfig(lr_hyp=0.05, invariance="learned", augment="none").check_given(["lr_hyp"])


def test_an_unreadable_checkpoint_is_not_called_corrupt(run, capsys, monkeypatch):
    """A checkpoint that cannot be read (permissions) may be good: the message says to fix
    the permissions, never that it is corrupt (torch.load raises as it would for a file
    of mode 000; chmod does not deny root, which the tests may run as)."""
    import ella.io

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ella.io.torch, "load", denied)
    before = snapshot(run)
    err = refused(capsys, ["train", "--out", str(run), "--resume"], 1,
                  "cannot read checkpoint", "permission denied", "fix its permissions")  # fmt: skip
    assert "corrupt" not in err
    assert snapshot(run) == before


def test_an_unreadable_json_file_is_not_called_corrupt(run, capsys, monkeypatch):
    """The same for config.json and results.json (mode 600 of another user)."""
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self.suffix == ".json":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    err = refused(capsys, ["report", str(run)], 1, "cannot read", "results.json",
                  "permission denied", "fix its permissions")  # fmt: skip
    assert "truncated" not in err and "corrupt" not in err


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_the_beginning(
    finished_run, tmp_path, capsys, monkeypatch
):
    """Interrupted in its first epoch, a run leaves config.json alone; --resume starts it
    from the beginning with that configuration, and ends as the uninterrupted run did."""
    from ella.train.loop import Trainer

    def interrupted(self):
        raise KeyboardInterrupt

    out = tmp_path / "r"
    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "train_epoch", interrupted)
        refused(capsys, ["train", "--out", str(out), *TINY], 130, "there is no checkpoint yet")
    assert [p.name for p in out.iterdir()] == ["config.json"]
    # another configuration is refused, naming the options
    refused(capsys, ["train", "--out", str(out), "--resume", "--epochs", "2"], 1,
            "--epochs (the run has 1, given 2)")  # fmt: skip
    assert main(["train", "--out", str(out), "--resume"]) == 0
    assert "has no checkpoint yet" in capsys.readouterr().err
    ours = torch.load(out / "checkpoint.pt", weights_only=True)
    theirs = torch.load(finished_run / "checkpoint.pt", weights_only=True)
    for name, tensor in theirs["model"].items():
        assert torch.equal(ours["model"][name], tensor), name


# ---------------------------------------------------------------- messages
def test_an_interrupt_says_whether_there_is_a_checkpoint(tmp_path, capsys, monkeypatch):
    from ella.train.loop import Trainer

    train_epoch = Trainer.train_epoch

    def interrupted_in(epoch):
        def train(self):
            if self.state.epoch + 1 == epoch:
                raise KeyboardInterrupt
            return train_epoch(self)

        return train

    argv = ["train", "--out", str(tmp_path / "r"), *TINY, "--epochs", "2"]
    monkeypatch.setattr(Trainer, "train_epoch", interrupted_in(1))
    err = refused(capsys, argv, 130, "interrupted", "there is no checkpoint yet")
    assert "--resume" not in err
    monkeypatch.setattr(Trainer, "train_epoch", interrupted_in(2))
    refused(capsys, [*argv, "--overwrite"], 130, "checkpoint is kept", "with --resume to go on")


def test_a_checkpoint_with_a_weight_whose_square_overflows_is_refused_as_such(
    tmp_path, capsys, monkeypatch
):
    """A checkpoint holding a bias of 1e38 (whole: its checksum written again, as a diverged
    run would leave it) resumes to a refusal that blames the weight, not the priors, keeps
    the checkpoint and writes no results."""
    from ella.train.loop import Trainer

    out, train_epoch = tmp_path / "r", Trainer.train_epoch

    def stop_in_epoch_2(self):
        if self.state.epoch + 1 == 2:
            raise KeyboardInterrupt
        return train_epoch(self)

    argv = ["train", "--out", str(out), *TINY, "--epochs", "3"]
    monkeypatch.setattr(Trainer, "train_epoch", stop_in_epoch_2)
    refused(capsys, argv, 130, "checkpoint is kept")
    monkeypatch.setattr(Trainer, "train_epoch", train_epoch)
    checkpoint = load_torch(out / "checkpoint.pt")
    bias = [name for name in checkpoint["model"] if name.endswith("bias")][-1]
    checkpoint["model"][bias] = torch.full_like(checkpoint["model"][bias], 1e38)
    save_torch(checkpoint, out / "checkpoint.pt")
    before = (out / "checkpoint.pt").read_bytes()
    needles = ("became inf", "A weight is 1e+38, whose square overflows", "not the priors")
    refused(capsys, ["train", "--out", str(out), "--resume"], 1, *needles)
    assert (out / "checkpoint.pt").read_bytes() == before
    assert not (out / "results.json").exists()


def test_a_refused_run_leaves_no_empty_default_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", *TINY, "--dataset", "mnist", "--data-dir", str(tmp_path / "nothing")]
    refused(capsys, argv, 1)  # created runs/run-..., then found no data files
    assert not any((tmp_path / "runs").iterdir())


def test_metrics_and_results_are_strict_json(tmp_path):
    rows = [{"epoch": 1, "test_nll": float("nan"), "x": [float("inf"), 1.0]}]
    save_jsonl(rows, tmp_path / "m.jsonl")
    text = (tmp_path / "m.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(name):
        raise ValueError(name)

    assert json.loads(text, parse_constant=refuse) == {"epoch": 1, "test_nll": None,
                                                       "x": [None, 1.0]}  # fmt: skip
    assert strict_json((1.5, {"a": -float("inf")})) == [1.5, {"a": None}]


# ---------------------------------------------------------------- a finished run is final
def test_resume_of_a_finished_run_changes_nothing(run, capsys):
    before = snapshot(run)
    assert main(["train", "--out", str(run), "--resume"]) == 0
    captured = capsys.readouterr()
    assert "nothing to resume" in captured.err and "test accuracy" in captured.out
    assert snapshot(run) == before


def test_resume_after_the_last_checkpoint_writes_the_same_results(tmp_path, capsys):
    """Killed after its last epoch's checkpoint, before results.json: the resumed run reports
    byte for byte what the uninterrupted one did (the last round's report is checkpointed)."""
    out = tmp_path / "r"
    assert main(["train", "--out", str(out), *SUBSET]) == 0
    capsys.readouterr()
    expected = (out / "results.json").read_bytes()
    metrics = (out / "metrics.jsonl").read_bytes()
    assert json.loads(metrics.splitlines()[-1])["curvature_ratio"] != 1.0  # the control works
    (out / "results.json").unlink()
    assert main(["train", "--out", str(out), "--resume"]) == 0
    capsys.readouterr()
    assert (out / "results.json").read_bytes() == expected
    assert (out / "metrics.jsonl").read_bytes() == metrics


def test_resume_of_a_finished_ensemble_changes_nothing(tmp_path, capsys):
    out = tmp_path / "e"
    argv = ["ensemble", "--out", str(out), "--train-size", "16", "--test-size", "8",
            "--epochs", "1", "--members", "2", "--width", "1", "--corruption-severities",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    before = snapshot(out)
    assert main(["ensemble", "--out", str(out), "--resume"]) == 0
    assert "nothing to resume" in capsys.readouterr().err
    assert snapshot(out) == before


# ---------------------------------------------------------------- one owner at a time
#: a process that holds the run directory argv[1] until it is killed
HOLD = """
import sys, time
from ella.rundir import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_held_run_directory_is_refused_naming_its_holder(run, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(run)
        for argv in (["--resume"], ["--overwrite", *TINY]):
            refused(capsys, ["train", "--out", str(run), *argv], 1,
                    "in use by another ella process", f"pid {holder.pid}")  # fmt: skip
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()


def test_report_and_export_write_nothing_into_a_held_run_directory(run, capsys):
    """While another process holds the run (a running ella select), ella report prints but
    redraws nothing, refuses the measurements that write there, and ella export into it is
    refused; exporting elsewhere is not."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(run)
        assert main(["report", str(run)]) == 0
        assert f"(figures not redrawn: pid {holder.pid} holds {run})" in capsys.readouterr().out
        held = f"in use by another ella process (pid {holder.pid})"
        argv = ["report", str(run), "--symmetry", "C4"]
        refused(capsys, argv, 1, held, "when that process has ended")
        refused(capsys, ["export", str(run)], 1, "in use by another ella process")
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()


def test_report_reads_a_run_it_cannot_write_into(run, capsys, monkeypatch):
    """Someone else's run (a directory this user cannot write into): ella report prints it
    without redrawing figures or taking the lock, and refuses the measurements that write
    there (os.access is patched: root may write anywhere)."""
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(run) else real(p, mode)
    )
    before = snapshot(run)
    assert main(["report", str(run)]) == 0
    assert f"(figures not redrawn: {run} is not writable)" in capsys.readouterr().out
    refused(capsys, ["report", str(run), "--symmetry", "C4"], 1, "is not writable",
            "when you can write there")  # fmt: skip
    assert snapshot(run) == before and not (run / LOCK).exists()


def test_the_lock_nests_within_a_process_and_never_counts_as_a_users_file(tmp_path):
    from ella.rundir import check_run_directory, holds_run

    d = tmp_path / "d"
    with run_lock(d), run_lock(d):
        assert (d / LOCK).is_file() and not holds_run(d)
        check_run_directory(d, resume=False, overwrite=False)  # empty but for the lock
    assert not d.exists() or not any(d.iterdir())


def _ella(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "ELLA_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ella", *argv], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.slow
def test_two_processes_into_one_directory_make_one_run(tmp_path):
    out = tmp_path / "d"
    procs = [_ella("train", *TINY, "--epochs", "3", "--seed", str(s), "--out", str(out))
             for s in (0, 1)]  # fmt: skip
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    err = next(e for code, e in results if code == 1)
    assert "in use by another ella process" in err or "already holds a run" in err, err
    seed = json.loads((out / "config.json").read_text())["seed"]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["config"]["seed"] == seed
    assert json.loads((out / "results.json").read_text())["config"]["seed"] == seed
    assert ckpt["state"]["epoch"] == 3


@pytest.mark.slow
def test_a_killed_run_leaves_no_stale_lock(tmp_path, capsys):
    out = tmp_path / "d"
    proc = _ella("train", *TINY, "--epochs", "500", "--out", str(out))
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").is_file():  # it holds the lock and has trained
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    assert (out / LOCK).read_text().strip() == str(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert main(["train", "--out", str(out), *TINY, "--overwrite"]) == 0
    assert "in use" not in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["epochs"] == 1


def test_a_finished_run_it_cannot_write_into_names_what_still_works(run, capsys, monkeypatch):
    """Someone else's finished run (read-only here): ``--resume`` is refused as unwritable,
    naming ``ella report RUN``, which reads it without writing."""
    real = Path.write_bytes

    def denied(self, *args, **kwargs):
        if self.name.startswith(".ella-write-test"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_bytes", denied)
    before = snapshot(run)
    refused(capsys, ["train", "--out", str(run), "--resume"], 1,
            "cannot write to the run directory", "Permission denied",
            f"ella report {run} reads the finished run")  # fmt: skip
    assert snapshot(run) == before
    assert main(["report", str(run)]) == 0
    # from Python (ella.fit and train(..., overwrite=True) ask the same check), the same
    # refusal names what works in Python
    with pytest.raises(RunDirectoryError) as caught:
        check_run_directory(run, resume=False, overwrite=True)
    assert f"load_run('{run}')" in str(caught.value) and "ella report" not in str(caught.value)
    assert snapshot(run) == before
