"""Speed of the Table 3 ``paper`` profile on a GPU, by arithmetic and compilation.

The model and data are those of ``benchmarks.table3 --profile paper``'s learned
rotated-MNIST row (the C4 FC+CONV+GCONV mixer at width 4, all 60,000 training
images, batches of 500, SGD). In one process, for each variant of
``TrainConfig.precision`` (fp32, tf32, bf16) and ``TrainConfig.compile``:

* the first epoch (compilation included where compiled) and the median of
  ``--epochs-timed`` further epochs, steps per second, the peak GPU memory and
  the last epoch's training accuracy;
* the step throughput in TFLOP/s (``torch.utils.flop_counter`` FLOPs of one
  forward and backward pass on a batch, times the steps of an epoch, over the
  epoch's time), as a fraction of this card's measured matmul rate and of the
  datasheet's dense peak in the variant's own arithmetic.

After the fp32 variant's epochs, one evidence fit is timed (the median of two);
ELLA / MAP at the paper schedule is then computed from the measured epoch and
fit times (no training run is timed). Variants that do not fit in the
``--seconds`` budget are skipped, and one that raises is recorded with its error.

    python -m benchmarks.speed --profile gpu --device cuda --data-dir DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from ella.train import TrainConfig, Trainer
from ella.train.loop import evidence_epochs
from studies.results import BENCHMARK_RESULTS, environment, write_generated, write_results
from studies.table3 import PROFILES, row_config

#: (precision, compile) of each variant, in the order run; the first is the reference
#: whose times set the budget's estimates and on which the FLOPs and the fit are measured
#: (``"tf32", False, True``: with ``torch.backends.cudnn.benchmark``, cuDNN timing its
#: convolution algorithms per shape, which the training steps leave off)
VARIANTS: tuple[tuple[str, bool, bool], ...] = (
    ("fp32", False, False),
    ("bf16", False, False),
    ("bf16", True, False),
    ("tf32", False, False),
    ("tf32", False, True),
)
#: training images of the profiled epoch (:func:`profile_steps`): ten steps of 500
PROFILED_IMAGES = 5000
#: dense TFLOP/s of the datasheets (H100 SXM; the H200 has the same compute), by arithmetic
DATASHEET_PEAKS: dict[str, dict[str, float]] = {
    "H100": {"fp32": 67.0, "tf32": 495.0, "bf16": 989.0},
    "H200": {"fp32": 67.0, "tf32": 495.0, "bf16": 989.0},
}
#: seconds allowed for compilation when estimating whether a compiled variant fits
COMPILE_ALLOWANCE_S = 60.0
#: the issue's targets
TARGET_EPOCH_S, TARGET_FIT_OVER_EPOCH, TARGET_ELLA_OVER_MAP = 2.0, 1.5, 1.15
#: the sizes of ``--smoke`` (a CPU check of this script, on the embedded MNIST subset)
SMOKE = dict(dataset="mnist_subset", train_size=64, test_size=32, batch_size=32, width=1)
SMOKE_MATMUL = 256
MATMUL = 8192
#: the wall seconds in which ``epochs_in_7_minutes`` counts ELLA's epochs
SEVEN_MINUTES = 420.0


def synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    """Wall seconds of ``fn()`` with the device's work finished, and what it returned."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def variant_name(precision: str, compiled: bool, cudnn_benchmark: bool = False) -> str:
    return (
        precision
        + ("+compile" if compiled else "")
        + ("+cudnn.benchmark" if cudnn_benchmark else "")
    )


def profile_steps(cfg: TrainConfig, precision: str) -> dict:
    """Where a training step's time goes: :mod:`torch.profiler` over the second epoch of
    :data:`PROFILED_IMAGES` images (the first warms up): wall and GPU-busy milliseconds per
    step, operators dispatched per step, and the kernels of most GPU time."""
    from torch.profiler import ProfilerActivity, profile

    images = PROFILED_IMAGES if cfg.train_size is None else min(PROFILED_IMAGES, cfg.train_size)
    small = dataclasses.replace(cfg, train_size=images, precision=precision)
    trainer = Trainer(small, tempfile.mkdtemp())
    device = trainer.device
    trainer.train_epoch()
    trainer.state.epoch += 1
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        wall, _ = timed(trainer.train_epoch, device)
    steps = trainer.steps_per_epoch
    events = prof.key_averages()
    gpu = [e for e in events if getattr(e, "device_type", None) is not None
           and str(e.device_type).endswith("CUDA") and e.self_device_time_total > 0]  # fmt: skip
    busy_us = sum(e.self_device_time_total for e in gpu)
    top = sorted(gpu, key=lambda e: -e.self_device_time_total)[:12]
    aten = sum(e.count for e in events if e.key.startswith("aten::"))
    return {
        "variant": precision,
        "steps": steps,
        "wall_ms_per_step": 1000 * wall / steps,
        "gpu_busy_ms_per_step": busy_us / 1000 / steps,
        "aten_ops_per_step": aten / steps,
        "kernels_per_step": sum(e.count for e in gpu) / steps,
        "top_kernels": [
            {"name": e.key[:90], "ms_per_step": e.self_device_time_total / 1000 / steps,
             "calls_per_step": e.count / steps}
            for e in top
        ],
    }  # fmt: skip


def check_config_fields() -> None:
    """Refuse to run before ``TrainConfig`` has the ``precision`` and ``compile`` fields."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    missing = sorted({"precision", "compile"} - names)
    if missing:
        raise SystemExit(
            f"the gpu profile needs TrainConfig fields {', '.join(missing)} (ella/train/"
            "config.py), which this checkout does not have yet"
        )


def matmul_tflops(device: torch.device, n: int, repeats: int = 5) -> dict[str, float]:
    """This device's ``n``-cube matmul rate in TFLOP/s in fp32 (no TF32), TF32 and bf16:
    the median of ``repeats`` after a warm-up; the TF32 flags are restored afterwards."""
    saved = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
    rates = {}
    try:
        for arithmetic, dtype, tf32 in (
            ("fp32", torch.float32, False),
            ("tf32", torch.float32, True),
            ("bf16", torch.bfloat16, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            timed(lambda a=a, b=b: a @ b, device)
            times = [timed(lambda a=a, b=b: a @ b, device)[0] for _ in range(repeats)]
            rates[arithmetic] = 2 * n**3 / statistics.median(times) / 1e12
            del a, b
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32 = saved[1]
    return rates


def datasheet_peaks(device: torch.device) -> dict[str, float] | None:
    """The datasheet's dense peaks of this GPU (:data:`DATASHEET_PEAKS`), or None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((p for key, p in DATASHEET_PEAKS.items() if key in name), None)


def step_flops(trainer: Trainer) -> float:
    """FLOPs of one training step's forward and backward pass on a batch of training data."""
    from torch.utils.flop_counter import FlopCounterMode

    bs = trainer.config.batch_size
    x, y = (t[:bs].to(trainer.device) for t in trainer.data.train.tensors)
    trainer.model.train()
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(trainer.model(x), y).backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def release(device: torch.device) -> None:
    """Free what the last variant left (compiled graphs, cached GPU memory)."""
    torch.compiler.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_variant(
    cfg: TrainConfig, precision: str, compiled: bool, epochs_timed: int
) -> tuple[dict, Trainer]:
    """Build the variant's trainer and time its warm-up epoch and ``epochs_timed`` epochs."""
    device = torch.device(cfg.device)
    build_s, trainer = timed(
        lambda: Trainer(
            dataclasses.replace(cfg, precision=precision, compile=compiled), tempfile.mkdtemp()
        ),
        device,
    )
    device = trainer.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def epoch() -> dict:
        metrics = trainer.train_epoch()
        trainer.state.epoch += 1
        return metrics

    first_s, metrics = timed(epoch, device)
    epochs = []
    for _ in range(epochs_timed):
        seconds, metrics = timed(epoch, device)
        epochs.append(seconds)
    epoch_s = statistics.median(epochs) if epochs else first_s
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    # CompiledOrEager drops its compiled module where compilation failed (said on stderr)
    fell_back = compiled and getattr(trainer.train_model, "compiled", None) is None
    return {
        "compile_fell_back": fell_back,
        "build_s": build_s,
        "first_epoch_s": first_s,
        "epoch_s_each": epochs,
        "epoch_s": epoch_s,
        "steps_per_s": trainer.steps_per_epoch / epoch_s,
        "peak_memory_gib": peak,
        "train_accuracy": metrics["train_accuracy"],
    }, trainer


def fraction(value: float | None, peak: float | None) -> float | None:
    return None if value is None or not peak else value / peak


def measure(
    cfg: TrainConfig, args: argparse.Namespace, variants: tuple[tuple[str, bool, bool], ...]
) -> dict:
    """Run the variants within the budget; the reference's fit and the step's FLOPs."""
    start, device = time.perf_counter(), torch.device(cfg.device)
    measured = matmul_tflops(device, SMOKE_MATMUL if args.smoke else MATMUL)
    datasheet = datasheet_peaks(device)
    rows, reference, out = [], None, {}
    for precision, compiled, cudnn_benchmark in variants:
        name = variant_name(precision, compiled, cudnn_benchmark)
        row: dict = {"variant": name, "precision": precision, "compile": compiled}
        row["cudnn_benchmark"] = cudnn_benchmark
        rows.append(row)
        remaining = args.seconds - (time.perf_counter() - start)
        if args.smoke and compiled:  # inductor takes over a minute on a CPU
            row["skipped"] = "compilation is not part of --smoke"
            continue
        if reference is not None:
            needed = reference["build_s"] + reference["first_epoch_s"]
            needed += args.epochs_timed * reference["epoch_s"]
            needed += COMPILE_ALLOWANCE_S if compiled else 0.0
            if needed > remaining:
                row["skipped"] = f"estimated {needed:.0f} s, {remaining:.0f} s of the budget left"
                continue
        print(f"{row['variant']} ...", flush=True)
        trainer = None
        saved = (
            torch.get_float32_matmul_precision(),
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        )
        torch.backends.cudnn.benchmark = cudnn_benchmark
        try:
            timing, trainer = run_variant(cfg, precision, compiled, args.epochs_timed)
            row.update(timing)
            if reference is None:  # the reference: the fit and the FLOPs on its weights
                reference = row
                fits = [timed(trainer.fit_evidence, trainer.device)[0] for _ in range(2)]
                out |= {"fit_s": statistics.median(fits), "fit_s_each": fits}
                out["fit_variant"] = row["variant"]
                out["flop_per_step"] = step_flops(trainer)
                out["steps_per_epoch"] = trainer.steps_per_epoch
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            row["error"] = f"{type(error).__name__}: {error}"
        finally:
            torch.set_float32_matmul_precision(saved[0])
            torch.backends.cuda.matmul.allow_tf32 = saved[1]
            torch.backends.cudnn.allow_tf32 = saved[2]
            torch.backends.cudnn.benchmark = saved[3]
            del trainer
            release(device)
    if args.seconds - (time.perf_counter() - start) > 0:
        try:
            out["profile"] = profile_steps(cfg, "tf32")
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            out["profile"] = {"error": f"{type(error).__name__}: {error}"}
    flops = out.get("flop_per_step")
    for row in rows:
        if "epoch_s" in row and flops is not None:
            tflops = flops * out["steps_per_epoch"] / row["epoch_s"] / 1e12
            row["tflops"] = tflops
            row["fraction_of_measured_peak"] = fraction(tflops, measured[row["precision"]])
            row["fraction_of_datasheet_peak"] = fraction(
                tflops, datasheet and datasheet[row["precision"]]
            )
    return out | {
        "matmul_tflops_measured": measured,
        "matmul_size": SMOKE_MATMUL if args.smoke else MATMUL,
        "datasheet_peak_tflops": datasheet,
        "variants": rows,
    }


def summarise(cfg: TrainConfig, result: dict) -> dict:
    """Fit / epoch, ELLA / MAP at ``cfg``'s schedule and the issue's claims, from the
    measured times of the fastest variant."""
    done = [r for r in result["variants"] if "epoch_s" in r]
    if not done or "fit_s" not in result:
        return {"claims": {}}
    fastest = min(done, key=lambda r: r["epoch_s"])
    reference = next(r for r in done if r["variant"] == result["fit_variant"])
    epoch, fit = fastest["epoch_s"], result["fit_s"]
    rounds, epochs = len(evidence_epochs(cfg)), cfg.epochs
    ella_over_map = (epochs * epoch + rounds * fit) / (epochs * epoch)
    return {
        "fastest_variant": fastest["variant"],
        "fit_over_epoch": fit / reference["epoch_s"],
        "fit_over_epoch_fastest": fit / epoch,
        "schedule": {
            "epochs": epochs,
            "n_epochs_burnin": cfg.n_epochs_burnin,
            "marglik_frequency": cfg.marglik_frequency,
            "evidence_rounds": rounds,
        },
        "ella_over_map": ella_over_map,
        "epochs_in_7_minutes": SEVEN_MINUTES / (epoch + rounds / epochs * fit),
        "claims": {
            f"an epoch of the paper profile within {TARGET_EPOCH_S:g} s": epoch <= TARGET_EPOCH_S,
            f"evidence fit within {TARGET_FIT_OVER_EPOCH:g} epochs": fit / epoch
            <= TARGET_FIT_OVER_EPOCH,
            f"ELLA / MAP at most {TARGET_ELLA_OVER_MAP:g}": ella_over_map <= TARGET_ELLA_OVER_MAP,
        },
    }


def number(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(scale * value, spec)


def variants_table(rows: list[dict]) -> list[str]:
    lines = [
        "| variant | epoch [s] | first epoch [s] | steps/s | TFLOP/s | % of measured peak "
        "| % of datasheet peak | peak memory [GiB] | train accuracy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "epoch_s" not in r:
            why = f"skipped: {r['skipped']}" if "skipped" in r else f"failed: {r.get('error')}"
            lines.append(f"| {r['variant']} | {why.replace('|', '/')} |" + " |" * 7)
            continue
        name = r["variant"] + (" (fell back to eager)" if r.get("compile_fell_back") else "")
        lines.append(
            f"| {name} | {r['epoch_s']:.2f} | {r['first_epoch_s']:.2f} "
            f"| {r['steps_per_s']:.1f} | {number(r.get('tflops'), '.2f')} "
            f"| {number(r.get('fraction_of_measured_peak'), '.1f', 100)} "
            f"| {number(r.get('fraction_of_datasheet_peak'), '.1f', 100)} "
            f"| {number(r['peak_memory_gib'], '.2f')} | {r['train_accuracy']:.4f} |"
        )
    return lines


def markdown(payload: dict, cfg: TrainConfig) -> str:
    env, s = payload["environment"], payload
    peaks = ", ".join(f"{k} {v:.3g}" for k, v in s["matmul_tflops_measured"].items())
    sheet = s["datasheet_peak_tflops"]
    lines = [
        "# Speed of the Table 3 paper profile on a GPU",
        "",
        f"`{s['command']}` on {env['device']}, torch {env['torch']}, CUDA {s['cuda'] or 'none'}, "
        f"{s['wall_time_s'] / 60:.1f} min. Model and data: {cfg.dataset} "
        f"({cfg.train_size or 'all'} training images), the {cfg.group} mixer with paths "
        f"{'+'.join(cfg.paths)} at width {cfg.width}, batch {cfg.batch_size}, "
        f"{cfg.optimizer}; epochs timed after one warm-up epoch (first epoch: compilation "
        f"included where compiled).",
        "",
        f"Measured {s['matmul_size']}^3 matmul peaks [TFLOP/s]: {peaks}; datasheet dense "
        "peaks [TFLOP/s]: "
        + (", ".join(f"{k} {v:g}" for k, v in sheet.items()) if sheet else "none for this device")
        + ". FLOPs per training step (forward + backward): "
        + number(s.get("flop_per_step"), ".2f", 1e-9)
        + " GFLOP.",
        "",
        *variants_table(s["variants"]),
        "",
    ]
    if "ella_over_map" in s:
        sched = s["schedule"]
        lines += [
            f"Evidence fit ({s['fit_variant']} weights, median of two): {s['fit_s']:.2f} s, "
            f"{s['fit_over_epoch']:.2f} {s['fit_variant']} epochs, "
            f"{s['fit_over_epoch_fastest']:.2f} epochs of the fastest variant "
            f"({s['fastest_variant']}).",
            "",
            f"ELLA / MAP at the paper schedule ({sched['epochs']} epochs, "
            f"{sched['evidence_rounds']} evidence rounds: after epoch "
            f"{sched['n_epochs_burnin']}, every {sched['marglik_frequency']}), computed from "
            f"the measured epoch and fit times of {s['fastest_variant']}, not a timed run: "
            f"{s['ella_over_map']:.3f}; epochs of ELLA training in 7 minutes: "
            f"{s['epochs_in_7_minutes']:.0f}. The rounds' prior updates after each fit are "
            "not included.",
            "",
            "| claim | holds |",
            "|---|---|",
            *[f"| {k} | {'yes' if v else 'no'} |" for k, v in s["claims"].items()],
            "",
        ]
    lines += profile_lines(s.get("profile"))
    return "\n".join(lines)


def profile_lines(profile: dict | None) -> list[str]:
    """The markdown of :func:`profile_steps`' result."""
    if not profile:
        return []
    if "error" in profile:
        return [f"Profile: failed ({profile['error']}).", ""]
    p = profile
    return [
        f"Profile of {p['steps']} {p['variant']} steps (torch.profiler, after a warm-up "
        f"epoch): {p['wall_ms_per_step']:.1f} ms per step, of which the GPU was busy "
        f"{p['gpu_busy_ms_per_step']:.1f} ms; {p['aten_ops_per_step']:.0f} operators and "
        f"{p['kernels_per_step']:.0f} kernels per step. The kernels of most GPU time:",
        "",
        "| kernel | ms per step | calls per step |",
        "|---|---:|---:|",
        *[
            f"| `{k['name'].replace('|', '/')}` | {k['ms_per_step']:.2f} "
            f"| {k['calls_per_step']:.0f} |"
            for k in p["top_kernels"]
        ],
        "",
    ]


def main(args: argparse.Namespace) -> dict:
    """The gpu profile of ``benchmarks.speed`` (``args``: its parsed command line)."""
    check_config_fields()
    torch.manual_seed(0)
    start = time.time()
    ns = argparse.Namespace(data_dir=args.data_dir, seed=0, device=args.device)
    cfg = row_config("rotated_mnist", True, PROFILES["paper"], "full", ns)
    if args.smoke:
        cfg = dataclasses.replace(cfg, **SMOKE)
    command = f"python -m benchmarks.speed --profile gpu --device {args.device}"
    if args.smoke:
        command += " --smoke"
    payload = {
        "profile": "gpu",
        "command": command,
        "config": cfg.to_dict(),
        "environment": environment(args.device),
        "cuda": torch.version.cuda,
        "seconds_budget": args.seconds,
        "epochs_timed": args.epochs_timed,
    }
    result = measure(cfg, args, VARIANTS)
    payload |= result | summarise(cfg, result)
    payload["wall_time_s"] = time.time() - start
    md = markdown(payload, cfg)
    if args.smoke:  # a check of the script: its results go to a temporary folder
        folder = Path(tempfile.mkdtemp(prefix="speed_gpu_smoke_"))
        write_generated(folder / "speed_gpu.json", payload, folder / "speed_gpu.md", md)
    else:
        write_results("speed_gpu", payload, md, BENCHMARK_RESULTS)
    print(md)
    return payload
