"""``benchmarks.main_job`` collects a finished run and its selection, and the claims script
words the README's line from what it wrote."""

from __future__ import annotations

import json

from benchmarks import claims, main_job


def _run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"layer": "layer1", "fc": 20.0, "conv": 30.0, "gconv": 50.0}]
    (run / "results.json").write_text(json.dumps({
        "effective_parameters": rows, "test_accuracy": 0.975, "log_marglik_reported_state": -1.5e4,
        "train_time_s": 180.0, "train_size": 3000, "config": {"seed": 0},
    }))  # fmt: skip

    def row(dropped, acc, evidence):
        return {"dropped": dropped, "test_accuracy": acc, "log_evidence": evidence, "kept": [],
                "log_likelihood": -100.0}  # fmt: skip

    rounds = [
        {"kept": ["fc", "conv", "gconv"], "winner": "fc",
         "rows": [row("none", 0.97, -100.0), row("fc", 0.98, -60.0), row("conv", 0.9, -300.0),
                  row("gconv", 0.96, -150.0)]},
        {"kept": ["conv", "gconv"], "winner": "none",
         "rows": [row("none", 0.981, -55.0), row("conv", 0.9, -400.0),
                  row("gconv", 0.95, -90.0)]},
    ]  # fmt: skip
    (run / "path_selection.json").write_text(json.dumps({
        "epochs": 20, "kept": ["conv", "gconv"], "rounds": rounds, "finished": True,
        "null": {"log_evidence": -7000.0, "log_likelihood": -6900.0},
    }))  # fmt: skip
    return run


def _readme_line(tmp_path, payload: dict) -> str:
    """The README's main-job line that ``benchmarks.claims`` words from ``payload``."""
    results = tmp_path / "root" / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "main_job.json").write_text(json.dumps(payload))
    return claims.main_job_line(tmp_path / "root")


def test_the_main_job_and_its_selection_are_collected_and_worded(tmp_path):
    payload = main_job.collect(_run(tmp_path), {"train": 1.0, "select": 2.0})
    assert payload["run"]["mean_shares"] == {"fc": 20.0, "conv": 30.0, "gconv": 50.0}
    assert payload["selection"]["networks"] == 7 and payload["selection"]["kept"] == [
        "conv",
        "gconv",
    ]
    text = main_job.markdown(payload)
    assert "| 1 | FC+CONV+GCONV | fc | 98.00 | -60.0 | +40.0 |" in text
    assert "Kept: CONV+GCONV (7 networks" in text
    line = _readme_line(tmp_path, payload)
    assert line.startswith(
        "Asked which paths the data need (`ella select RUN`, 20 epochs per network, 7 "
        "networks), the evidence drops FC (+40 nats) and keeps CONV+GCONV (dropping GCONV, "
        "the cheapest, would cost 35 nats); one training per candidate, so not decided (one "
        "seed measures no spread; `--seeds 3` trains 14 more networks); the selected "
        "network's test accuracy is 98.10% (the whole network trained on alike: 97.00%; seed 0"
    )
    assert payload["selection"]["decision"]["steps"][0] == {
        "round": 1, "unit": "fc", "action": "drop", "mean": 40.0, "se": None, "agree": 1,
        "seeds": 1, "decided": False,
    }  # fmt: skip


def test_the_main_job_at_three_seeds_states_each_step_with_its_spread(tmp_path):
    run = _run(tmp_path)
    record = json.loads((run / "path_selection.json").read_text())
    record["seeds"] = 3
    gains = {"fc": [40.0, 50.0, 45.0], "conv": [-200.0, -260.0, -230.0],
             "gconv": [-50.0, -60.0, -10.0]}  # fmt: skip
    for this in record["rounds"]:
        control = this["rows"][0]["log_evidence"]
        for row in this["rows"]:
            shift = gains.get(row["dropped"], [0.0, 0.0, 0.0])
            if this is record["rounds"][1] and row["dropped"] == "gconv":
                shift = [-35.0, -30.0, -40.0]
            row["replicates"] = [
                {
                    "seed": seed,
                    "log_evidence": (control + d if row["dropped"] != "none" else control),
                }
                for seed, d in zip((0, 1000, 2000), shift, strict=True)
            ]
    (run / "path_selection.json").write_text(json.dumps(record))
    payload = main_job.collect(run, {"train": 1.0, "select": 2.0})
    steps = payload["selection"]["decision"]["steps"]
    assert [(s["action"], s["unit"], s["decided"]) for s in steps] == [
        ("drop", "fc", True),
        ("keep", "gconv", True),
    ]
    assert "| 1 | drop FC | +45 | 3 | 3 of 3 | yes |" in main_job.markdown(payload)
    line = _readme_line(tmp_path, payload)
    assert line.startswith(
        "Asked which paths the data need (`ella select RUN --seeds 3`, 20 epochs per network, "
        "7 networks at 3 seeds each), the evidence drops FC (+45 ± 3 nats, 3 of 3 seeds agree, "
        "decided) and keeps CONV+GCONV (dropping GCONV, the cheapest, would cost 35 ± 3 nats, "
        "3 of 3 seeds agree, decided); the selected network's"
    )
    assert line.endswith("(the whole network trained on alike: 97.00%; seeds 0, 1000, 2000, "
                         "`benchmarks/results/main_job.json`).")  # fmt: skip
