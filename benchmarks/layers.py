"""Size and speed of the relaxed layers on CPU, and the FC path's Kronecker structure.

Part 1: parameters and forward+backward time per batch for FC-only, CONV-only,
GCONV-only and mixed mixers on 1x32x32 images (the issue's figures).

Part 2: the FC path as one linear map per channel (ella's choice) against one
``nn.Linear`` on block-diagonal inputs (the reference's layout), on the same
weights: forward+backward time, number of Kronecker-factor entries, and the
time of a KFAC Laplace fit plus one log marginal likelihood (ASDL backend).
All timings of a part run in one process, so compare ratios, not seconds.

    python -m benchmarks.layers        # about 30 s on 2 CPU cores
"""

from __future__ import annotations

import argparse
import time

import torch
from laplace import KronLaplace
from laplace.curvature import AsdlGGN
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

from ella.cli.demo import PATH_SETS, time_forward_backward
from ella.marglik import PerChannelView
from ella.marglik.laplace_internals import kron_factors
from ella.models import mixer
from ella.nn import FCPath, per_module_calls
from studies.results import BENCHMARK_RESULTS, environment, write_results


class BlockDiagonalFC(nn.Module):
    """The reference layout of the factorised FC map, for comparison only.

    Stage 1 is one ``nn.Linear(C_i S_in, C_o)`` applied to the block-diagonal
    input (B, C_i, C_i S_in); stage 2 one ``nn.Linear(C_o C_i, S_out)`` applied
    to the block-diagonal (B, C_o, C_o C_i). Same function and parameter count
    as :class:`ella.nn.FCPath` (copied weights), different Kronecker factors.
    """

    def __init__(self, path: FCPath):
        super().__init__()
        ci, co = path.pixel_maps.channels, path.channel_maps.channels
        s_in = path.pixel_maps.in_features
        s_out = path.channel_maps.out_features
        self.ci, self.co, self.out_shape = ci, co, (path.out_channels, *path.out_size)
        self.stage1 = nn.Linear(ci * s_in, co, bias=False)
        self.stage2 = nn.Linear(co * ci, s_out)
        with torch.no_grad():
            u, v, bias = path.pixel_maps.weight, path.channel_maps.weight, path.channel_maps.bias
            self.stage1.weight.copy_(u.transpose(0, 1).reshape(co, ci * s_in))
            self.stage2.weight.copy_(v.transpose(0, 1).reshape(s_out, co * ci))
            self.stage2.bias.copy_(bias[0])
            # ella has one bias per (channel, pixel); the block layout one per pixel.
            bias.copy_(bias[:1].expand_as(bias))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b = z.shape[0]
        x = z.reshape(b, self.ci, -1)
        eye = torch.eye(self.ci, dtype=z.dtype)
        x = (eye[None, :, :, None] * x[:, None]).reshape(b, self.ci, -1)  # block diagonal
        t = self.stage1(x).transpose(1, 2)  # (B, C_o, C_i)
        eye = torch.eye(self.co, dtype=z.dtype)
        t = (eye[None, :, :, None] * t[:, None]).reshape(b, self.co, -1)
        out = self.stage2(t)  # (B, C_o, S_out)
        return out.reshape(b, z.shape[1], *self.out_shape)


class FCProbe(nn.Module):
    """FC layer followed by a linear head, so a Laplace fit has a classifier."""

    def __init__(self, fc: nn.Module, features: int, classes: int = 10):
        super().__init__()
        self.fc, self.head = fc, nn.Linear(features, classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(z).mean(dim=(-2, -1)).flatten(1))


def laplace_seconds(model: nn.Module, z: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
    """Seconds for a KFAC fit plus one log marglik, and the number of factor entries."""
    loader = DataLoader(TensorDataset(z, y), batch_size=128)
    start = time.perf_counter()
    network = PerChannelView(model).sync()  # one nn.Linear per FC map
    la = KronLaplace(network, "classification", backend=AsdlGGN)
    with per_module_calls(network):  # ASDL hooks module calls
        la.fit(loader, progress_bar=False)
    la.log_marginal_likelihood()
    seconds = time.perf_counter() - start
    entries = sum(f.numel() for block in kron_factors(la) for f in block)
    return seconds, entries


def part_models(batch: int) -> list[dict]:
    rows = []
    x = torch.randn(batch, 1, 32, 32)
    for label, paths in tqdm(PATH_SETS.items(), desc="mixers"):
        model = mixer(1, 10, 32, group="C4", paths=paths, width=2)
        rows.append(
            {
                "model": label,
                "parameters": sum(p.numel() for p in model.parameters()),
                "fwd_bwd_ms": 1e3 * time_forward_backward(model, x, repeats=5),
            }
        )
    base = next(r["fwd_bwd_ms"] for r in rows if r["model"] == "CONV")
    for r in rows:
        r["time_vs_conv"] = r["fwd_bwd_ms"] / base
    return rows


def part_fc_structure(size: int, channels: int, samples: int) -> list[dict]:
    rows = []
    z = torch.randn(samples, 4, channels, size, size)
    y = torch.randint(0, 10, (samples,))
    path = FCPath(channels, channels, size, "C4")
    variants = {"per-channel (ella)": path, "block-diagonal (reference)": BlockDiagonalFC(path)}
    for label, fc in tqdm(variants.items(), desc="FC structure"):
        probe = FCProbe(fc, 4 * channels)
        seconds, entries = laplace_seconds(probe, z, y)
        rows.append(
            {
                "structure": label,
                "fwd_bwd_ms": 1e3 * time_forward_backward(probe, z[:128], repeats=5),
                "kfac_entries": entries,
                "kfac_fit_and_marglik_s": seconds,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--fc-size", type=int, default=16, help="image side for part 2")
    parser.add_argument("--fc-channels", type=int, default=4, help="channels per copy, part 2")
    parser.add_argument("--fc-samples", type=int, default=512, help="Laplace fit samples")
    args = parser.parse_args()
    torch.manual_seed(0)
    start = time.time()
    models = part_models(args.batch_size)
    fc = part_fc_structure(args.fc_size, args.fc_channels, args.fc_samples)
    payload = {
        "profile": "cpu",
        "command": "python -m benchmarks.layers",
        "settings": vars(args),
        "environment": environment(),
        "wall_time_s": time.time() - start,
        "models": models,
        "fc_structure": fc,
    }
    md = [
        "# Relaxed layers: size and speed",
        "",
        f"`{payload['command']}` on {payload['environment']['device']}, "
        f"{payload['environment']['threads']} threads, {payload['environment']['date']}.",
        "",
        f"Mixers on 1x32x32, group C4, width 2, batch {args.batch_size}, forward+backward "
        "(median of 5):",
        "",
        "| model | parameters | fwd+bwd [ms] | time / CONV |",
        "|---|---:|---:|---:|",
        *[
            f"| {r['model']} | {r['parameters']:,} | {r['fwd_bwd_ms']:.1f} | "
            f"{r['time_vs_conv']:.2f} |"
            for r in models
        ],
        "",
        f"FC path layouts, {args.fc_channels} channels x 4 copies, "
        f"{args.fc_size}x{args.fc_size} -> same size, KFAC over {args.fc_samples} samples:",
        "",
        "| layout | fwd+bwd [ms] | KFAC factor entries | KFAC fit + marglik [s] |",
        "|---|---:|---:|---:|",
        *[
            f"| {r['structure']} | {r['fwd_bwd_ms']:.1f} | {r['kfac_entries']:,} | "
            f"{r['kfac_fit_and_marglik_s']:.2f} |"
            for r in fc
        ],
        "",
    ]
    write_results("layers", payload, "\n".join(md), BENCHMARK_RESULTS)
    print("\n".join(md))


if __name__ == "__main__":
    main()
