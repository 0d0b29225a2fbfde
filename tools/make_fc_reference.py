"""Write tests/marglik/fc_reference.pt: a small mixer's weights, outputs and evidence.

The weights are stored in the layout in which the FC paths held one ``nn.Linear`` per
channel (``pixel_maps.<i>.weight``, ``channel_maps.<o>.weight``/``.bias``), so that the
file is both an old checkpoint to convert and the reference that the stacked layout
must reproduce: logits, every Kronecker factor of the native backend, the log evidence,
its gradient in the log prior precisions, and the effective parameters per tensor
(each factor sketched, :func:`sketch`).

    python tools/make_fc_reference.py   # run with the per-channel layout checked out
"""

from __future__ import annotations

from pathlib import Path

import torch

from ella.learner.report import effective_parameter_report
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.native import NativeGGN
from ella.models.mixer import mixer

OUT = Path(__file__).resolve().parent.parent / "tests" / "marglik" / "fc_reference.pt"
SETTINGS = {
    "c4": dict(group="C4", width=1, fc_rank=1),
    "trivial_rank2": dict(group="trivial", width=1, fc_rank=2),
}


def sketch(factor: torch.Tensor) -> torch.Tensor:
    """A factor (d, d) as its product with a fixed random vector (d,), its trace appended:
    equal sketches at float tolerance are equal factors but for a chance cancellation."""
    probe = torch.randn(
        factor.shape[-1], generator=torch.Generator().manual_seed(1), dtype=factor.dtype
    )
    return torch.cat([factor @ probe, factor.diagonal().sum()[None]])


def reference(name: str, options: dict) -> dict:
    torch.manual_seed(0)
    model = mixer(1, 10, 8, **options).double()
    x = torch.randn(24, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 10, (24,))
    model.eval()
    with torch.no_grad():
        logits = model(x)
    ggn = NativeGGN(model, "classification")
    _, kron = ggn.kron(x, y, N=24)
    prior = PriorStructure(model)
    evidence = LaplaceEvidence(model, prior, backend="native", ggn="exact")
    evidence.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), 12))
    log_prior = torch.linspace(-1.0, 1.0, prior.n_groups, dtype=torch.float64)
    log_prior.requires_grad_(True)
    value = evidence.log_marginal_likelihood(log_prior)
    (grad,) = torch.autograd.grad(value, log_prior)
    report = effective_parameter_report(model, evidence, log_prior.detach().exp())
    return {
        "options": {k: str(v) if not isinstance(v, int) else v for k, v in options.items()},
        "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
        "x": x,
        "y": y,
        "logits": logits,
        "factors": [[sketch(f) for f in block] for block in kron.kfacs],
        "groups": list(prior.names),
        "log_prior": log_prior.detach(),
        "log_marglik": value.detach(),
        "grad": grad,
        "layers": [
            {k: v for k, v in row.items() if isinstance(v, int | float | str)}
            for row in report["layers"]
        ],
        "relative": [row["relative"] for row in report["layers"]],
    }


def main() -> None:
    refs = {name: reference(name, options) for name, options in SETTINGS.items()}
    torch.save(refs, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
