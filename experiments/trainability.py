"""Why the MAP mixers train slowly: an ablation of one short training budget.

Every variant trains from the same seed on the same images with the same
number of optimiser steps (plain cross-entropy, no prior, no evidence), and is
scored by test accuracy; the plain ``cnn`` baseline runs as the yardstick. The
variants change one thing at a time against the default mixer (width 2, C4,
28x28, Adam lr 1e-3, batch 128):

* the path mix (FC+CONV+GCONV, FC, CONV, GCONV);
* width, learning rate and the group (a trivial-group CONV mixer is a plain
  8-layer CNN);
* a normalisation before each layer's ReLU (``instance``: the mixer's
  ``norm="instance"``, per sample and channel over group copies and pixels, which
  keeps exact equivariance and per-example independence; ``batch``: batch
  statistics per channel, inserted by wrapping the layers, a diagnostic only,
  since it couples the examples of a batch);
* fixed instead of adaptive polyphase downsampling;
* the head standardised on the first 512 training images at initialisation
  (:meth:`ella.models.Mixer.standardise_head`, ``ella train --head-init data``).

``python -m experiments.trainability`` (profile ``cpu``: 5000 MNIST training
images, 2000 test images, 200 steps) writes ``experiments/results/trainability.{json,md}``;
finished variants are kept in ``.trainability_cpu.partial.json`` there so that an
interrupted run continues. Accuracies are comparable within one profile; the
seconds are wall-clock on whatever else the machine was doing.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ella.data.datasets import ImageData, load_dataset
from ella.io import save_json
from ella.models import mixer
from ella.models.baselines import cnn
from ella.nn import RelaxedLayer
from ella.nn import paths as path_module
from ella.train.config import HEAD_INIT_IMAGES
from studies.results import EXPERIMENT_RESULTS, environment, write_generated
from studies.runner import default_data_dir

PROFILES = {
    "cpu": dict(train_size=5000, test_size=2000, steps=200),
    "smoke": dict(train_size=64, test_size=32, steps=2),
}


@dataclass(frozen=True)
class Variant:
    """One network and optimiser setting (everything else is the profile's)."""

    name: str
    model: str = "mixer"  # "mixer" or "cnn"
    paths: tuple[str, ...] = ("fc", "conv", "gconv")
    width: int = 2
    group: str = "C4"
    lr: float = 1e-3
    norm: str = "none"  # "none", "instance" or "batch"
    downsample: str = "adaptive"  # "adaptive" or "fixed"
    head_init: str = "default"  # "default" or "data" (Mixer.standardise_head)


VARIANTS = (
    Variant("cnn baseline", model="cnn"),
    Variant("mixer FC+CONV+GCONV"),
    Variant("mixer FC", paths=("fc",)),
    Variant("mixer CONV", paths=("conv",)),
    Variant("mixer GCONV", paths=("gconv",)),
    Variant("CONV, fixed downsampling", paths=("conv",), downsample="fixed"),
    Variant("CONV, lr 3e-3", paths=("conv",), lr=3e-3),
    Variant("CONV, instance norm", paths=("conv",), norm="instance"),
    Variant("CONV, batch norm (diagnostic)", paths=("conv",), norm="batch"),
    Variant("CONV, trivial group, width 8", paths=("conv",), group="trivial", width=8),
    Variant("GCONV, width 4", paths=("gconv",), width=4),
    Variant("GCONV, instance norm, lr 3e-3", paths=("gconv",), norm="instance", lr=3e-3),
    Variant("FC+CONV+GCONV, instance norm", norm="instance"),
    Variant("GCONV, head standardised", paths=("gconv",), head_init="data"),
    Variant("FC+CONV+GCONV, head standardised", head_init="data"),
    Variant(
        "GCONV, instance norm, lr 3e-3, head standardised",
        paths=("gconv",),
        norm="instance",
        lr=3e-3,
        head_init="data",
    ),
    Variant(
        "FC+CONV+GCONV, instance norm, lr 3e-3, head standardised",
        norm="instance",
        lr=3e-3,
        head_init="data",
    ),
)


class BatchNormalisedLayer(nn.Module):
    """``relu(normalise(layer_without_relu(z)))`` with batch statistics, a diagnostic.

    Shapes: (B, G, C, H, W) -> (B, G, C', H', W'); normalises over (B, G, H, W)
    per channel, which couples the examples of a batch (so KFAC's per-example
    evidence does not apply). ``instance`` is the library's own ``norm="instance"``.
    """

    def __init__(self, layer: RelaxedLayer, eps: float = 1e-5):
        super().__init__()
        layer.activation = False
        self.layer, self.eps = layer, eps
        self.dims = (0, 1, 3, 4)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.layer(z)
        mean = out.mean(self.dims, keepdim=True)
        var = out.var(self.dims, keepdim=True, unbiased=False)
        return torch.relu((out - mean) / torch.sqrt(var + self.eps))


def build(variant: Variant, data: ImageData) -> nn.Module:
    if variant.model == "cnn":
        return cnn(data.in_channels, data.num_classes, data.image_size, width=variant.width)
    model = mixer(
        data.in_channels,
        data.num_classes,
        data.image_size,
        group=variant.group,
        paths=variant.paths,
        width=variant.width,
        norm="instance" if variant.norm == "instance" else "none",
    )
    if variant.head_init == "data":
        model.standardise_head(data.train.tensors[0][:HEAD_INIT_IMAGES])
    if variant.norm == "batch":
        for name, layer in model.layers.items():
            setattr(model, name, BatchNormalisedLayer(layer))
    return model


def fixed_downsample(z: torch.Tensor) -> torch.Tensor:
    """Stride-2 subsampling that always keeps the (0, 0) polyphase component."""
    return z[..., ::2, ::2]


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    batches = zip(x.split(500), y.split(500), strict=True)
    correct = sum(int((model(xb).argmax(1) == yb).sum()) for xb, yb in batches)
    model.train()
    return correct / len(x)


def run_variant(variant: Variant, data: ImageData, steps: int, batch_size: int, seed: int) -> dict:
    """Train ``steps`` Adam steps on random batches; the loss curve and test accuracy."""
    torch.manual_seed(seed)
    model = build(variant, data)
    optimiser = torch.optim.Adam(model.parameters(), lr=variant.lr)
    generator = torch.Generator().manual_seed(seed)
    x, y = data.train.tensors
    losses = []
    original = path_module.downsample_by
    if variant.downsample == "fixed":
        path_module.downsample_by = lambda z, how: fixed_downsample(z)
    start = time.perf_counter()
    try:
        for _ in range(steps):
            idx = torch.randint(len(x), (batch_size,), generator=generator)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
        seconds = time.perf_counter() - start
        acc = accuracy(model, *data.test.tensors)
    finally:
        path_module.downsample_by = original
    window = max(1, steps // 8)
    return {
        **asdict(variant),
        "parameters": sum(p.numel() for p in model.parameters()),
        "first_loss": sum(losses[:window]) / window,
        "last_loss": sum(losses[-window:]) / window,
        "test_accuracy": acc,
        "seconds": seconds,
    }


def markdown(rows: list[dict], settings: dict) -> str:
    lines = [
        "# Trainability of the MAP mixers: one short budget, one change at a time",
        "",
        f"{settings['train_size']} MNIST training images, {settings['test_size']} test images, "
        f"{settings['steps']} Adam steps of batch {settings['batch_size']}, seed "
        f"{settings['seed']}, plain cross-entropy (no prior). Loss: mean over the first and "
        "the last eighth of the steps. Command: `python -m experiments.trainability`. "
        "Seconds are wall-clock and only comparable when nothing else ran.",
        "",
        "| variant | parameters | first loss | last loss | test accuracy | seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['parameters']:,} | {r['first_loss']:.3f} | "
            f"{r['last_loss']:.3f} | {100 * r['test_accuracy']:.1f}% | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="cpu")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--results-dir", default=str(EXPERIMENT_RESULTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--variants", nargs="*", default=None, help="names of variants to run (default: all)"
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    names = {v.name for v in VARIANTS}
    unknown = sorted(set(args.variants or ()) - names)
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {sorted(names)}")
    chosen = [v for v in VARIANTS if args.variants is None or v.name in args.variants]
    dataset = "mnist" if args.data_dir else "mnist_subset"  # "": the embedded subset
    data = load_dataset(dataset, args.data_dir, profile["train_size"], profile["test_size"])
    settings = {**profile, "batch_size": args.batch_size, "seed": args.seed, "dataset": dataset}
    results = Path(args.results_dir)
    partial = results / f".trainability_{args.profile}.partial.json"
    done = {}
    if partial.is_file():
        saved = json.loads(partial.read_text())
        if saved.get("settings") == settings:
            done = {r["name"]: r for r in saved["rows"]}
    rows = []
    for variant in chosen:
        row = done.get(variant.name)
        # compare as JSON values: a stored row holds lists where the variant has tuples
        if row is None or row != {**row, **json.loads(json.dumps(asdict(variant)))}:
            row = run_variant(variant, data, profile["steps"], args.batch_size, args.seed)
            print(
                f"{variant.name}: test accuracy {100 * row['test_accuracy']:.1f}% "
                f"(loss {row['first_loss']:.2f} -> {row['last_loss']:.2f}, "
                f"{row['seconds']:.0f} s)",
                flush=True,
            )
        rows.append(row)
        done[variant.name] = row
        save_json({"settings": settings, "rows": list(done.values())}, partial)
    payload = {"settings": settings, "environment": environment(), "rows": rows}
    name = "trainability" if args.profile == "cpu" else f"trainability_{args.profile}"
    write_generated(
        results / f"{name}.json", payload, results / f"{name}.md", markdown(rows, settings)
    )


if __name__ == "__main__":
    main()
