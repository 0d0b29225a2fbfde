import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

from ella.cli import build_parser, main
from ella.train import HELP, TrainConfig
from tests.cli_runs import TINY_LEARNED


def test_every_config_field_is_a_documented_option():
    assert set(HELP) == {f.name for f in dataclasses.fields(TrainConfig)}
    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for field in dataclasses.fields(TrainConfig):
        assert "--" + field.name.replace("_", "-") in text


def test_every_default_shows_once_in_the_help():
    """argparse's default-adding formatter and a help text that says its default in words
    ("(default: all)") used to show both."""
    commands = build_parser()._subparsers._group_actions[0].choices
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        assert not re.search(r"\(default[^)]*\) ?\(default", text), name
    train = " ".join(commands["train"].format_help().split())
    assert "number of test images to use (default: all) " in train
    assert "run directory (default: a new runs/run-" in train


def test_the_ggn_help_counts_the_backward_passes_the_code_takes():
    from ella.engine.schedule import SCHEDULE_HELP
    from ella.marglik.native import softmax_hessian_root

    k = 5
    assert softmax_hessian_root(torch.full((3, k), 1 / k)).shape[0] == k - 1  # one pass each
    passes = "exact (K - 1 backward passes for K classes with the native backend"
    assert passes in SCHEDULE_HELP["ggn"]


@pytest.mark.slow
def test_train_then_report_through_the_command_line(tmp_path, capsys):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ella.cli", "train", "--out", str(out), *TINY_LEARNED],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "GCONV %" in proc.stdout and "layer8" in proc.stdout
    # the headline: which paths the data need is not asked yet, and what asking costs
    assert proc.stdout.startswith(f"which paths the data need: not asked yet; ella select {out} ")
    results = json.loads((out / "results.json").read_text())
    assert {"test_accuracy", "log_marglik", "prior_precision", "effective_parameters"} <= set(
        results
    )
    assert json.loads((out / "config.json").read_text())["epochs"] == 2
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    (out / "effective_parameters.png").unlink()
    capsys.readouterr()
    assert main(["report", str(out)]) == 0  # in this process: a second start costs 5 s
    printed = capsys.readouterr().out
    assert "layer1" in printed
    assert printed.startswith("which paths the data need: not asked yet")
    assert (out / "effective_parameters.png").is_file()
    # --resume alone takes the run's saved options; a finished run just reports again
    assert main(["train", "--out", str(out), "--resume"]) == 0
    # a changed option is refused, naming it
    assert main(["train", "--out", str(out), "--resume", "--epochs", "5"]) == 1


def test_resume_needs_a_run_directory(capsys):
    assert main(["train", "--resume"]) == 1
    assert "--resume needs --out" in capsys.readouterr().err


def test_refuses_to_overwrite_a_run(tmp_path, capsys):
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    assert main(["train", "--out", str(tmp_path), *TINY_LEARNED]) == 1
    assert "--resume" in capsys.readouterr().err


def test_bad_options_give_clear_errors(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "a"), "--dataset", "svhn", *TINY_LEARNED]) == 1
    assert "unknown dataset 'svhn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse lists the choices
        main(["train", "--out", str(tmp_path / "b"), "--paths", "fc", "mlp", *TINY_LEARNED])
    assert "invalid choice: 'mlp'" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing")]) == 1
    assert "no results.json" in capsys.readouterr().err


def test_demo_runs(capsys):
    assert main(["demo", "--image-size", "8", "--batch-size", "4", "--width", "1"]) == 0
    assert "GCONV" in capsys.readouterr().out


def test_download_refuses_unknown_names(capsys):
    assert main(["download", "svhn"]) == 2
    assert "cannot download 'svhn'" in capsys.readouterr().err
