"""Cost of learning the priors: training step, epoch, evidence fits by backend, memory.

All in one process on the default model and data (``TrainConfig()``: the
8-layer FC+CONV+GCONV mixer, width 2, C4, 1000 images of the embedded MNIST
subset at 28x28), measured side by side because these machines are noisy:

* the training step (forward + backward + Adam on a batch of 128), with the
  batched forward (FC paths as ``bmm``, a layer's CONV and GCONV paths as one
  convolution) and with every module called on its own as before
  (``ella.nn.per_module_calls``: separate convolutions),
  and one epoch;
* one evidence fit over the 1000 training images with the native backend
  (exact and MC GGN), timed in turns with the epochs (:func:`paired_native_fits`:
  three rounds of an epoch and a fit of each kind after a warm-up; the median of
  each round's fit / epoch), and with ASDL (exact and MC; one fit each, the
  references, as multiples of the median epoch);
* ELLA / MAP training time at the default schedule, twice: with ``ella train``'s
  defaults (3000 images; each round fits the evidence on 1000 of them drawn
  afresh, the estimator of the subset evidence), which is ``ella_over_map``: the
  median ratio of ``--pairs`` (3) MAP / ELLA pairs run in turns, because one
  pair's ratio moves by +-0.05 with the machine's load; and once on the
  profile's 1000 images (every round fits all of them), which is
  ``ella_over_map_full_evidence``;
* this machine's fp32 matmul GFLOP/s, timed in turns with the training step, and the
  model's FLOPs per step (``torch.utils.flop_counter``), so the fraction of the limit
  the step reaches is printed;
* peak resident memory of one epoch and of one native evidence fit, each in a
  fresh child process (``VmHWM``; a forked child would inherit the parent's).

    python -m benchmarks.speed                 # cpu profile, about 14 minutes on 2 cores
    python -m benchmarks.speed --profile paper # the paper's sizes (60000 images, GPU)
    python -m benchmarks.speed --profile gpu --device cuda --data-dir DIR  # speed_gpu.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from ella.nn import per_module_calls
from ella.train import TrainConfig, Trainer
from studies.results import BENCHMARK_RESULTS, environment, write_results
from studies.runner import median, median_seconds, seconds

PROFILES = {
    # 1000 training images (ella train's default is 3000): an epoch and a full evidence fit
    # see the same images, as the fit / epoch ratio asks (marglik_subset_size None:
    # every fit on all of them, whatever ella train's subset default)
    "cpu": dict(train_size=1000, test_size=500, marglik_subset_size=None),
    "paper": dict(
        dataset="mnist", train_size=None, test_size=None, batch_size=500, marglik_subset_size=1000
    ),
}


#: the runs that give ``ella_over_map``: ella train's own defaults (None: the profile's)
DEFAULT_RUNS = {"cpu": dict(progress=False), "paper": None}


def config_for(profile: str, **overrides) -> TrainConfig:
    values = dict(PROFILES[profile], progress=False)
    values.update(overrides)
    return TrainConfig(**values)


def matmul_gflops(n: int = 2048) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / median_seconds(lambda: a @ b) / 1e9


def step_timing(trainer: Trainer) -> dict:
    """ms per training step (batched FC forward and per-module loop) and FLOPs per step."""
    cfg = trainer.config
    x, y = (
        trainer.data.train.tensors[0][: cfg.batch_size],
        trainer.data.train.tensors[1][: cfg.batch_size],
    )

    def step(layout=nullcontext):
        with layout():
            loss = F.cross_entropy(trainer.model(x), y)
            trainer.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            trainer.optimizer.step()

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss = F.cross_entropy(trainer.model(x), y)
        loss.backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    flop = counter.get_total_flops()
    batched, looped, matmul = [], [], []
    for _ in range(3):  # interleaved rounds, the machine's matmul rate timed beside each
        matmul.append(matmul_gflops())
        batched.append(median_seconds(step))
        looped.append(median_seconds(lambda: step(lambda: per_module_calls(trainer.model))))
    fractions = [flop / b / 1e9 / m for b, m in zip(batched, matmul, strict=True)]
    return {
        "step_ms": 1e3 * min(batched),
        "step_ms_per_module_loop": 1e3 * min(looped),
        "flop_per_step": flop,
        "matmul_gflops_in_turns": matmul,
        # each round's step rate over the matmul rate timed just before it: the machine's
        # speed, which drifts between minutes, cancels
        "step_fraction_of_matmul_in_turns": fractions,
    }


def use_curvature(trainer: Trainer, backend: str, ggn: str) -> None:
    """Make the trainer's next evidence fits use ``backend`` and ``ggn`` (settings of the
    learner's recipe)."""
    trainer.priors.recipe = trainer.priors.recipe.replace(backend=backend, ggn=ggn)


def fit_seconds(trainer: Trainer, backend: str, ggn: str, repeats: int = 3) -> float:
    """Seconds of one evidence fit: the median of ``repeats`` after a warm-up, as the epoch
    is timed (``repeats=0``: one cold fit, for the slow stock backends)."""
    use_curvature(trainer, backend, ggn)
    if repeats:
        return median_seconds(trainer.fit_evidence, repeats=repeats)
    return seconds(trainer.fit_evidence)


def _accumulating_product_flops(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs):
    """``2 n k m`` per matrix of ``self += a @ b`` (``baddbmm_``, ``addmm_``)."""
    return 2 * math.prod(a_shape) * b_shape[-1]


#: the native backend's GGNs whose fits are timed and counted
NATIVE_GGNS = ("exact", "mc", "stratified")


def paired_native_fits(
    trainer: Trainer, rounds: int = 3
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Epochs and native evidence fits timed in turns: each round one epoch, then one fit
    with each GGN (:data:`NATIVE_GGNS`), after a warm-up of each.

    A fit's ratio to an epoch is taken within its round, against the epoch just before
    it, and the median over the rounds is reported: the machine's load drifts over
    minutes, and an epoch median taken apart from the fits moved the ratios by as much
    as the changes they were to measure.

    Returns:
        The median epoch [s], the median fit per ``native_{ggn}`` [s], and the median
        fit / epoch ratio per ``ggn``.
    """
    ggns = NATIVE_GGNS
    trainer.train_epoch()
    for ggn in ggns:
        use_curvature(trainer, "native", ggn)
        trainer.fit_evidence()
    epochs, fits, ratios = [], {g: [] for g in ggns}, {g: [] for g in ggns}
    for _ in range(rounds):
        epoch = seconds(trainer.train_epoch)
        epochs.append(epoch)
        for ggn in ggns:
            use_curvature(trainer, "native", ggn)
            fit = seconds(trainer.fit_evidence)
            fits[ggn].append(fit)
            ratios[ggn].append(fit / epoch)
    return (
        median(epochs),
        {f"native_{g}": median(v) for g, v in fits.items()},
        {g: median(v) for g, v in ratios.items()},
    )


def fit_flops(trainer: Trainer, ggn: str) -> float:
    """FLOPs of one native evidence fit (``torch.utils.flop_counter``: the forward and
    backward passes and the factors' products; the eigendecomposition has no count).

    The counter has no formula for the in-place products the native backend adds its
    factor sums with (``baddbmm_``, ``addmm_``; it counts them as 0), so they are
    given one here.
    """
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    in_place = dict.fromkeys([aten.baddbmm_, aten.addmm_], _accumulating_product_flops)
    use_curvature(trainer, "native", ggn)
    with FlopCounterMode(display=False, custom_mapping=in_place) as counter:
        trainer.fit_evidence()
    return counter.get_total_flops()


def eigendecomposition_seconds(trainer: Trainer) -> float:
    """Wall time of the eigenvalues of the last fit's Kronecker factors (part of every fit)."""
    from ella.marglik.laplace_internals import decompose, kron_eigenvalues

    la = trainer.priors.evidence.laplace
    decompose(la)  # a fresh lazy decomposition: nothing computed yet
    return seconds(lambda: kron_eigenvalues(la))


def timed_run(config: TrainConfig) -> float:
    with tempfile.TemporaryDirectory() as out:
        return seconds(lambda: Trainer(config, out).run())


def paired_runs(config: TrainConfig, pairs: int) -> tuple[list[float], list[float]]:
    """Wall seconds of ``pairs`` MAP runs and as many ELLA runs of ``config``, in
    turns (MAP, ELLA, MAP, ELLA, ...), so that a change in the machine's load
    between runs falls on both kinds alike; ``config`` learns the priors, its MAP
    twin does not."""
    map_config = dataclasses.replace(config, learn_priors=False)
    map_s, ella_s = [], []
    for _ in range(pairs):
        map_s.append(timed_run(map_config))
        ella_s.append(timed_run(config))
    return map_s, ella_s


def child_peak_memory(profile: str, phase: str) -> float:
    """Peak RSS in MiB of a fresh process doing one epoch (``phase="epoch"``) or one
    native evidence fit with the exact or MC GGN (``"fit_exact"``, ``"fit_mc"``)."""
    if phase == "epoch":
        work = "t.train_epoch();"
    else:
        ggn = phase.removeprefix("fit_")
        work = f"use_curvature(t, 'native', {ggn!r}); t.fit_evidence();"
    code = (
        "import tempfile;"
        "from benchmarks.speed import config_for, use_curvature;"
        "from ella.train import Trainer;"
        f"t = Trainer(config_for({profile!r}), tempfile.mkdtemp());"
        + work
        + "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return int(out.strip().splitlines()[-1].split()[1]) / 1024  # kB -> MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=[*sorted(PROFILES), "gpu"], default="cpu")
    parser.add_argument(
        "--pairs",
        type=int,
        default=3,
        help="MAP / ELLA pairs at ella train's defaults, run in turns; ella_over_map is "
        "the median of their ratios (default: 3)",
    )
    # the gpu profile's (benchmarks/speed_gpu.py)
    parser.add_argument("--device", default="cpu", help="gpu profile: torch device (cuda)")
    parser.add_argument("--data-dir", default=None, help="gpu profile: MNIST's folder")
    parser.add_argument(
        "--seconds", type=float, default=300, help="gpu profile: time budget (default: 300)"
    )
    parser.add_argument(
        "--epochs-timed", type=int, default=2, help="gpu profile: epochs timed per variant"
    )
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.profile == "gpu":
        from benchmarks import speed_gpu

        speed_gpu.main(args)
        return
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    torch.manual_seed(0)
    start = time.time()
    base = config_for(args.profile)
    print("steps, and the matmul rate in turns ...", flush=True)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config_for(args.profile), out)
        steps = step_timing(trainer)
        gflops = median(steps["matmul_gflops_in_turns"])
        print("epochs and native evidence fits in turns ...", flush=True)
        epoch, fits, native_ratios = paired_native_fits(trainer)
        for ggn in ("exact", "mc"):  # the references: one cold fit each (minutes)
            print(f"evidence fit asdl {ggn} ...", flush=True)
            fits[f"asdl_{ggn}"] = fit_seconds(trainer, "asdl", ggn, repeats=0)
        print("FLOPs of the native fits ...", flush=True)
        flops = {ggn: fit_flops(trainer, ggn) for ggn in NATIVE_GGNS}
        eig_s = eigendecomposition_seconds(trainer)  # of the last native fit's factors
        n_train = len(trainer.data.train)
    print("MAP and ELLA runs ...", flush=True)
    (map_s,), (ella_s,) = paired_runs(base, pairs=1)
    defaults = DEFAULT_RUNS[args.profile]
    if defaults is None:
        default_cfg, default_map_s, default_ella_s = base, [map_s], [ella_s]
    else:
        print(f"{args.pairs} MAP / ELLA pairs with ella train's defaults ...", flush=True)
        default_cfg = TrainConfig(**defaults)
        default_map_s, default_ella_s = paired_runs(default_cfg, args.pairs)
    default_ratios = [e / m for m, e in zip(default_map_s, default_ella_s, strict=True)]
    memory = {p: child_peak_memory(args.profile, p) for p in ("epoch", "fit_exact", "fit_mc")}
    achieved = steps["flop_per_step"] / (steps["step_ms"] / 1e3) / 1e9
    epoch_flop = steps["flop_per_step"] * n_train / base.batch_size
    payload = {
        "profile": args.profile,
        "command": f"python -m benchmarks.speed --profile {args.profile}",
        "config": base.to_dict(),
        "environment": environment(),
        "matmul_gflops": gflops,
        **steps,
        "step_speedup_over_module_loop": steps["step_ms_per_module_loop"] / steps["step_ms"],
        "step_gflops": achieved,
        "step_fraction_of_matmul": median(steps["step_fraction_of_matmul_in_turns"]),
        "epoch_s": epoch,
        "fit_s": fits,
        "fit_over_epoch_native_exact": native_ratios["exact"],
        "fit_over_epoch_native_mc": native_ratios["mc"],
        "fit_over_epoch_native_stratified": native_ratios["stratified"],
        "fit_over_epoch_asdl_exact": fits["asdl_exact"] / epoch,
        "fit_over_epoch_asdl_mc": fits["asdl_mc"] / epoch,
        # the floor in arithmetic: a fit's FLOPs over an epoch's (step FLOPs x N / batch)
        "fit_flop": {f"native_{g}": f for g, f in flops.items()},
        "fit_flop_over_epoch_flop_native_exact": flops["exact"] / epoch_flop,
        "fit_flop_over_epoch_flop_native_mc": flops["mc"] / epoch_flop,
        "fit_flop_over_epoch_flop_native_stratified": flops["stratified"] / epoch_flop,
        "eigendecomposition_s": eig_s,
        "map_training_s": map_s,
        "ella_training_s": ella_s,
        "ella_over_map_full_evidence": ella_s / map_s,
        "default_run": {
            "train_size": default_cfg.train_size,
            "marglik_subset_size": default_cfg.marglik_subset_size,
            # one entry per pair, in the order run
            "map_training_s": default_map_s,
            "ella_training_s": default_ella_s,
        },
        "ella_over_map": median(default_ratios),
        "ella_over_map_pairs": default_ratios,
        "peak_rss_mib": memory,
        # the exact fit's, the larger ("evidence_fit" in runs before 2026-11-26 was the MC fit's)
        "fit_peak_over_epoch_peak": memory["fit_exact"] / memory["epoch"],
        "fit_peak_over_epoch_peak_mc": memory["fit_mc"] / memory["epoch"],
        "wall_time_s": time.time() - start,
    }
    env, cfg = payload["environment"], base
    rounds = (
        f"each round {cfg.prior_step:g} of the way to its optimum"
        if cfg.prior_update_rule() == "optimum"
        else f"{cfg.n_hypersteps} Adam hypersteps per round"
    )
    rows = [
        (f"training step, batch {cfg.batch_size} [ms]", f"{steps['step_ms']:.0f}"),
        ("same step, every module called on its own (per_module_calls) [ms]",
         f"{steps['step_ms_per_module_loop']:.0f}"),
        ("FLOPs per step [GFLOP]", f"{steps['flop_per_step'] / 1e9:.1f}"),
        ("step throughput [GFLOP/s] (median fraction of the fp32 matmul rate timed in turns)",
         f"{achieved:.1f} ({100 * payload['step_fraction_of_matmul']:.0f}% of {gflops:.0f})"),
        ("one epoch [s]", f"{epoch:.2f}"),
        *[(f"evidence fit, {k.replace('_', ' ')} [s] (/ epoch)",
           f"{v:.1f} ({payload[f'fit_over_epoch_{k}']:.2f})") for k, v in fits.items()],
        *[(f"evidence fit, native {g}: FLOPs / epoch's FLOPs (GFLOP/s of the fit)",
           f"{f / epoch_flop:.2f} ({f / fits[f'native_{g}'] / 1e9:.1f})")
          for g, f in flops.items()],
        ("of each fit: eigenvalues of the Kronecker factors [s] (/ epoch)",
         f"{eig_s:.2f} ({eig_s / epoch:.2f})"),
        (f"MAP training, {n_train} images [s]", f"{map_s:.1f}"),
        (f"ELLA training, {n_train} images, every round on all of them [s] (/ MAP)",
         f"{ella_s:.1f} ({payload['ella_over_map_full_evidence']:.2f})"),
        (f"MAP training, ella train's defaults ({default_cfg.train_size} images) [s], "
         f"{len(default_map_s)} runs", ", ".join(f"{s:.1f}" for s in default_map_s)),
        (f"ELLA training, ella train's defaults (rounds on "
         f"{default_cfg.marglik_subset_size or 'all'} images) [s], each after its MAP run",
         ", ".join(f"{s:.1f}" for s in default_ella_s)),
        ("ELLA / MAP at the defaults: median of the pairs (each pair)",
         f"{payload['ella_over_map']:.2f} ({', '.join(f'{r:.2f}' for r in default_ratios)})"),
        ("peak RSS, one epoch [MiB]", f"{memory['epoch']:.0f}"),
        ("peak RSS, one native exact evidence fit [MiB] (/ epoch)",
         f"{memory['fit_exact']:.0f} ({payload['fit_peak_over_epoch_peak']:.2f})"),
        ("peak RSS, one native MC evidence fit [MiB] (/ epoch)",
         f"{memory['fit_mc']:.0f} ({payload['fit_peak_over_epoch_peak_mc']:.2f})"),
    ]  # fmt: skip
    md = "\n".join(
        [
            "# Cost of learning layer-wise priors",
            "",
            f"`{payload['command']}` on {env['device']} ({env['cpu']}), {env['threads']} "
            f"threads, {env['date']}, {payload['wall_time_s'] / 60:.0f} min. Default model: "
            f"mixer width {cfg.width}, paths {'+'.join(cfg.paths)}, group {cfg.group}, "
            f"{cfg.dataset} ({cfg.train_size or 'all'} training images, 28x28), batch "
            f"{cfg.batch_size}; evidence fits over all training images (batch "
            f"{cfg.marglik_batch_size}); ELLA and MAP runs at the default schedule "
            f"({cfg.epochs} epochs, evidence after epoch {cfg.n_epochs_burnin}+ every "
            f"{cfg.marglik_frequency}, {rounds}, {cfg.backend} "
            f"{cfg.ggn.for_backend(cfg.backend)} GGN, norm {cfg.norm}, lr {cfg.lr:g}).",
            "",
            "| quantity | value |",
            "|---|---:|",
            *[f"| {k} | {v} |" for k, v in rows],
            "",
        ]
    )
    write_results(f"speed_{args.profile}", payload, md, BENCHMARK_RESULTS)
    print(md)
    print(
        json.dumps(
            {k: payload[k] for k in payload if k.startswith(("fit_over", "ella_over", "step_ms"))}
        )
    )


if __name__ == "__main__":
    main()
