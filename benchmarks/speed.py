"""Cost of learning the priors: MAP training vs ELLA training, evidence fit vs epoch, memory.

In one process, on the same model and data (``TrainConfig`` below):

* MAP-only training time (``learn_priors=False``) and ELLA training time at the
  paper's schedule (evidence every 5 epochs, 20 hypersteps) over the same epochs;
* one KFAC evidence fit over the training set against one training epoch,
  and the 20 hypersteps that reuse the fit;
* peak resident memory of a MAP epoch and of an evidence fit, each measured in
  a fresh child process (``VmHWM`` of ``/proc/self/status``; ``ru_maxrss``
  would report the parent's peak, which a forked child inherits), because a
  process's peak only grows. The MAP-only run also fits the evidence once at
  the end, for its effective-parameter report.

Timings are ratios within one process; these machines are noisy.

    python -m benchmarks.speed                 # cpu profile, about 4 minutes on 2 cores
    python -m benchmarks.speed --profile paper # the paper's sizes (60000 images, GPU)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import torch

from benchmarks._common import environment, write_results
from ella.train import TrainConfig, Trainer, evidence_epochs

PROFILES = {
    "cpu": dict(train_size=1000, test_size=500, epochs=10, n_epochs_burnin=5, marglik_frequency=5),
    "paper": dict(
        dataset="mnist",
        train_size=None,
        test_size=None,
        epochs=20,
        n_epochs_burnin=10,
        marglik_frequency=5,
        batch_size=500,
        optimizer="sgd",
        lr=0.1,
    ),
}


def config_for(profile: str, **overrides) -> TrainConfig:
    values = dict(PROFILES[profile], n_hypersteps=20, progress=False)
    values.update(overrides)
    return TrainConfig(**values)


def timed_run(config: TrainConfig) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        Trainer(config, out).run()
        return time.perf_counter() - start


def phase_times(config: TrainConfig) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out)
        start = time.perf_counter()
        trainer.train_epoch()
        epoch = time.perf_counter() - start
        start = time.perf_counter()
        evidence = trainer.fit_evidence()
        fit = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(config.n_hypersteps):
            trainer.hyper_optimizer.zero_grad()
            (-evidence.log_marginal_likelihood(trainer.log_prior)).backward()
            trainer.hyper_optimizer.step()
        hyper = time.perf_counter() - start
    return {"epoch_s": epoch, "evidence_fit_s": fit, "hypersteps_s": hyper}


def child_peak_memory(profile: str, phase: str) -> float:
    """Peak RSS in MiB of a fresh process doing one MAP epoch or one evidence fit."""
    code = (
        "import tempfile;"
        "from benchmarks.speed import config_for;"
        "from ella.train import Trainer;"
        f"t = Trainer(config_for({profile!r}), tempfile.mkdtemp());"
        + ("t.train_epoch();" if phase == "map_epoch" else "t.fit_evidence();")
        + "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return int(out.strip().splitlines()[-1].split()[1]) / 1024  # kB -> MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    start = time.time()
    base = config_for(args.profile)
    print("MAP-only run ...", flush=True)
    map_s = timed_run(config_for(args.profile, learn_priors=False))
    print("ELLA run ...", flush=True)
    ella_s = timed_run(base)
    print("phases ...", flush=True)
    phases = phase_times(base)
    memory = {p: child_peak_memory(args.profile, p) for p in ("map_epoch", "evidence_fit")}
    rounds = len(evidence_epochs(base))
    payload = {
        "profile": args.profile,
        "command": f"python -m benchmarks.speed --profile {args.profile}",
        "config": base.to_dict(),
        "environment": environment(),
        "evidence_rounds": rounds,
        "map_training_s": map_s,
        "ella_training_s": ella_s,
        "ella_over_map": ella_s / map_s,
        **phases,
        "evidence_fit_over_epoch": phases["evidence_fit_s"] / phases["epoch_s"],
        "peak_rss_mib": memory,
        "wall_time_s": time.time() - start,
    }
    cfg = base
    md = "\n".join(
        [
            "# Cost of learning layer-wise priors",
            "",
            f"`{payload['command']}` on {payload['environment']['device']}, "
            f"{payload['environment']['threads']} threads, {payload['environment']['date']}. "
            f"Mixer width {cfg.width}, paths {'+'.join(cfg.paths)}, {cfg.dataset} "
            f"({cfg.train_size or 'all'} training images), {cfg.epochs} epochs, batch "
            f"{cfg.batch_size}; ELLA fits the evidence after epochs "
            f"{cfg.n_epochs_burnin}+ every {cfg.marglik_frequency} ({rounds} rounds, "
            f"{cfg.n_hypersteps} hypersteps each), plus once more for the final report "
            "unless the best-evidence state is the last round's.",
            "",
            "| quantity | value |",
            "|---|---:|",
            f"| MAP-only training (incl. one evidence fit for its report) [s] | {map_s:.1f} |",
            f"| ELLA training [s] | {ella_s:.1f} |",
            f"| ELLA / MAP time | {payload['ella_over_map']:.2f} |",
            f"| one training epoch [s] | {phases['epoch_s']:.2f} |",
            f"| one evidence fit (KFAC over the training set) [s] | "
            f"{phases['evidence_fit_s']:.2f} |",
            f"| evidence fit / epoch | {payload['evidence_fit_over_epoch']:.1f} |",
            f"| {cfg.n_hypersteps} hypersteps reusing the fit [s] | {phases['hypersteps_s']:.2f} |",
            f"| peak RSS, MAP epoch [MiB] | {memory['map_epoch']:.0f} |",
            f"| peak RSS, evidence fit [MiB] | {memory['evidence_fit']:.0f} |",
            "",
        ]
    )
    write_results(f"speed_{args.profile}", payload, md)
    print(md)
    print(json.dumps(payload["peak_rss_mib"]))


if __name__ == "__main__":
    main()
