"""ella.rundir: a checkpoint resumes only under the configuration it was saved with, options
added since reading as what they meant then."""

import pytest


def test_an_option_added_after_the_checkpoint_counts_as_its_default(tmp_path):
    from ella.errors import CheckpointError
    from ella.io import save_torch
    from ella.rundir import load_checkpoint
    from ella.train import TrainConfig

    saved = TrainConfig().to_dict()
    del saved["validation_size"]  # a checkpoint written before the option existed
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())["config"] == saved
    with pytest.raises(CheckpointError, match=r"\['validation_size'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(validation_size=10))


def test_an_option_whose_default_changed_counts_as_what_ella_did_before_it(tmp_path):
    # norm did not exist before instance normalisation; those runs had none, which is no
    # longer the default: such a checkpoint resumes only with --norm none
    from ella.errors import CheckpointError
    from ella.io import save_torch
    from ella.rundir import load_checkpoint
    from ella.train import TrainConfig

    saved = TrainConfig().to_dict()
    del saved["norm"]
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"\['norm'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(norm="none"))["config"] == saved
    # every path started at its random weights before zero_init (a tuple option) existed
    saved = TrainConfig().to_dict()
    del saved["zero_init"]
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"\['zero_init'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(zero_init=()))["config"] == saved


def _refusals_of_a_run_directory(tmp_path):
    """``(name, call)`` for every refusal of ``ella.rundir`` that names an option: each
    call raises from the Python door."""
    import json
    import os

    from ella.rundir import check_run_directory, load_checkpoint, new_run_directory
    from ella.train import TrainConfig

    def made(name: str, *files: str, config: bool = True):
        out = tmp_path / name
        out.mkdir()
        if config:
            (out / "config.json").write_text(json.dumps(TrainConfig().to_dict()))
        for f in files:
            (out / f).write_text("{}")
        return out

    a_file = tmp_path / "a_file"
    a_file.write_text("")
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "nowhere", dangling)
    blocked = made("blocked", config=False)
    (blocked / "checkpoint.pt").mkdir()
    root_file = tmp_path / "root_file"
    root_file.write_text("")
    return [
        ("a file", lambda: check_run_directory(a_file, resume=False, overwrite=False)),
        ("a dangling link", lambda: check_run_directory(dangling, resume=False, overwrite=False)),
        ("a folder where a file goes",
         lambda: check_run_directory(blocked, resume=False, overwrite=False)),
        ("resume a finished run without checkpoint",
         lambda: check_run_directory(made("done", "results.json", "metrics.jsonl"),
                                     resume=True, overwrite=False)),
        ("resume nothing", lambda: check_run_directory(made("empty", config=False),
                                                       resume=True, overwrite=False)),
        ("a run beside a user's file",
         lambda: check_run_directory(made("beside", "mine.txt"), resume=False, overwrite=False)),
        ("a run stopped before its checkpoint",
         lambda: check_run_directory(made("stopped"), resume=False, overwrite=False)),
        ("a run", lambda: check_run_directory(made("run", "results.json", "metrics.jsonl"),
                                              resume=False, overwrite=False)),
        ("no checkpoint to load",
         lambda: load_checkpoint(tmp_path / "missing.pt", TrainConfig())),
        ("no runs/ folder", lambda: new_run_directory("run", root_file / "runs")),
    ]  # fmt: skip


def test_every_refusal_of_a_run_directory_speaks_the_callers_language(tmp_path):
    """From Python, a refusal names the keywords (``resume=True``, ``overwrite=True``, a run
    directory); on the command line the same refusal names the flags."""
    from ella.errors import EllaError

    for name, call in _refusals_of_a_run_directory(tmp_path):
        with pytest.raises(EllaError) as caught:
            call()
        python, command_line = str(caught.value), caught.value.on_command_line()
        assert "--" not in python, f"{name}: {python}"
        assert "--" in command_line, f"{name}: {command_line}"


def test_ella_fit_and_ella_train_word_the_same_refusal_each_their_way(tmp_path, capsys):
    import json

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import ella
    from ella.cli import main
    from ella.errors import RunDirectoryError
    from ella.train import TrainConfig

    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(TrainConfig().to_dict()))
    (out / "results.json").write_text("{}")
    (out / "metrics.jsonl").write_text("")
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    words = r"use resume=True to continue it, overwrite=True to start again, or another run"
    with pytest.raises(RunDirectoryError, match=words):
        ella.fit(torch.nn.Linear(4, 2), data, out=out, epochs=1, progress=False)
    assert main(["train", "--out", str(out), "--epochs", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "use --resume to continue it, --overwrite to start again, or another --out" in err
