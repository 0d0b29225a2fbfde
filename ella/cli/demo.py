"""``ella demo``: a tour of the relaxed layers (size, speed and invariance per path set)."""

from __future__ import annotations

import argparse
import time

import torch

from ella.choices import DEFAULT_GROUP, LayerGroup
from ella.models import mixer

PATH_SETS: dict[str, tuple[str, ...]] = {
    "FC": ("fc",),
    "CONV": ("conv",),
    "GCONV": ("gconv",),
    "FC+CONV+GCONV": ("fc", "conv", "gconv"),
}


def time_forward_backward(model: torch.nn.Module, x: torch.Tensor, repeats: int = 3) -> float:
    """Median seconds of one forward + backward pass of ``model`` on ``x`` (after a warm-up)."""
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        model(x).logsumexp(dim=1).sum().backward()
        if i:
            times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return sorted(times)[len(times) // 2]


def cmd_demo(args: argparse.Namespace) -> int:
    """Build FC, CONV, GCONV and mixed networks and show size, speed and invariance."""
    torch.manual_seed(args.seed)
    x = torch.randn(args.batch_size, args.channels, args.image_size, args.image_size)
    print(
        f"ella mixer on {args.channels}x{args.image_size}x{args.image_size} inputs, "
        f"group {args.group}, width {args.width}, batch {args.batch_size}, "
        f"{torch.get_num_threads()} CPU threads"
    )
    header = f"{'paths':<15}{'parameters':>12}{'fwd+bwd [ms]':>14}{'max |f(gx)-f(x)|':>19}"
    print(header)
    print("-" * len(header))
    for label, paths in PATH_SETS.items():
        model = mixer(
            args.channels, 10, args.image_size, group=args.group, paths=paths, width=args.width
        )
        n = sum(p.numel() for p in model.parameters())
        seconds = time_forward_backward(model, x)
        err = model.invariance_error(x[:8])
        print(f"{label:<15}{n:>12,}{seconds * 1e3:>14.1f}{err:>19.2e}")
    print("GCONV-only networks are exactly invariant; FC and CONV paths break the symmetry.")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella demo [--image-size S] [--channels C] [--group G] [--width W] ...``."""
    demo = sub.add_parser("demo", help="tour of the relaxed-equivariant layers")
    demo.add_argument("--image-size", type=int, default=32, help="image side (default 32)")
    demo.add_argument("--channels", type=int, default=1, help="image channels (default 1)")
    demo.add_argument(
        "--group",
        default=DEFAULT_GROUP.value,
        choices=LayerGroup.values(),
        help=f"group of the layers (default {DEFAULT_GROUP.value})",
    )
    demo.add_argument("--width", type=int, default=2, help="channel multiplier (default 2)")
    demo.add_argument("--batch-size", type=int, default=128, help="batch size (default 128)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=cmd_demo)
