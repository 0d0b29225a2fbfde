"""benchmarks.path_select: its claims read from the selected networks, and a smoke run."""

import json

import pytest

from benchmarks import path_select

from ..data.test_datasets import SHARED


def row(dataset, seed, shares, selected_acc=0.9, control_acc=0.8):
    return {
        "dataset": dataset,
        "seed": seed,
        "selected": {
            "shares": dict(zip(("fc", "conv", "gconv"), shares, strict=True)),
            "test_accuracy": selected_acc,
        },
        "control": {"test_accuracy": control_acc},
    }


def test_a_claim_holds_only_if_it_holds_at_every_seed():
    rows = [
        row("mnist", 0, (20, 50, 30)),
        row("rotated_mnist", 0, (0, 0, 100)),
        row("mnist", 1, (36, 0, 64)),
        row("rotated_mnist", 1, (30, 0, 70), selected_acc=0.7),  # FC not the smallest here
    ]
    claims = path_select.claims(rows, [0, 1])
    assert claims["GCONV has the largest share on rotated MNIST (selected network)"]
    assert claims["the GCONV share on rotated MNIST exceeds that on MNIST (selected network)"]
    assert not claims["FC has the smallest share on rotated_mnist (selected network)"]
    assert claims["selected >= the whole network trained on alike in test accuracy on mnist"]
    assert not claims[
        "selected >= the whole network trained on alike in test accuracy on rotated_mnist"
    ]
    only_seed_0 = path_select.claims(rows[:2], [0])
    assert only_seed_0["FC has the smallest share on rotated_mnist (selected network)"]


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_path_select_smoke_reuses_its_runs(tmp_path):
    argv = [
        "--profile", "smoke", "--results-dir", str(tmp_path), "--work-dir", str(tmp_path / "w"),
        "--datasets", "rotated_mnist", "--select-epochs", "1",
    ]  # fmt: skip
    payload = path_select.main(argv)
    (r,) = payload["rows"]
    assert r["rounds"][0]["rows"][0]["dropped"] == "none" and r["kept"]
    assert r["null"]["log_evidence"] < 0 and set(r["selected"]["shares"]) == {"fc", "conv", "gconv"}
    run = tmp_path / "w" / "smoke_rotated_mnist_seed0"
    stamp = (run / "path_selection.json").stat().st_mtime_ns
    again = path_select.main(argv)  # everything reused: the same rows
    assert again["rows"] == payload["rows"]
    assert (run / "path_selection.json").stat().st_mtime_ns >= stamp
    path_select.main([*argv, "--render-only"])
    assert json.loads((tmp_path / "path_select.json").read_text())["rows"] == payload["rows"]
    assert "| rotated_mnist | 0 |" in (tmp_path / "path_select.md").read_text()
