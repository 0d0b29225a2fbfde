import dataclasses
import json

import pytest

from ella.cli import build_parser, main
from ella.ensembles import HELP, EnsembleConfig

TINY = [
    "--train-size", "48", "--test-size", "24", "--epochs", "1", "--members", "2",
    "--batch-size", "16", "--no-progress",
]  # fmt: skip


def test_every_ensemble_config_field_is_a_documented_option():
    assert set(HELP) == {f.name for f in dataclasses.fields(EnsembleConfig)}
    text = build_parser()._subparsers._group_actions[0].choices["ensemble"].format_help()
    for field in dataclasses.fields(EnsembleConfig):
        assert "--" + field.name.replace("_", "-") in text


def test_train_and_evaluate_an_ensemble_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["ensemble", "--out", str(out), *TINY, "--method", "forde", "--lengthscales", "pca"]
    argv += ["--augment", "sampled", "--augment-group", "C8", "--osp-group", "C4"]
    assert main([*argv, "--corruption-severities", "1", "5"]) == 0
    printed = capsys.readouterr().out
    assert "forde ensemble of 2 members" in printed and "OSP" in printed
    assert "gaussian_noise" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["corruption_severities"] == [1, 5]
    assert 1 <= results["orbit"]["osp"] <= 4
    # a finished run resumes to the same results; a changed option is refused
    assert main(["ensemble", "--out", str(out), "--resume"]) == 0
    assert main(["ensemble", "--out", str(out), "--resume", "--epochs", "3"]) == 1
    assert "cannot change: --epochs" in capsys.readouterr().err


def test_the_results_line_counts_in_the_singular_for_one():
    from ella.ensembles import format_results

    test = dict.fromkeys(["accuracy", "nll", "ece", "member_accuracy", "member_nll"], 0.5)
    results = {"method": "de", "members": 1, "parameters_per_member": 10, "train_size": 8,
               "epochs": 1, "train_time_s": 1.0, "test_size": 4, "test": test}  # fmt: skip
    assert "de ensemble of 1 member (10 parameters each), trained on 8 images for 1 epoch in" in (
        format_results(results)
    )
    assert "of 2 members" in format_results({**results, "members": 2})
    assert "for 3 epochs in" in format_results({**results, "epochs": 3})


def test_no_severities_means_no_corrupted_evaluation(tmp_path, capsys):
    assert main(["ensemble", "--out", str(tmp_path), *TINY, "--corruption-severities"]) == 0
    assert "corrupted" not in json.loads((tmp_path / "results.json").read_text())


def test_bad_options_are_clear_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse lists the choices
        main(["ensemble", "--out", str(tmp_path), *TINY, "--method", "svgd"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'svgd'" in err and "forde" in err
    assert main(["ensemble", "--resume"]) == 1
