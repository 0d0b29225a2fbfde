"""benchmarks/paper_gpu.py and tools/gpu_check.sh: the paper profile's rows resumed across
calls of a GPU machine that keeps nothing (packing, unpacking, the card's share, collecting)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from benchmarks import paper_gpu
from ella.io import save_json, save_jsonl, save_torch
from ella.train import TrainConfig, Trainer
from studies.results import GENERATED
from tests.data.shared import SHARED

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def fake_checkpoint() -> dict:
    """A checkpoint's shape: weights, SGD momentum, a learner's Adam state, a float64 trace,
    random states and the loop's state."""
    return {
        "config": {"epochs": 1000, "precision": "fp32"},
        "model": {
            "big": torch.randn(64, 3, 41),
            "small": torch.randn(10),
            "zero": torch.zeros(80, 80),
        },
        "optimizer": {
            "state": {0: {"momentum_buffer": torch.randn(64, 3, 41)}, 1: {}},
            "param_groups": [{"lr": 0.02, "momentum": 0.9, "params": [0, 1]}],
        },
        "hyper_optimizer": {
            "state": {
                0: {
                    "step": torch.tensor(3.0),
                    "exp_avg": torch.randn(70, 70),
                    "exp_avg_sq": torch.rand(70, 70) * 1e-9,
                }
            }
        },
        "output_trace": torch.rand(5000, dtype=torch.float64),
        "rng_state": torch.randint(0, 255, (5056,), dtype=torch.uint8),
        "log_prior": torch.randn(60),
        "state": {"epoch": 3, "step": 360, "seconds": 30.0, "metrics": [{"epoch": 1}]},
    }


def test_exact_packing_keeps_every_tensor():
    ck = fake_checkpoint()
    back = paper_gpu.unpack_checkpoint(paper_gpu.pack_checkpoint(ck, "exact"))
    assert torch.equal(
        back["optimizer"]["state"][0]["momentum_buffer"],
        ck["optimizer"]["state"][0]["momentum_buffer"],
    )
    assert torch.equal(back["model"]["big"], ck["model"]["big"]) and back["state"] == ck["state"]


@pytest.mark.parametrize("mode", ["bf16", "int8"])
def test_lossy_packing_rounds_large_weights_and_drops_sgd_momentum(mode):
    ck = fake_checkpoint()
    packed = paper_gpu.pack_checkpoint(ck, mode)
    assert packed["dropped"] == 1 and packed["mode"] == mode
    back = paper_gpu.unpack_checkpoint(packed)
    big = ck["model"]["big"]
    assert back["model"]["big"].dtype == big.dtype and back["model"]["big"].shape == big.shape
    if mode == "int8":  # within half a step of its block's largest magnitude over 127
        block = paper_gpu.INT8_BLOCK
        pad = -big.numel() % block
        error = torch.nn.functional.pad((back["model"]["big"] - big).reshape(-1), (0, pad))
        step = torch.nn.functional.pad(big.reshape(-1), (0, pad)).reshape(-1, block).abs()
        assert (error.reshape(-1, block).abs() <= step.amax(1, keepdim=True) / 254 + 1e-7).all()
    else:
        assert torch.allclose(back["model"]["big"], big, rtol=1e-2, atol=0)
    assert not torch.equal(back["model"]["big"], big)
    assert torch.equal(back["model"]["zero"], ck["model"]["zero"])  # zeros stay zero
    for key in ("small",):  # below PACKED_MIN: exact
        assert torch.equal(back["model"][key], ck["model"][key])
    for key in ("output_trace", "rng_state", "log_prior"):  # float64, integers, small
        assert torch.equal(back[key], ck[key])
    adam = back["hyper_optimizer"]["state"][0]  # Adam's moments travel exactly
    assert torch.equal(adam["exp_avg_sq"], ck["hyper_optimizer"]["state"][0]["exp_avg_sq"])
    assert back["optimizer"]["state"] == {0: {}, 1: {}}
    assert back["optimizer"]["param_groups"] == ck["optimizer"]["param_groups"]
    assert back["state"] == ck["state"] and back["config"] == ck["config"]
    assert paper_gpu.packed_bytes(packed) < paper_gpu.packed_bytes(ck)


def test_auto_packs_as_exactly_as_the_bound_allows():
    cks = {"a": fake_checkpoint(), "b": fake_checkpoint()}
    assert paper_gpu.choose_mode(cks, "auto", 100.0) == "exact"
    exact = sum(paper_gpu.packed_bytes(c) for c in cks.values()) / 2**20
    assert paper_gpu.choose_mode(cks, "auto", exact * 0.7) == "bf16"
    assert paper_gpu.choose_mode(cks, "auto", 1e-6) == "int8"  # the last, whatever its size
    assert paper_gpu.choose_mode(cks, "bf16", 1e-6) == "bf16"


def make_runs(runs: Path, names=("rotated_mnist_learned", "mnist_map"), call="C1") -> None:
    """Two run directories as a call leaves them, with timings of a solo phase (the first
    row alone, epochs of 2 s) and a shared one (both rows, epochs of 5 s), and GPU samples."""
    t0 = 1000.0
    for k, name in enumerate(names):
        run = runs / name
        ck = fake_checkpoint()
        metrics = [
            {
                "epoch": e,
                "test_accuracy": 0.5 + 0.01 * e,
                "test_nll": 1.0 / e,
                **({"log_marglik": -100.0 * e} if "learned" in name else {}),
            }
            for e in range(1, 7 - k)
        ]
        ck["state"] = {"epoch": len(metrics), "metrics": metrics, "seconds": 40.0}
        save_json({"epochs": 1000, "precision": "fp32"}, run / "config.json")
        save_jsonl(metrics, run / "metrics.jsonl")
        save_torch(ck, run / "checkpoint.pt")
        (run / ".ella.lock").touch()
        (run / ".checkpoint.pt.x1.tmp").touch()
        if k == 0:  # alone from 1000 to 1010 (epochs end at 1002, 1004, ...), then shared
            walls = [1002, 1004, 1006, 1008, 1015, 1020]
            start = t0
        else:
            walls = [1015, 1020, 1025, 1030, 1035][: len(metrics)]
            start = 1010.0
        events = [{"event": "start", "call": call, "wall": start, "launched": start - 10}]
        events += [
            {"event": "epoch", "call": call, "wall": float(w), "epoch": e + 1}
            for e, w in enumerate(walls[: len(metrics)])
        ]
        events.append({"event": "stop", "call": call, "wall": 1040.0, "signal": 15})
        save_jsonl(events, runs / f"{name}.epochs.jsonl")
    samples = "1001.0,20,900\n1005.0,30,1000\n1016.0,60,2000\n1030.0,70,2100\nbad line\n"
    with open(runs / f"gpu_{call}.csv", "w") as f:
        f.write(samples)


def test_pack_and_unpack_keep_what_resume_needs(tmp_path):
    runs, out, back = tmp_path / "runs", tmp_path / "out", tmp_path / "back"
    make_runs(runs)
    call = {
        "call": "C1",
        "card": "NVIDIA H100",
        "seconds": 540,
        "rows_start": 1000.0,
        "rows_end": 1040.0,
    }
    written = paper_gpu.pack(runs, out, mode="int8", part_mib=0.01, call=call)
    assert len(written["parts"]) > 1 and written["mode"] == "int8"
    assert sorted(p.name for p in out.iterdir()) == written["parts"]
    blob = b"".join(p.read_bytes() for p in paper_gpu.archive_parts(out))
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert "rotated_mnist_learned/checkpoint.pt" not in names  # it travels packed
    assert not any(".ella.lock" in n or n.endswith(".tmp") for n in names)
    assert paper_gpu.unpack(out, back) == ["mnist_map", "rotated_mnist_learned"]
    for name in ("mnist_map", "rotated_mnist_learned"):
        run = back / name
        assert sorted(p.name for p in run.iterdir()) == [
            "checkpoint.pt",
            "config.json",
            "metrics.jsonl",
        ]
        ck = torch.load(run / "checkpoint.pt", weights_only=True)
        original = torch.load(runs / name / "checkpoint.pt", weights_only=True)
        assert ck["state"] == original["state"] and torch.equal(
            ck["rng_state"], original["rng_state"]
        )
        assert (run / "metrics.jsonl").read_text() == (runs / name / "metrics.jsonl").read_text()
        assert (back / f"{name}.epochs.jsonl").is_file()
    calls = paper_gpu.read_jsonl(back / "calls.jsonl")
    assert calls == [{**call, "pack": "int8"}]


def test_the_cards_share_and_the_budget(tmp_path):
    runs = tmp_path / "runs"
    make_runs(runs)
    timings = {
        n: paper_gpu.read_jsonl(runs / f"{n}.epochs.jsonl")
        for n in ("rotated_mnist_learned", "mnist_map")
    }
    call = {"call": "C1", "seconds": 540, "rows_start": 1000.0, "rows_end": 1040.0}
    phases = paper_gpu.share(runs, timings, [call])
    # alone: epochs 2-4 of 2 s (1 ends at 1002 after the start: a warm-up); the epoch ending
    # at 1015 spans the second row's start at 1010 and is left out
    assert phases["1"]["rows"] == {
        "rotated_mnist_learned": {"epochs": 3, "median_s": 2.0, "mean_s": 2.0}
    }
    assert phases["2"]["rows"]["rotated_mnist_learned"]["median_s"] == 5.0
    assert phases["2"]["rows"]["mnist_map"] == {"epochs": 4, "median_s": 5.0, "mean_s": 5.0}
    assert phases["2"]["epochs_per_s"] == pytest.approx(0.4)
    assert phases["1"]["gpu_utilisation_pct"] == 25 and phases["2"]["gpu_memory_mib"] == 2100
    rows = {
        "rotated_mnist_learned": {"epochs_target": 1000, "epochs": 6},
        "mnist_map": {"epochs_target": 1000, "epochs": 5},
    }
    plan = paper_gpu.budget(rows, timings, phases, [call], call_seconds=560.0)
    assert plan["last_call"]["epochs_gained"] == {"rotated_mnist_learned": 6, "mnist_map": 5}
    assert plan["last_call"]["calls_for_target"] == 200  # 5 epochs a call
    only = plan["rows_only_call"]  # (560 - 60 - 10 s start-up) / 5 s
    assert (only["epochs_per_call"], only["calls_for_target"], only["calls_for_rest"]) == (
        98,
        11,
        11,
    )


def returned_folder(tmp_path: Path) -> Path:
    """A folder as a device call returns it: the log, the speed files, the archive."""
    runs, out = tmp_path / "runs", tmp_path / "returned"
    make_runs(runs)
    call = {
        "call": "C1",
        "card": "NVIDIA H100 80GB HBM3",
        "seconds": 540,
        "rows_start": 1000.0,
        "rows_end": 1040.0,
        "profile": "paper",
    }
    paper_gpu.pack(runs, out, call=call)
    save_json({"variants": []}, out / "speed_gpu.json")
    with open(out / "speed_gpu.md", "w") as f:
        f.write(f"# speed\n\n{GENERATED}\n")
    return out


def test_collect_writes_the_rows_and_keeps_the_archive(tmp_path):
    src, results, keep = returned_folder(tmp_path), tmp_path / "results", tmp_path / "keep"
    payload = paper_gpu.collect(src, results, keep)
    metrics = paper_gpu.read_jsonl(results / "paper_gpu" / "rotated_mnist_learned.jsonl")
    assert [m["epoch"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    saved = json.loads((results / "paper_gpu.json").read_text())
    assert saved["card"] == "NVIDIA H100 80GB HBM3" and saved["files"] == payload["files"]
    row = saved["rows"]["rotated_mnist_learned"]
    assert row["epochs"] == 6 and row["best_test_accuracy"] == {
        "value": pytest.approx(0.56),
        "epoch": 6,
    }
    assert row["last_log_marglik"] == -600.0 and row["resumes"] == 0
    md = (results / "paper_gpu.md").read_text()
    assert md.rstrip().endswith(GENERATED) and "NVIDIA H100 80GB HBM3" in md
    assert "2.00 s per epoch alone, 5.00 s with 2 rows" in md
    assert (results / "speed_gpu.md").read_text().count(GENERATED) == 1
    assert sorted(p.name for p in keep.iterdir()) == ["runs.tar.gz.00"]
    paper_gpu.collect(src, results, keep)  # its own files: replaced


def test_collect_replaces_no_file_it_did_not_write(tmp_path):
    src, results = returned_folder(tmp_path), tmp_path / "results"
    mine = results / "paper_gpu" / "mnist_map.jsonl"
    mine.parent.mkdir(parents=True)
    with open(mine, "w") as f:
        f.write("my notes\n")
    with pytest.raises(FileExistsError, match="not written by this script"):
        paper_gpu.collect(src, results, None)
    assert mine.read_text() == "my notes\n" and not (results / "paper_gpu.json").exists()
    with open(results / "paper_gpu.md", "w") as f:
        f.write("# my record\n")
    mine.unlink()
    with pytest.raises(FileExistsError, match="not written by a benchmark script"):
        paper_gpu.collect(src, results, None)


def test_the_scripts_parse():
    for script in (SCRIPT, ROOT / "tools" / "device_carry.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.slow
def test_a_run_resumes_from_its_packed_checkpoint(tmp_path):
    """A tiny SGD run stopped after one epoch, packed in 8 bits and unpacked elsewhere,
    trains on from its epoch with its momentum restarted."""
    cfg = TrainConfig(
        train_size=64,
        test_size=32,
        width=1,
        epochs=2,
        batch_size=32,
        optimizer="sgd",
        lr=0.02,
        learn_priors=False,
        progress=False,
    )

    def stop(trainer):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, tmp_path / "runs" / "mnist_map", on_epoch_end=stop).run()
    paper_gpu.pack(tmp_path / "runs", tmp_path / "out", mode="int8")
    paper_gpu.unpack(tmp_path / "out", tmp_path / "back")
    ck = torch.load(tmp_path / "back" / "mnist_map" / "checkpoint.pt", weights_only=True)
    assert ck["state"]["epoch"] == 1 and not any(ck["optimizer"]["state"].values())
    result = Trainer(cfg, tmp_path / "back" / "mnist_map").run(resume=True)
    assert len(paper_gpu.read_jsonl(tmp_path / "back" / "mnist_map" / "metrics.jsonl")) == 2
    assert 0 <= result["test_accuracy"] <= 1


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "MNIST").is_dir(), reason="../shared/data not present")
def test_the_script_trains_and_packs_on_the_cpu(tmp_path):
    """tools/gpu_check.sh's rows on the CPU at the smoke profile: one call trains a row and
    returns its run directory packed (resuming from a packed checkpoint is
    :func:`test_a_run_resumes_from_its_packed_checkpoint`)."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "ELLA_CHECK_DEVICE": "cpu",
        "ELLA_CHECK_STEPS": "rows",
        "ELLA_CHECK_PROFILE": "smoke",
        "ELLA_CHECK_ROWS": "mnist_map",
        "ELLA_CHECK_EPOCHS": "1",
        "ELLA_CHECK_PACK_S": "8",
        "ELLA_CHECK_DATA": str(SHARED),
        "ELLA_CHECK_RUNS": str(tmp_path / "none"),
    }
    first = tmp_path / "first"
    # the budget is a ceiling, not a duration (the row stops after its epoch): a generous one
    # keeps a loaded machine's slow imports from reaching the script's "seconds left" rule
    subprocess.run(["bash", str(SCRIPT), str(first), "900"], env=env, check=True, timeout=1200)
    assert (first / "runs.tar.gz.00").is_file(), (first / "check.log").read_text()
    payload = paper_gpu.collect(first, tmp_path / "results", None, speed=False)
    assert len(payload["calls"]) == 1 and payload["rows"]["mnist_map"]["resumes"] == 0
    assert payload["rows"]["mnist_map"]["epochs"] >= 1
