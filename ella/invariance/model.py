"""A wrapper that makes any image classifier approximately invariant to affine transformations."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ella.invariance.affine import GENERATORS, generator_indices, transform_images

__all__ = ["InvariantClassifier"]


class InvariantClassifier(nn.Module):
    """``f(x) = E_T[g(T x)]`` with ``T = expm(sum_i eps_i eta_i G_i)``, ``eps ~ U[-1, 1]^6``.

    The expectation is estimated with ``S`` Monte-Carlo samples per image and
    the *logits* are averaged, as in LILA (Immer et al., NeurIPS 2022);
    Augerino averages log-probabilities instead. Averaging logits keeps the
    predictor a single linear read-out of ``g``'s last layer, which the
    Kronecker-factored evidence (:mod:`ella.invariance.kfac`) needs.

    ``eta`` is a buffer, not a parameter: ``model.parameters()`` are those of
    ``net`` only, so weight optimisers and weight priors never see it. It is
    learned by the marginal likelihood (or by Augerino's loss) through the
    trainer, which makes it a leaf tensor with ``requires_grad``.

    Args:
        net: classifier ``g`` mapping (B, C, H, W) to logits (B, K).
        generators: names of the active generators (see
            :data:`ella.invariance.affine.GENERATORS`); the others are fixed at 0.
        eta: initial extents, a float for every active generator or a (6,) tensor.
        n_samples: ``S`` in training mode.
        eval_samples: ``S`` in eval mode (default ``2 * n_samples``).
        seed: seed of the transformation samples in eval mode, so that
            evaluation is deterministic.
    """

    def __init__(
        self,
        net: nn.Module,
        generators: Sequence[str] = GENERATORS,
        eta: float | torch.Tensor = 0.0,
        n_samples: int = 8,
        eval_samples: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        if int(n_samples) < 1 or (eval_samples is not None and int(eval_samples) < 1):
            raise ValueError(
                f"the number of transformation samples must be at least 1, got "
                f"n_samples={n_samples}, eval_samples={eval_samples}"
            )
        self.net = net
        self.n_samples = int(n_samples)
        self.eval_samples = int(eval_samples) if eval_samples is not None else 2 * self.n_samples
        self.seed = int(seed)
        mask = torch.zeros(len(GENERATORS))
        mask[generator_indices(list(generators))] = 1.0
        self.register_buffer("mask", mask)
        eta = torch.as_tensor(eta, dtype=torch.float32)
        if eta.dim() == 0:
            eta = eta.expand(len(GENERATORS))
        if eta.shape != (len(GENERATORS),):
            raise ValueError(f"eta must be a float or a ({len(GENERATORS)},) tensor")
        self.register_buffer("eta", (eta * mask).clone())

    @property
    def generators(self) -> list[str]:
        """The names of the active generators, in :data:`GENERATORS` order."""
        return [n for n, m in zip(GENERATORS, self.mask.tolist(), strict=True) if m]

    def sample_eps(
        self, n_images: int, n_samples: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """(n_images * n_samples, 6) coefficients ``U[-1, 1]``, zero for inactive generators."""
        return self.sample_eps_batches([n_images], n_samples, generator)[0]

    def sample_eps_batches(
        self, sizes: list[int], n_samples: int, generator: torch.Generator | None = None
    ) -> list[torch.Tensor]:
        """:meth:`sample_eps` for batches of ``sizes`` images in turn, drawn on the CPU and
        moved to the model's device in one copy (the draws that calling it batch by batch
        makes)."""
        draws = [
            torch.rand(n * n_samples, len(GENERATORS), generator=generator) * 2 - 1 for n in sizes
        ]
        eps = torch.cat(draws).to(self.mask.device) * self.mask
        return list(eps.split([n * n_samples for n in sizes]))

    def transform(self, x: torch.Tensor, eps: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        """The ``S`` transformed copies of each image, image-major: (B S, C, H, W)."""
        if x.dim() != 4:
            raise ValueError(
                f"InvariantClassifier expects images of shape (B, C, H, W), got {tuple(x.shape)}"
            )
        if len(eps) % len(x):
            raise ValueError(f"{len(eps)} rows of eps do not divide among {len(x)} images")
        copies = x.repeat_interleave(len(eps) // len(x), dim=0)
        return transform_images(copies, eps.to(x.dtype) * self.mask.to(x.dtype), eta.to(x.dtype))

    def forward(
        self,
        x: torch.Tensor,
        eps: torch.Tensor | None = None,
        eta: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Averaged logits (B, K).

        Args:
            x: images (B, C, H, W).
            eps: optional (B S, 6) coefficients, image-major; drawn when
                omitted (from the global generator in training mode, from a
                fixed seed in eval mode).
            eta: optional extents (6,) to use instead of the buffer.
        """
        if eps is None:
            samples = self.n_samples if self.training else self.eval_samples
            generator = None if self.training else torch.Generator().manual_seed(self.seed)
            eps = self.sample_eps(len(x), samples, generator)
        eta = self.eta if eta is None else eta
        logits = self.net(self.transform(x, eps, eta))
        return logits.reshape(len(x), len(eps) // len(x), -1).mean(1)

    def extra_repr(self) -> str:
        """The active generators and ``n_samples`` that ``print(module)`` shows."""
        return f"generators={self.generators}, n_samples={self.n_samples}"
