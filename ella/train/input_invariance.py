"""``ella train --invariance``: the input invariance a run is given, as one part.

:class:`InputInvariance` holds what learning an input invariance adds to the alternating
loop: the :class:`~ella.invariance.InvariantClassifier` around the network, each epoch's
transformation samples, the training loss's Augerino term, the optimiser of the extents
``eta``, and the evidence rounds taken as Adam steps through the invariant model's
differentiable evidence (LILA: Immer et al., NeurIPS 2022; Augerino: Benton et al.,
NeurIPS 2020). :class:`~ella.train.Trainer` is given one where ``--invariance`` is not
``none``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.utils.data import TensorDataset
from tqdm.auto import tqdm

from ella.choices import InvarianceMethod
from ella.distributed import batch_sizes
from ella.engine.epochs import Stream, epoch_generator
from ella.invariance import InvarianceEvidence, InvariantClassifier, eta_as_dict
from ella.invariance.affine import FULL_EXTENTS, eta_from_mapping
from ella.learner import PriorLearner
from ella.train.alternating import Batch
from ella.train.config import TrainConfig

__all__ = ["InputInvariance"]


class InputInvariance:
    """The invariant classifier of a run and what learning its extents adds to the loop.

    Args:
        config: the run's configuration (``invariance`` other than ``none``, its
            generators, samples, ``eta`` start and rate, Augerino weight, evidence images).
        net: the network, on ``device``; the classifier averages its logits over sampled
            transformations of the input.
        device: where the run trains.

    Attributes:
        model: the :class:`~ella.invariance.InvariantClassifier` around ``net``.
        eta_optimizer: Adam on ``model.eta`` where the extents are learned (``learned``
            by the evidence, ``augerino`` by the training loss), else ``None``.
    """

    def __init__(self, config: TrainConfig, net: nn.Module, device: torch.device):
        if config.invariance == InvarianceMethod.NONE:
            raise ValueError("InputInvariance needs --invariance other than none")
        self.config = config
        if config.invariance == InvarianceMethod.FULL:
            eta = eta_from_mapping(FULL_EXTENTS)
        else:
            eta = torch.full((6,), config.eta_init)
        self.model = InvariantClassifier(
            net,
            generators=config.generators,
            eta=eta,
            n_samples=config.invariance_samples,
            eval_samples=config.invariance_eval_samples,
            seed=config.seed,
        ).to(device)
        self.device = device
        if self.learns_eta:
            self.model.eta.requires_grad_()
        self.eta_optimizer = (
            torch.optim.Adam([self.model.eta], lr=config.lr_eta) if self.learns_eta else None
        )

    @property
    def learns_eta(self) -> bool:
        """Whether the extents are learned (by the evidence or by Augerino's loss)."""
        return self.config.invariance in (InvarianceMethod.LEARNED, InvarianceMethod.AUGERINO)

    @property
    def learned_by_evidence(self) -> bool:
        """Whether the evidence rounds learn the extents (``learned``)."""
        return self.config.invariance == InvarianceMethod.LEARNED

    @property
    def augerino(self) -> bool:
        """Whether the extents are learned by the training loss (Augerino)."""
        return self.config.invariance == InvarianceMethod.AUGERINO

    def eta(self) -> dict[str, float]:
        """The current extents per generator (zeros for inactive generators)."""
        return eta_as_dict(self.model.eta * self.model.mask)

    # ------------------------------------------------------------------ the training steps
    def epoch_transformations(self, epoch: int, n_train: int) -> Iterator[torch.Tensor]:
        """The transformation samples of ``epoch``'s batches in turn, drawn up front from the
        epoch's generator (the draws of drawing them batch by batch) and moved to the device
        in one copy."""
        cfg = self.config
        generator = epoch_generator(cfg.seed, epoch, Stream.TRANSFORMATIONS)
        sizes = batch_sizes(n_train, cfg.batch_size)
        return iter(self.model.sample_eps_batches(sizes, cfg.invariance_samples, generator))

    def predict(self, batch: Batch) -> torch.Tensor:
        """Training-mode logits averaged over the batch's transformations; the extents get
        the loss's gradient under Augerino only."""
        eta = self.model.eta if self.augerino else self.model.eta.detach()
        return self.model(batch.x, eps=batch.eps, eta=eta)

    def regularised(self, loss: torch.Tensor) -> torch.Tensor:
        """Augerino's loss rewards wider ranges; the other methods' is the loss itself."""
        if not self.augerino:
            return loss
        return loss - self.config.augerino_reg * (self.model.eta * self.model.mask).norm()

    def step_optimizers(self, optimizer: torch.optim.Optimizer) -> list[torch.optim.Optimizer]:
        """The optimisers a training step takes: the weights', and Augerino's of ``eta``."""
        return [optimizer, self.eta_optimizer] if self.augerino else [optimizer]

    # ------------------------------------------------------------------ the evidence rounds
    def evidence_images(self, train: TensorDataset) -> tuple[torch.Tensor, torch.Tensor]:
        """Training images of the invariance evidence (the first ``invariance_marglik_size``)."""
        x, y = train.tensors
        n = min(self.config.invariance_marglik_size, len(x))
        return x[:n].to(self.device), y[:n].to(self.device)

    def evidence(
        self, priors: PriorLearner, train: TensorDataset, generator: torch.Generator
    ) -> tuple[InvarianceEvidence, torch.Tensor]:
        """The differentiable evidence of the invariant model at ``priors``' precisions,
        with fresh transformation noise from ``generator``."""
        cfg = self.config
        evidence = InvarianceEvidence(self.model, priors.prior, ggn=cfg.ggn)
        x, y = self.evidence_images(train)
        eps = self.model.sample_eps(len(x), cfg.invariance_samples, generator).to(self.device)
        value = evidence.log_marginal_likelihood(
            priors.log_prior,
            x,
            y,
            eps,
            n_data=priors.n_data,
            batch_size=cfg.marglik_batch_size,
            generator=generator,
        )
        return evidence, value

    def evidence_round(
        self,
        priors: PriorLearner,
        train: TensorDataset,
        epoch: int,
        check: Callable[[torch.Tensor], None],
        progress: bool = False,
    ) -> tuple[InvarianceEvidence, float]:
        """Adam steps on ``eta`` (if learned by the evidence) and the log priors (if
        learned) through the invariant model's evidence, each step on fresh transformation
        samples (the Kronecker factors depend on ``eta``); ``check`` refuses a non-finite
        value. Returns the round's evidence and its log evidence after the steps."""
        cfg = self.config
        generator = epoch_generator(cfg.seed, epoch, Stream.INVARIANCE_EVIDENCE)
        learned_eta = self.learned_by_evidence
        leaves = ([self.model.eta] if learned_eta else []) + (
            [priors.log_prior] if cfg.learn_priors else []
        )
        steps = tqdm(
            range(cfg.n_hypersteps), desc="evidence steps", leave=False, disable=not progress
        )
        for _ in steps:
            _, value = self.evidence(priors, train, generator)
            check(value)
            grads = torch.autograd.grad(-value / priors.n_data, leaves)
            for leaf, grad in zip(leaves, grads, strict=True):
                leaf.grad = grad
            if learned_eta:
                self.eta_optimizer.step()
            if cfg.learn_priors:
                priors.optimizer.step()
            steps.set_postfix(marglik=f"{float(value.detach()):.1f}")
        with torch.no_grad():
            evidence, value = self.evidence(priors, train, generator)
        check(value)
        return evidence, float(value)
