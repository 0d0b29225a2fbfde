"""Table 3's paper profile on one GPU, across calls of a machine that keeps nothing.

The rotated-MNIST and MNIST rows of ``benchmarks.table3 --profile paper``, learned and MAP,
train side by side on one card, each into its own run directory, for as long as a call
allows (``tools/gpu_check.sh`` starts them and stops them with ``timeout``; a checkpoint is
written atomically after every epoch, so a stopped run loses at most the epoch in
progress). What the call returns lets the next call resume the same four runs, so that the
paper's budget (1,000 epochs, ``PAPER_EPOCHS``) is reached over several calls. This module
is the Python side of that script:

    python -m benchmarks.paper_gpu run NAME RUNS --data-dir D --device cuda --call ID
    python -m benchmarks.paper_gpu pack RUNS OUT --call-json '{...}'   # RUNS as parts in OUT
    python -m benchmarks.paper_gpu unpack SRC RUNS                     # and back
    python -m benchmarks.paper_gpu --collect DIR   # a returned folder into benchmarks/results/

A device call returns at most 8 files of at most 16 MiB, 64 MiB in all, and carries at most
64 MiB in (the working tree, MNIST and the wheels included). One row's checkpoint holds its
8.3 million weights and as many SGD momentum values: 67 MB in float32, 267 MB for the four.
``pack`` therefore writes each checkpoint in the most exact form that fits ``--max-mib``
(``PACK_MODES``): ``exact``; ``bf16`` (tensors of ``PACKED_MIN`` elements or more in
bfloat16, SGD's momentum dropped: it restarts from the first gradient, as torch's SGD does
for a parameter without one); ``int8`` (those tensors in 8 bits with one scale per block
of ``INT8_BLOCK`` consecutive values, momentum dropped). Everything else (the epoch, the
metrics, the random states, the log prior precisions, Adam's moments, the evidence rounds'
state) travels exactly. At the paper profile only ``int8`` fits (about 9 MB a row), so a
resumed run is not the uninterrupted run: each call resumes from its weights rounded to 8
bits (by at most half a step of 1/127 of their block's largest magnitude) and a restarted
momentum. The summary says how many resumes each row has had.

Each row's ``NAME.epochs.jsonl`` beside its run directory records when it started, each
epoch's end and why it stopped, by call; ``calls.jsonl`` records each call (card, budget,
the rows' window, the solo phase) and ``gpu_CALL.csv`` the card's utilisation and memory
sampled during the rows. From them ``--collect`` measures the card's share: the seconds per
epoch of a row alone (the solo phase, where the first row starts before the others) and of
each row while all of them share the card.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ella.io import atomic_write, load_torch, save_jsonl, save_torch
from ella.rundir import CHECKPOINT, CONFIG, METRICS, read_json
from ella.rundir import RESULTS as RUN_RESULTS
from ella.train import TrainConfig, Trainer
from studies.results import BENCHMARK_RESULTS, GENERATED, check_generated, write_generated
from studies.table3 import PROFILES, row_config

#: the four runs: Table 3's row and the model, in the order the script starts them (the
#: first one alone during the solo phase)
ROWS = ("rotated_mnist_learned", "rotated_mnist_map", "mnist_learned", "mnist_map")
#: the reference's MNIST budget (its scripts train 1,000 epochs); the profile's own is 200
PAPER_EPOCHS = 1000
#: how ``pack`` writes a checkpoint, most exact first
PACK_MODES = ("exact", "bf16", "int8")
#: tensors with fewer elements travel exactly in every mode
PACKED_MIN = 4096
#: ``int8``: consecutive values that share one scale (float32: 3% on top of the bytes)
INT8_BLOCK = 128
#: the archive's parts: ``runs.tar.gz.00``, ``.01``, ... of at most ``--part-mib`` each
PART_PREFIX = "runs.tar.gz."
#: the default bound on the archive, so that it travels back (64 MiB with the logs) and in
#: again beside the working tree (~7 MiB), MNIST (12 MiB) and the wheels (1 MiB)
MAX_ARCHIVE_MIB = 40.0
CALLS = "calls.jsonl"
#: entries of a checkpoint's dicts left out outside ``exact`` (torch's SGD starts a missing
#: momentum from the parameter's next gradient)
DROPPED_KEYS = frozenset({"momentum_buffer"})
#: entries that travel exactly in every mode (Adam's moments: a second moment rounded to
#: zero would turn the next step into a jump)
EXACT_KEYS = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
#: marks a packed tensor in a packed checkpoint
PACKED = "__ella_packed__"
#: the seconds a rows-only call spends outside the rows' epochs besides their start-up
#: (wheels, unpacking, packing), for the budget's estimate
CALL_OVERHEAD_S = 60.0


# ---------------------------------------------------------------------- one row


def split_name(name: str) -> tuple[str, bool]:
    """``"rotated_mnist_learned"`` -> ``("rotated_mnist", True)``."""
    row, _, model = name.rpartition("_")
    if model not in ("learned", "map") or not row:
        raise ValueError(f"{name!r} is not ROW_learned or ROW_map")
    return row, model == "learned"


def row_train_config(
    name: str, data_dir: str | None, device: str, precision: str, epochs: int, profile: str
) -> TrainConfig:
    """The row's configuration: Table 3's ``profile`` with ``epochs`` and ``precision``."""
    row, learned = split_name(name)
    args = argparse.Namespace(data_dir=data_dir, seed=0, device=device)
    cfg = row_config(row, learned, PROFILES[profile], "full", args)
    return dataclasses.replace(cfg, epochs=epochs, precision=precision)


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file (none where it is absent)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def timing_path(runs: Path, name: str) -> Path:
    return Path(runs) / f"{name}.epochs.jsonl"


def run_row(args: argparse.Namespace) -> int:
    """Train one row into ``RUNS/NAME``, resuming it where that holds it (with the run's own
    configuration: ``--epochs``, ``--precision`` and ``--profile`` then only start new
    runs), and record its start, epochs and stop in ``RUNS/NAME.epochs.jsonl``."""
    runs, name = Path(args.runs), args.name
    run_dir = runs / name
    resume = (run_dir / CONFIG).is_file()
    if resume:
        cfg = TrainConfig.from_dict(read_json(run_dir / CONFIG, "run's configuration"))
        cfg = dataclasses.replace(cfg, data_dir=args.data_dir, device=args.device, progress=False)
        print(f"{name}: resuming {run_dir} (epochs {cfg.epochs}, precision {cfg.precision})")
    else:
        cfg = row_train_config(
            name, args.data_dir, args.device, args.precision, args.epochs, args.profile
        )
        print(f"{name}: starting {run_dir} (epochs {cfg.epochs}, precision {cfg.precision})")
    events = read_jsonl(timing_path(runs, name))

    def record(event: str, **fields: Any) -> None:
        events.append({"event": event, "call": args.call, "wall": time.time(), **fields})
        save_jsonl(events, timing_path(runs, name))

    def stopped(signum, frame):  # timeout's SIGTERM: say so, then stop at once
        # (an atomic write cut short leaves a temporary file that the resume removes; the
        # checkpoint is the last one renamed into place)
        record("stop", signal=signum)
        sys.stdout.flush()
        os._exit(128 + signum)

    trainer = Trainer(cfg, run_dir, on_epoch_end=lambda t: record("epoch", epoch=t.state.epoch))
    signal.signal(signal.SIGTERM, stopped)
    record("start", launched=args.launched)
    try:
        result = trainer.run(resume=resume)
    except Exception as err:
        record("error", error=f"{type(err).__name__}: {err}"[:500])
        raise
    record("finished")
    print(f"{name}: finished, test accuracy {result.get('test_accuracy')}")
    return 0


# ---------------------------------------------------------------------- packing


def pack_tensor(t: torch.Tensor, mode: str) -> Any:
    """``t`` as it travels in ``mode`` (see the module's docstring)."""
    if mode == "exact" or not t.is_floating_point() or t.dtype == torch.float64:
        return t
    if t.numel() < PACKED_MIN:
        return t
    if mode == "bf16":
        return {PACKED: "bf16", "data": t.to(torch.bfloat16), "dtype": str(t.dtype)}
    flat = t.detach().float().reshape(-1)
    blocks = torch.nn.functional.pad(flat, (0, -flat.numel() % INT8_BLOCK)).reshape(-1, INT8_BLOCK)
    scale = blocks.abs().amax(dim=1, keepdim=True) / 127
    q = torch.round(blocks / scale.clamp_min(torch.finfo(torch.float32).tiny))
    q = q.clamp(-127, 127).to(torch.int8)
    return {PACKED: "int8", "q": q, "scale": scale, "dtype": str(t.dtype), "shape": list(t.shape)}


def unpack_tensor(packed: dict) -> torch.Tensor:
    dtype = getattr(torch, packed["dtype"].removeprefix("torch."))
    if packed[PACKED] == "bf16":
        return packed["data"].to(dtype)
    shape = packed["shape"]
    flat = (packed["q"].float() * packed["scale"]).reshape(-1)[: math.prod(shape)]
    return flat.to(dtype).reshape(shape)


def pack_object(obj: Any, mode: str, dropped: list[int]) -> Any:
    """``obj`` (a checkpoint or part of one) with its tensors packed; outside ``exact``,
    the entries of :data:`DROPPED_KEYS` are left out (counted in ``dropped``) and those of
    :data:`EXACT_KEYS` kept as they are."""
    if isinstance(obj, torch.Tensor):
        return pack_tensor(obj, mode)
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if mode != "exact" and key in DROPPED_KEYS:
                dropped[0] += 1
                continue
            out[key] = pack_object(value, "exact" if key in EXACT_KEYS else mode, dropped)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack_object(v, mode, dropped) for v in obj)
    return obj


def unpack_object(obj: Any) -> Any:
    if isinstance(obj, dict):
        if PACKED in obj:
            return unpack_tensor(obj)
        return {key: unpack_object(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack_object(v) for v in obj)
    return obj


def packed_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj`` (the size of its file, near enough)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(packed_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(packed_bytes(v) for v in obj)
    return 0


def pack_checkpoint(checkpoint: dict, mode: str) -> dict:
    """A checkpoint as it travels: ``{"mode", "dropped", "checkpoint"}``."""
    dropped = [0]
    packed = pack_object(checkpoint, mode, dropped)
    return {"format": 1, "mode": mode, "dropped": dropped[0], "checkpoint": packed}


def unpack_checkpoint(packed: dict) -> dict:
    """The checkpoint that ``ella.train`` resumes from (momentum absent where dropped)."""
    return unpack_object(packed["checkpoint"])


def run_directories(runs: Path) -> list[Path]:
    """The run directories under ``runs`` (those with a ``config.json``), by name."""
    return sorted(p for p in Path(runs).iterdir() if p.is_dir() and (p / CONFIG).is_file())


def choose_mode(checkpoints: dict[str, dict], mode: str, max_mib: float) -> str:
    """``mode``, or with ``"auto"`` the most exact of :data:`PACK_MODES` whose tensors fit
    ``max_mib`` (``int8`` where none does)."""
    if mode != "auto":
        return mode
    for candidate in PACK_MODES:
        size = sum(packed_bytes(pack_checkpoint(c, candidate)) for c in checkpoints.values())
        if size <= max_mib * 2**20 or candidate == PACK_MODES[-1]:
            return candidate
    raise AssertionError("unreachable")


def archive_members(runs: Path) -> Iterator[tuple[Path, str]]:
    """What travels besides the packed checkpoints: ``runs``' own files (timings, logs,
    calls, GPU samples) and each run directory's files but its checkpoint, its lock and
    an interrupted write's temporaries."""
    for path in sorted(Path(runs).iterdir()):
        if path.is_file() and not path.name.startswith("."):
            yield path, path.name
    for run in run_directories(runs):
        for path in sorted(run.iterdir()):
            if path.is_file() and path.name != CHECKPOINT and not path.name.startswith("."):
                yield path, f"{run.name}/{path.name}"


def pack(
    runs: Path, out: Path, mode: str = "auto", max_mib: float = MAX_ARCHIVE_MIB,
    part_mib: float = 15.0, call: dict | None = None,
) -> dict:  # fmt: skip
    """Write ``runs`` as ``out/runs.tar.gz.NN`` parts of at most ``part_mib`` MiB: each run
    directory with its checkpoint packed (:func:`pack_checkpoint`) as ``NAME.ckpt.pt``,
    and ``call`` (if given) appended to ``calls.jsonl`` first. Returns what was written."""
    runs, out = Path(runs), Path(out)
    checkpoints = {
        run.name: load_torch(run / CHECKPOINT)
        for run in run_directories(runs)
        if (run / CHECKPOINT).is_file()
    }
    chosen = choose_mode(checkpoints, mode, max_mib)
    if call is not None:
        save_jsonl([*read_jsonl(runs / CALLS), {**call, "pack": chosen}], runs / CALLS)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for path, arcname in archive_members(runs):
            tar.add(path, arcname=arcname, recursive=False)
        for name, checkpoint in checkpoints.items():
            data = io.BytesIO()
            torch.save(pack_checkpoint(checkpoint, chosen), data)
            info = tarfile.TarInfo(f"{name}.ckpt.pt")
            info.size, info.mtime = data.tell(), int(time.time())
            data.seek(0)
            tar.addfile(info, data)
    blob = buffer.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(PART_PREFIX + "*"):
        old.unlink()
    step = max(1, int(part_mib * 2**20))
    parts = []
    for k, start in enumerate(range(0, len(blob), step)):
        part = out / f"{PART_PREFIX}{k:02d}"
        chunk = blob[start : start + step]
        atomic_write(part, lambda f, chunk=chunk: f.write(chunk))
        parts.append(part.name)
    mib = len(blob) / 2**20
    print(
        f"packed {len(checkpoints)} checkpoints ({chosen}) into {len(parts)} part(s), "
        f"{mib:.1f} MiB in all"
    )
    if mib > max_mib:
        print(f"warning: the archive ({mib:.1f} MiB) exceeds --max-mib {max_mib}: it may not "
              "travel back, or in again with the working tree")  # fmt: skip
    return {"mode": chosen, "parts": parts, "mib": mib, "runs": sorted(checkpoints)}


def archive_parts(src: Path) -> list[Path]:
    """The parts of an archive: ``src`` itself where it is a file, else the
    ``runs.tar.gz.NN`` files in the folder ``src``, in order."""
    src = Path(src)
    if src.is_file():
        return [src]
    return sorted(src.glob(PART_PREFIX + "*"), key=lambda p: int(p.name.rpartition(".")[2]))


def extract(src: Path, runs: Path) -> list[str]:
    """Extract the archive ``src`` into ``runs`` as it was packed (the checkpoints still
    packed, ``NAME.ckpt.pt``); returns the names of the packed checkpoints."""
    parts = archive_parts(src)
    if not parts:
        raise FileNotFoundError(f"no runs archive ({PART_PREFIX}NN parts) in {src}")
    blob = b"".join(p.read_bytes() for p in parts)
    runs = Path(runs)
    runs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(runs, filter="data")
    return sorted(p.name.removesuffix(".ckpt.pt") for p in runs.glob("*.ckpt.pt"))


def unpack(src: Path, runs: Path) -> list[str]:
    """Extract the archive ``src`` into ``runs`` and write each run's ``checkpoint.pt`` from
    its packed form, so that ``ella.train`` resumes it; returns the runs' names."""
    runs = Path(runs)
    names = extract(src, runs)
    for name in names:
        packed = load_torch(runs / f"{name}.ckpt.pt")
        save_torch(unpack_checkpoint(packed), runs / name / CHECKPOINT)
        (runs / f"{name}.ckpt.pt").unlink()
        state = packed["checkpoint"].get("state", {})
        print(f"{name}: unpacked at epoch {state.get('epoch')} ({packed['mode']})")
    return names


# ---------------------------------------------------------------------- the card's share


def windows(timings: dict[str, list[dict]], call: dict) -> dict[str, tuple[float, float]]:
    """Each row's [start, end] in ``call``: from its trainer's start to its stop, end or
    error, else the end of the call's rows."""
    out = {}
    for name, events in timings.items():
        own = [e for e in events if e.get("call") == call["call"]]
        starts = [e["wall"] for e in own if e["event"] == "start"]
        if not starts:
            continue
        ends = [e["wall"] for e in own if e["event"] in ("stop", "finished", "error")]
        end = min(ends) if ends else call.get("rows_end") or max(e["wall"] for e in own)
        out[name] = (min(starts), end)
    return out


def concurrency(spans: dict[str, tuple[float, float]], t: float) -> int:
    return sum(start <= t <= end for start, end in spans.values())


def epoch_intervals(
    timings: dict[str, list[dict]], call: dict
) -> list[tuple[str, int, float, float, int]]:
    """``(row, epoch, start, seconds, rows training)`` of each epoch of ``call`` that began
    after another epoch of the same process (an epoch after a start is a warm-up) and
    during which no row started or stopped."""
    spans = windows(timings, call)
    edges = [t for span in spans.values() for t in span]
    out = []
    for name, events in timings.items():
        own = [e for e in events if e.get("call") == call["call"]]
        previous = None
        for e in own:
            if e["event"] == "start":
                previous = None
            elif e["event"] == "epoch":
                if previous is not None and e["epoch"] == previous["epoch"] + 1:
                    a, b = previous["wall"], e["wall"]
                    if not any(a < t < b for t in edges):
                        out.append((name, e["epoch"], a, b - a, concurrency(spans, (a + b) / 2)))
                previous = e
    return out


def gpu_samples(path: Path) -> list[tuple[float, float, float]]:
    """``(wall, utilisation %, memory used MiB)`` rows of a ``gpu_CALL.csv``."""
    rows = []
    for line in Path(path).read_text().splitlines() if Path(path).is_file() else []:
        try:
            wall, util, mem = (float(v) for v in line.split(",")[:3])
        except ValueError:
            continue
        rows.append((wall, util, mem))
    return rows


def share(runs: Path, timings: dict[str, list[dict]], calls: list[dict]) -> dict:
    """Seconds per epoch of each row by how many rows trained at once, over every call;
    summed throughput; the card's utilisation and memory by the same count."""
    by_count: dict[int, dict[str, list[float]]] = {}
    util: dict[int, list[float]] = {}
    memory: dict[int, list[float]] = {}
    for call in calls:
        for name, _, _, seconds, k in epoch_intervals(timings, call):
            by_count.setdefault(k, {}).setdefault(name, []).append(seconds)
        spans = windows(timings, call)
        for wall, u, m in gpu_samples(runs / f"gpu_{call['call']}.csv"):
            k = concurrency(spans, wall)
            util.setdefault(k, []).append(u)
            memory.setdefault(k, []).append(m)
    phases = {}
    for k, rows in sorted(by_count.items()):
        per_row = {
            name: {
                "epochs": len(s),
                "median_s": statistics.median(s),
                "mean_s": statistics.fmean(s),
            }
            for name, s in sorted(rows.items())
        }
        phases[str(k)] = {
            "rows": per_row,
            "epochs_per_s": sum(1 / r["median_s"] for r in per_row.values()),
            "gpu_utilisation_pct": statistics.fmean(util[k]) if util.get(k) else None,
            "gpu_memory_mib": max(memory[k]) if memory.get(k) else None,
        }
    return phases


# ---------------------------------------------------------------------- collecting


def row_summary(name: str, config: dict, state: dict, events: list[dict], finished: bool) -> dict:
    metrics = state.get("metrics", [])
    tested = [m for m in metrics if m.get("test_accuracy") is not None]
    best = max(tested, key=lambda m: m["test_accuracy"]) if tested else None
    validated = [m for m in metrics if m.get("validation_accuracy") is not None]
    best_val = max(validated, key=lambda m: m["validation_accuracy"]) if validated else None
    rounds = [m for m in metrics if m.get("log_marglik") is not None]
    calls = list(dict.fromkeys(e["call"] for e in events if e["event"] == "start"))
    return {
        "row": split_name(name)[0],
        "model": "learned" if split_name(name)[1] else "map",
        "epochs": state.get("epoch", 0),
        "epochs_target": config.get("epochs"),
        "finished": finished,
        "precision": config.get("precision"),
        "train_seconds": state.get("seconds"),
        "last": {k: metrics[-1].get(k) for k in ("test_accuracy", "test_nll")} if metrics else {},
        "best_test_accuracy": best and {"value": best["test_accuracy"], "epoch": best["epoch"]},
        "best_validation_accuracy": best_val
        and {"value": best_val["validation_accuracy"], "epoch": best_val["epoch"]},
        "last_log_marglik": rounds[-1]["log_marglik"] if rounds else None,
        "calls": len(calls),
        "resumes": max(len(calls) - 1, 0),
    }


def budget(
    rows: dict, timings: dict[str, list[dict]], phases: dict, calls: list[dict],
    call_seconds: float,
) -> dict:  # fmt: skip
    """How many calls the rows' target epochs take: at the last call's own pace, and in
    rows-only calls of ``call_seconds`` at the pace of all rows sharing the card."""
    target = max((r["epochs_target"] or PAPER_EPOCHS) for r in rows.values())
    reached = min(r["epochs"] for r in rows.values())
    out: dict[str, Any] = {"target_epochs": target, "slowest_row_epochs": reached}
    last = calls[-1] if calls else None
    if last is None:
        return out
    own = {
        name: [e for e in events if e.get("call") == last["call"]]
        for name, events in timings.items()
    }
    gained = {name: sum(e["event"] == "epoch" for e in events) for name, events in own.items()}
    rows_start, rows_end = last.get("rows_start"), last.get("rows_end")
    out["last_call"] = {
        "call": last["call"],
        "seconds": last.get("seconds"),
        "rows_seconds": rows_end - rows_start if rows_start and rows_end else None,
        "epochs_gained": gained,
    }
    slowest = min(gained.values(), default=0)
    if slowest:
        out["last_call"]["calls_for_target"] = math.ceil(target / slowest)
        out["last_call"]["calls_for_rest"] = math.ceil(max(target - reached, 0) / slowest)
    shared = phases.get(str(len(rows)))
    if shared:
        pace = max(r["mean_s"] for r in shared["rows"].values())
        # a process's start-up: from its launch to its trainer's start
        starts = [
            e["wall"] - e["launched"] for events in own.values() for e in events
            if e["event"] == "start" and e.get("launched")
        ]  # fmt: skip
        startup = max(starts, default=0.0)
        per_call = max(math.floor((call_seconds - CALL_OVERHEAD_S - startup) / pace), 0)
        out["rows_only_call"] = {
            "seconds": call_seconds,
            "slowest_mean_epoch_s": pace,
            "startup_s": startup,
            "epochs_per_call": per_call,
            "calls_for_target": math.ceil(target / per_call) if per_call else None,
            "calls_for_rest": math.ceil(max(target - reached, 0) / per_call) if per_call else None,
        }
    return out


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def at_epoch(best: dict | None) -> str:
    return "-" if not best else f"{percent(best['value'])} ({best['epoch']})"


def share_lines(phases: dict) -> list[str]:
    """One run alone against all of them together, in words."""
    if not phases:
        return []
    alone, together = phases.get("1"), phases[max(phases, key=int)]
    k = max(phases, key=int)
    if alone is None or k == "1":
        return []
    lines = []
    for name, solo in alone["rows"].items():
        shared = together["rows"].get(name)
        if shared:
            lines.append(
                f"- {name}: {solo['median_s']:.2f} s per epoch alone, {shared['median_s']:.2f} "
                f"s with {k} rows on the card ({shared['median_s'] / solo['median_s']:.2f} times "
                "as long)."
            )
    lines.append(
        f"- Together the {k} rows train {together['epochs_per_s']:.3f} epochs per second, "
        f"{together['epochs_per_s'] / alone['epochs_per_s']:.2f} times one row alone "
        f"({alone['epochs_per_s']:.3f})."
    )
    return ["", *lines]


def markdown(payload: dict) -> str:
    rows, phases, plan = payload["rows"], payload["share"], payload["budget"]
    cards = sorted({c.get("card") or "?" for c in payload["calls"]})
    profiles = sorted({c.get("profile") or "paper" for c in payload["calls"]})
    lines = [
        "# Table 3's paper profile on one GPU, resumed across calls",
        "",
        f"Card: {', '.join(cards)}. Calls so far: {len(payload['calls'])} "
        f"({', '.join(c['call'] for c in payload['calls'])}). Rows: `benchmarks.table3`'s "
        f"profile {', '.join(profiles)} with {plan['target_epochs']} epochs, side by side on "
        "the card; command: `tools/gpu_check.sh` (`python -m benchmarks.paper_gpu --collect "
        "DIR`).",
        "",
        "| row | model | epochs | last test acc % | best test acc % (epoch) | last test NLL "
        "| best validation acc % (epoch) | last log marglik | calls | precision |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows.values():
        best, val = r["best_test_accuracy"], r["best_validation_accuracy"]
        nll = r["last"].get("test_nll")
        marglik = r["last_log_marglik"]
        lines.append(
            f"| {r['row']} | {r['model']} | {r['epochs']} / {r['epochs_target']}"
            f"{' (finished)' if r['finished'] else ''} | {percent(r['last'].get('test_accuracy'))}"
            f" | {at_epoch(best)} | {'-' if nll is None else f'{nll:.4f}'} | {at_epoch(val)}"
            f" | {'-' if marglik is None else f'{marglik:.0f}'} | {r['calls']} | {r['precision']} |"
        )
    modes = sorted({c.get("pack") for c in payload["calls"] if c.get("pack")})
    lines += [
        "",
        f"Between calls the checkpoints travel as {', '.join(modes) or '-'} "
        "(`benchmarks/paper_gpu.py`): outside `exact` the weights are rounded and SGD's "
        "momentum restarts at each resume, so a row resumed k times is not the "
        "uninterrupted run.",
        "",
        "The card's share (epochs after a warm-up epoch, timed between their ends; an epoch "
        "during which a row started or stopped is left out):",
        "",
        "| rows on the card | row | epochs timed | median s / epoch | mean s / epoch "
        "| rows' epochs / s together | GPU utilisation % | GPU memory MiB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k, phase in phases.items():
        util, mem = phase["gpu_utilisation_pct"], phase["gpu_memory_mib"]
        for name, r in phase["rows"].items():
            lines.append(
                f"| {k} | {name} | {r['epochs']} | {r['median_s']:.2f} | {r['mean_s']:.2f} "
                f"| {phase['epochs_per_s']:.3f} | {'-' if util is None else f'{util:.0f}'} "
                f"| {'-' if mem is None else f'{mem:.0f}'} |"
            )
    if not phases:
        lines.append("| - | no epoch timed | | | | | | |")
    lines += share_lines(phases)
    lines += ["", "The budget:", ""]
    last, rows_only = plan.get("last_call"), plan.get("rows_only_call")
    if last:
        gained = ", ".join(f"{n} {g}" for n, g in last["epochs_gained"].items())
        lines.append(
            f"- The last call ({last['seconds']} s, {last['rows_seconds'] or 0:.0f} s of rows) "
            f"trained {gained} epochs; at that pace the {plan['target_epochs']} epochs take "
            f"{last.get('calls_for_target', '-')} such calls "
            f"({last.get('calls_for_rest', '-')} more)."
        )
    if rows_only:
        lines.append(
            f"- In calls of {rows_only['seconds']:.0f} s with the rows alone, at the slowest "
            f"row's mean of {rows_only['slowest_mean_epoch_s']:.2f} s per epoch with all rows "
            f"on the card ({rows_only['startup_s']:.0f} s start-up, {CALL_OVERHEAD_S:.0f} s "
            f"for wheels and archive), a call trains {rows_only['epochs_per_call']} epochs: "
            f"{rows_only['calls_for_target']} calls for {plan['target_epochs']} epochs "
            f"({rows_only['calls_for_rest']} more)."
        )
    return "\n".join(lines)


def owned_files(json_path: Path) -> set[str]:
    """The row files the last collection wrote (listed in its results JSON)."""
    if not json_path.is_file():
        return set()
    try:
        return set(json.loads(json_path.read_text()).get("files", []))
    except (json.JSONDecodeError, AttributeError):
        return set()


def collect(
    src: Path, results: Path = BENCHMARK_RESULTS, keep: Path | None = None,
    call_seconds: float = 560.0, speed: bool = True,
) -> dict:  # fmt: skip
    """Read a folder that ``tools/gpu_check.sh`` returned and write the rows' metrics
    (``results/paper_gpu/NAME.jsonl``) and their summary (``results/paper_gpu.{json,md}``),
    its ``speed_gpu.{json,md}`` into ``results`` where it holds them (``speed``), and copy
    the archive's parts into ``keep`` (``.gpu_runs/``: ignored, carried by the next call).
    Nothing is written over a file another script or a person wrote."""
    src, results = Path(src), Path(results)
    json_path, md_path = results / "paper_gpu.json", results / "paper_gpu.md"
    row_dir = results / "paper_gpu"
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        names = extract(src, runs)
        calls = read_jsonl(runs / CALLS)
        timings = {name: read_jsonl(timing_path(runs, name)) for name in names}
        rows, files = {}, {}
        for name in names:
            state = load_torch(runs / f"{name}.ckpt.pt")["checkpoint"].get("state", {})
            config = read_json(runs / name / CONFIG, "run's configuration")
            finished = (runs / name / RUN_RESULTS).is_file()
            rows[name] = row_summary(name, config, state, timings[name], finished)
            metrics = state.get("metrics") or read_jsonl(runs / name / METRICS)
            files[f"paper_gpu/{name}.jsonl"] = metrics
        phases = share(runs, timings, calls)
    plan = budget(rows, timings, phases, calls, call_seconds)
    payload = {
        "command": "tools/gpu_check.sh; python -m benchmarks.paper_gpu --collect DIR",
        "card": calls[-1].get("card") if calls else None,
        "calls": calls,
        "rows": rows,
        "share": phases,
        "budget": plan,
        "files": sorted(files),
    }
    # every refusal before anything is written
    owned = owned_files(json_path)
    check_generated(json_path, md_path)
    for rel in files:
        path = results / rel
        if path.exists() and (rel not in owned or not path.is_file()):
            raise FileExistsError(f"{path} was not written by this script; it is not replaced")
    speed_files = [src / "speed_gpu.json", src / "speed_gpu.md"] if speed else []
    speed_files = speed_files if all(p.is_file() for p in speed_files) else []
    if speed_files:
        check_generated(results / "speed_gpu.json", results / "speed_gpu.md")
    row_dir.mkdir(parents=True, exist_ok=True)
    for rel, metrics in files.items():
        save_jsonl(metrics, results / rel)
    write_generated(json_path, payload, md_path, markdown(payload))
    if speed_files:
        text = speed_files[1].read_text().rstrip()
        text = text.removesuffix(GENERATED).rstrip()
        speed_payload = json.loads(speed_files[0].read_text())
        write_generated(results / "speed_gpu.json", speed_payload, results / "speed_gpu.md", text)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for old in keep.glob(PART_PREFIX + "*"):
            old.unlink()
        for part in archive_parts(src):
            shutil.copyfile(part, keep / part.name)
        print(f"kept the runs archive in {keep}/ for the next call's carry")
    return payload


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collect", metavar="DIR", help="a folder tools/gpu_check.sh returned")
    parser.add_argument("--results-dir", default=str(BENCHMARK_RESULTS))
    parser.add_argument(
        "--keep", default=str(Path(__file__).resolve().parents[1] / ".gpu_runs"),
        help="where --collect keeps the archive for the next call's carry ('' : nowhere)",
    )  # fmt: skip
    parser.add_argument("--call-seconds", type=float, default=560.0,
                        help="a rows-only call's budget, for the estimate of calls")  # fmt: skip
    parser.add_argument("--no-speed", action="store_true",
                        help="leave the returned speed_gpu.{json,md} out of --collect")  # fmt: skip
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="train one row, resuming it where RUNS holds it")
    run.add_argument("name", choices=ROWS)
    run.add_argument("runs")
    run.add_argument("--data-dir")
    run.add_argument("--device", default="cuda")
    run.add_argument("--precision", default="fp32")
    run.add_argument("--epochs", type=int, default=PAPER_EPOCHS)
    run.add_argument("--profile", default="paper", choices=list(PROFILES))
    run.add_argument("--call", default=time.strftime("%Y%m%dT%H%M%S"))
    run.add_argument("--launched", type=float, help="when the process was launched (Unix s)")
    pk = sub.add_parser("pack", help="write RUNS as an archive's parts into OUT")
    pk.add_argument("runs")
    pk.add_argument("out")
    pk.add_argument("--mode", default="auto", choices=("auto", *PACK_MODES))
    pk.add_argument("--max-mib", type=float, default=MAX_ARCHIVE_MIB)
    pk.add_argument("--part-mib", type=float, default=15.0)
    pk.add_argument("--call-json", help="this call's record for calls.jsonl (a JSON object)")
    up = sub.add_parser("unpack", help="an archive (its parts' folder, or a file) into RUNS")
    up.add_argument("src")
    up.add_argument("runs")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_row(args)
    if args.command == "pack":
        call = json.loads(args.call_json) if args.call_json else None
        pack(Path(args.runs), Path(args.out), args.mode, args.max_mib, args.part_mib, call)
        return 0
    if args.command == "unpack":
        unpack(Path(args.src), Path(args.runs))
        return 0
    if args.collect:
        keep = Path(args.keep) if args.keep else None
        payload = collect(
            Path(args.collect), Path(args.results_dir), keep, args.call_seconds, not args.no_speed
        )
        print(markdown(payload))
        return 0
    parser.error("give --collect DIR or a command (run, pack, unpack)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
