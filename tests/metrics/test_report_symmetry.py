import json

import pytest
import torch

from ella.cli import main
from ella.errors import RunDirectoryError
from ella.rundir import foreign_entries, holds_run
from ella.train import train
from ella.train.loop import evaluate
from ella.train.runs import load_run
from tests.runs import tiny_config

pytestmark = pytest.mark.slow  # each trains a small run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    config = tiny_config(epochs=2, test_size=16, report_state="best_evidence")
    results = train(config, out)
    return out, results


def test_load_run_gives_the_reported_model(run_dir):
    out, results = run_dir
    run = load_run(out)
    assert run.state == results["reported_state"] == "best_evidence"
    assert not run.model.training
    assert evaluate(run.model, run.data.test)["accuracy"] == results["test_accuracy"]
    with pytest.raises(RunDirectoryError, match="no config.json"):
        load_run(out / "missing")


def test_report_symmetry_prints_the_per_layer_table(run_dir, capsys):
    out, _ = run_dir
    assert main(["report", str(out), "--symmetry", "C4", "--symmetry-images", "8"]) == 0
    text = capsys.readouterr().out
    assert "G-EED under C4 (|G| = 4) on 8 inputs" in text
    assert "layer8" in text and "softmax, KL(p(gx) || p^)" in text
    saved = json.loads((out / "symmetry_C4.json").read_text())
    assert [row["layer"] for row in saved["layers"]][:2] == ["layer1", "layer2"]
    assert all(torch.isfinite(torch.tensor(row["geed"])) for row in saved["layers"])
    assert (out / "symmetry_C4.png").is_file()
    assert holds_run(out) and not foreign_entries(out)


def test_report_path_outputs_prints_and_saves_each_layers_shares(run_dir, capsys):
    out, _ = run_dir
    assert main(["report", str(out), "--path-outputs", "--symmetry-images", "8"]) == 0
    text = capsys.readouterr().out
    assert "path outputs: each path's share of its layer's output power, on 8 " in text
    saved = json.loads((out / "path_outputs.json").read_text())
    assert saved["images"] == 8 and saved["state"] == "best_evidence"
    assert [row["layer"] for row in saved["layers"]] == [f"layer{i}" for i in range(1, 9)]
    for row in saved["layers"]:
        assert row["fc"] + row["conv"] + row["gconv"] == pytest.approx(100)
    # the report's file is the run's: --overwrite may still replace the run
    assert holds_run(out) and not foreign_entries(out)


def test_report_path_outputs_refuses_a_model_without_relaxed_layers(tmp_path, capsys):
    train(tiny_config(epochs=1, test_size=16, model="cnn", learn_priors=False), tmp_path)
    assert main(["report", str(tmp_path), "--path-outputs"]) == 1
    assert "has none" in capsys.readouterr().err
    assert not (tmp_path / "path_outputs.json").exists()


def test_report_symmetry_rejects_an_unknown_group(run_dir, capsys):
    out, _ = run_dir
    assert main(["report", str(out), "--symmetry", "SO3"]) == 1
    assert "unknown group 'SO3'" in capsys.readouterr().err


def test_report_symmetry_of_a_run_with_learned_input_invariance(tmp_path, capsys):
    config = tiny_config(
        epochs=1,
        test_size=16,
        invariance="full",
        augment="none",
        invariance_samples=2,
        invariance_eval_samples=2,
        learn_priors=False,
    )
    train(config, tmp_path)
    run = load_run(tmp_path)
    assert run.model is not run.net and run.model.net is run.net
    assert main(["report", str(tmp_path), "--symmetry", "C4", "--symmetry-images", "8"]) == 0
    text = capsys.readouterr().out
    assert "layer8" in text  # the layers of the network inside the wrapper
    assert "the classifier with --invariance full around this network" in text
