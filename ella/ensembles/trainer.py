"""Training ensembles: deep ensembles and repulsive particle ensembles in one loop.

Every step moves all members at once along the (scaled) Wasserstein gradient
of D'Angelo & Fortuin (NeurIPS 2021), divided by the number of training points
``N`` so that it is a per-example objective::

    grad_i = grad_theta_i [ CE_i + weight_decay / 2 ||theta_i||^2 ]
             + repulsion_scale * J_phi(theta_i)^T  sum_j grad k_ij / sum_j k_ij

``CE_i`` is member ``i``'s mean cross-entropy on the minibatch (the likelihood
part of the driving force ``-grad log p(theta_i | D) / N``), ``phi`` the
kernel's features (:mod:`ella.ensembles.kernels`) and the last factor the
analytic repulsion force, pulled back by one vector-Jacobian product. With
``method="de"`` the repulsion is off and the members are independent deep
ensemble members (Lakshminarayanan et al. 2017). ``repulsion_scale=1/N`` is
WGD on the posterior; the default ``1/batch_size`` is the FoRDE reference
implementation's weighting (Trinh et al., ICLR 2024).

Data augmentation by a group (Gerken & Kessel, ICML 2024): ``orbit`` trains on
every image together with all its |G| transforms (the "full augmentation" of
their theorem), ``sampled`` on one random element per image and step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ella.choices import EnsembleMethod, GroupAugmentation, Lengthscales
from ella.data import ImageData, load_dataset
from ella.data.datasets import standardisation
from ella.data.transforms import act_per_sample
from ella.distributed import check_batches, current, sharded_batches
from ella.engine.epochs import EpochRun, EpochState, Stream, epoch_generator
from ella.engine.schedule import make_optimizer
from ella.ensembles.config import EnsembleConfig
from ella.ensembles.kernels import (
    LengthscaleMetric,
    normalised_input_gradients,
    repulsion_force,
)
from ella.ensembles.members import Ensemble, init_members
from ella.ensembles.predict import corrupted_metrics, evaluate_ensemble, orbit_metrics
from ella.groups import Group, get_group
from ella.io import save_json
from ella.models.build import build_model
from ella.runtime.system import resolve_device

__all__ = [
    "EnsembleTrainer",
    "augment_with_group",
    "member_features",
    "train_ensemble",
]


def augment_with_group(
    x: torch.Tensor,
    y: torch.Tensor,
    mode: str,
    group: str | Group,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Augment a batch by a group.

    Args:
        x: images (B, C, H, W).
        y: labels (B,).
        mode: ``none``; ``orbit`` (all ``g . x``, identity first, so (|G| B, ...));
            ``sampled`` (``g_b . x_b`` with ``g_b`` uniform on ``G``, drawn from ``generator``).
        group: the group (C4/D4 exact, C<N> interpolated rotations).
        generator: the random numbers of ``sampled`` (torch's global ones where None).

    Returns:
        The augmented images and their labels.
    """
    mode = GroupAugmentation.parse(mode, "augmentation")
    if mode == GroupAugmentation.NONE:
        return x, y
    group = get_group(group)
    if mode == GroupAugmentation.ORBIT:
        images = torch.cat([group.act_on_image(g, x) for g in group.elements])
        return images, y.repeat(group.order)
    elements = torch.randint(group.order, (len(x),), generator=generator)  # sampled
    return act_per_sample(x, group, elements), y


def member_features(
    method: str,
    ensemble: Ensemble,
    x: torch.Tensor,
    y: torch.Tensor,
    metric: LengthscaleMetric | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and the repulsion kernel's features for one minibatch.

    Args:
        method: ``de``, ``weight_rde``, ``function_rde`` or ``forde``.
        ensemble: the members.
        x: images (B, C, H, W).
        y: labels (B,).
        metric: FoRDE lengthscales (default identity).

    Returns:
        ``(logits, phi)``: logits (M, B, K), and features (M, B', D) that depend
        differentiably on the weights: the flattened weights (B' = 1) for
        ``weight_rde``, the flattened class probabilities (B' = 1) for
        ``function_rde``, the metric-mapped unit input gradients of the
        true-class logits (B' = B, D = C H W) for ``forde``; ``phi`` is None for ``de``.
    """
    method, m = EnsembleMethod.parse(method, "method"), len(ensemble)
    if method == EnsembleMethod.FORDE:
        xm = x.expand(m, *x.shape).clone().requires_grad_(True)
        logits = ensemble(xm, per_member=True)
        true = logits.gather(-1, y.expand(m, -1)[..., None]).sum()
        (grads,) = torch.autograd.grad(true, xm, create_graph=True)
        s = normalised_input_gradients(grads)
        return logits, (metric or LengthscaleMetric.identity())(s)
    logits = ensemble(x)
    if method == EnsembleMethod.DE:
        return logits, None
    if method == EnsembleMethod.WEIGHT_RDE:
        return logits, ensemble.flat_parameters()[:, None, :]
    return logits, logits.softmax(-1).reshape(m, 1, -1)  # function_rde


def default_model_fn(config: EnsembleConfig, data: ImageData) -> Callable[[], nn.Module]:
    """The network the configuration names (an ella mixer, or a plain cnn/mlp baseline)."""

    def build() -> nn.Module:
        return build_model(config, data.in_channels, data.num_classes, data.image_size)

    return build


class EnsembleTrainer(EpochRun):
    """Trains an ensemble as configured, writing a run directory (on :class:`EpochRun`).

    Args:
        config: the run's configuration.
        out_dir: run directory (config.json, metrics.jsonl, checkpoint.pt,
            results.json); None: keep nothing on disk.
        model_fn: builds one member (any ``nn.Module`` mapping (B, C, H, W) to
            logits (B, K)); default the network ``config.model`` names. Called once per
            member after ``torch.manual_seed(member seed)``.
        data: the data; default ``load_dataset`` of ``config``.
    """

    def __init__(
        self,
        config: EnsembleConfig,
        out_dir: str | Path | None = None,
        model_fn: Callable[[], nn.Module] | None = None,
        data: ImageData | None = None,
    ):
        config.validate()
        self.config = config
        self.out = Path(out_dir) if out_dir is not None else None
        self.world = current()
        self.device = self.world.device(resolve_device(config.device))
        self.data = data or load_dataset(
            config.dataset, config.data_dir, config.train_size, config.test_size
        )
        model_fn = model_fn or default_model_fn(config, self.data)
        members = init_members(model_fn, config.member_seeds)
        self.ensemble = Ensemble(members, vectorize=config.vectorize).to(self.device)
        self.optimizer = make_optimizer(self.ensemble, config)
        self.metric = self._lengthscale_metric()
        self.n_train = len(self.data.train)
        check_batches(self.n_train, config.batch_size, self.world)
        self.steps_per_epoch = math.ceil(self.n_train / config.batch_size)
        self.repulsion_scale = (
            config.repulsion_scale
            if config.repulsion_scale is not None
            else 1.0 / config.batch_size
        )
        self.state = EpochState()

    def _lengthscale_metric(self) -> LengthscaleMetric | None:
        cfg = self.config
        if cfg.method != EnsembleMethod.FORDE or cfg.lengthscales == Lengthscales.IDENTITY:
            return None
        alpha = 1.0 if cfg.lengthscales == Lengthscales.PCA else cfg.alpha
        return LengthscaleMetric.from_data(self.data.train.tensors[0], alpha=alpha).to(self.device)

    # ------------------------------------------------------------------ data
    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        """The augmented minibatches of an epoch (the same for every member and every run
        with the same ``seed``; reproducible after a resume). In a data-parallel job every
        process augments each global batch alike and keeps its part of it.

        Yields:
            ``(x, y, n_global)``: this process's images and labels, and the size of the
            augmented global batch (``len(y)`` in one process).
        """
        cfg = self.config
        order = epoch_generator(cfg.seed, epoch, Stream.DATA_ORDER)
        augment = epoch_generator(cfg.seed, epoch, Stream.AUGMENTATION)

        def augment_batch(x, y):
            return augment_with_group(x, y, cfg.augment, cfg.augment_group, augment)

        tensors = self.data.train.tensors
        for x, y, n_global, _ in sharded_batches(
            tensors, cfg.batch_size, order, self.world, augment_batch
        ):
            yield x.to(self.device), y.to(self.device), n_global

    # ------------------------------------------------------------------ one step
    def objective_terms(
        self, x: torch.Tensor, y: torch.Tensor, n_global: int | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The three terms whose gradients make the particle update, and the logits.

        Returns:
            ``(terms, logits)``: ``terms["likelihood"]`` (sum over members of the mean
            cross-entropy), ``terms["prior"]`` (the L2 term), ``terms["repulsion"]``
            (``repulsion_scale * sum_i phi_i . force_i`` with the force detached, whose
            gradient is the pulled-back WGD repulsion; absent for ``de``); logits (M, B, K).

        In a data-parallel job, ``x``, ``y`` are this process's shard of a global batch of
        ``n_global`` images, and the terms are this process's share, so that the mean of
        the processes' gradients is the global batch's: the likelihood's
        :meth:`~ella.distributed.World.mean_share`, and the repulsion with the force of
        the features of the whole batch (gathered from every process) times ``size``.
        """
        cfg, m, world = self.config, len(self.ensemble), self.world
        sharded = world.distributed and n_global is not None
        logits, phi = member_features(cfg.method, self.ensemble, x, y, self.metric)
        ce = F.cross_entropy(logits.flatten(0, 1), y.repeat(m), reduction="none")
        likelihood = ce.view(m, -1).mean(1).sum()
        terms = {
            "likelihood": world.mean_share(likelihood, len(y), n_global) if sharded else likelihood
        }
        if cfg.weight_decay > 0:
            theta = self.ensemble.flat_parameters()
            terms["prior"] = 0.5 * cfg.weight_decay * theta.square().sum()
        if phi is not None:
            # features of the images (not the weights): gather them over the processes
            if sharded and cfg.method != EnsembleMethod.WEIGHT_RDE:
                forde = cfg.method == EnsembleMethod.FORDE
                force = self._global_force(phi, n_global, per_image=forde)
                terms["repulsion"] = self.repulsion_scale * (phi * force).sum() * world.size
            else:  # one process, or the weights (the same on every process)
                terms["repulsion"] = self.repulsion_scale * (phi * repulsion_force(phi)).sum()
        return terms, logits

    def _global_force(self, phi: torch.Tensor, n_global: int, per_image: bool) -> torch.Tensor:
        """This process's part of the repulsion force of the whole batch's features: FoRDE's
        ``phi`` (M, b, D) holds one row per image; function-RDE's (M, 1, b K) the images'
        probabilities side by side."""
        world = self.world
        sizes = world.shard_sizes(n_global)
        width = 1 if per_image else phi.shape[2] // sizes[world.rank]
        dim = 1 if per_image else 2
        sizes = [n * width for n in sizes]
        force = repulsion_force(world.gather(phi, dim, sizes))
        return force.narrow(dim, sum(sizes[: world.rank]), sizes[world.rank])

    def loss(
        self, x: torch.Tensor, y: torch.Tensor, n_global: int | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The surrogate whose gradient is the particle update, and its parts.

        Returns:
            ``(surrogate, parts)``: ``surrogate.backward()`` leaves in every
            member's ``.grad`` the WGD direction of the module docstring; ``parts`` holds
            the members' mean likelihood term (``"loss"``) and their mean number of correct
            predictions (``"correct"``), as 0-dim tensors on the device (nothing is read
            back to the host).
        """
        terms, logits = self.objective_terms(x, y, n_global)
        m = len(self.ensemble)
        parts = {
            "loss": terms["likelihood"].detach().double() / m,
            "correct": (logits.detach().argmax(-1) == y).sum().double() / m,
        }
        return sum(terms.values()), parts

    def gradient_norms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Norm of each objective term's gradient over all members' weights (a diagnostic:
        how strongly the repulsion acts next to the likelihood)."""
        terms, _ = self.objective_terms(x, y)
        params = list(self.ensemble.parameters())
        norms = {}
        for name, term in terms.items():
            grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
            flat = [g.reshape(-1) for g in grads if g is not None]
            norms[name] = float(torch.cat(flat).norm()) if flat else 0.0
        return norms

    divergence_hint = "Try a smaller --lr or --repulsion-scale."

    def train_epoch(self) -> dict[str, float]:
        """Train all members one epoch; the row has ``train_loss``, ``train_accuracy``
        (the members' means) and ``lr``."""
        self.ensemble.train()
        world, epoch = self.world, self.state.epoch
        bar = tqdm(
            self.batches(epoch),
            total=self.steps_per_epoch,
            desc=f"epoch {epoch + 1}",
            leave=False,
            disable=not self.progress,
        )

        def step(batch: tuple[torch.Tensor, torch.Tensor, int]):
            x, y, n_global = batch
            surrogate, parts = self.loss(x, y, n_global)
            self.take_step(
                surrogate,
                x,
                [self.optimizer],
                what="ensemble loss",
                before_step=lambda: world.average_gradients(self.ensemble.parameters()),
            )
            share = parts["loss"] * n_global / world.size  # of the global batch's sum
            return {"loss": share, "correct": parts["correct"]}, len(y)

        sums = self.pass_over(bar, step)
        seen = sums["seen"]
        return {
            "train_loss": sums["loss"] / seen,
            "train_accuracy": sums["correct"] / seen,
            "lr": sums["lr"],
        }

    # ------------------------------------------------------------------ persistence
    def checkpoint_entries(self) -> dict:
        """The members' state dicts and the optimiser's."""
        return {
            "members": self.ensemble.member_state_dicts(),
            "optimizer": self.optimizer.state_dict(),
        }

    def restore_entries(self, ckpt: dict) -> None:
        """Load the members' and the optimiser's state dicts."""
        self.ensemble.load_member_state_dicts(ckpt["members"])
        self.optimizer.load_state_dict(ckpt["optimizer"])

    # ------------------------------------------------------------------ run
    def postfix(self, row: dict) -> dict[str, str]:
        """The training loss and accuracy (an ensemble's row has no ``train_nll``)."""
        return {"loss": f"{row['train_loss']:.3f}", "acc": f"{row['train_accuracy']:.3f}"}

    def run(self, resume: bool = False, evaluate: bool = True, overwrite: bool = False) -> dict:
        """Train to the configured number of epochs; evaluate and write ``results.json``.

        ``resume`` and ``overwrite`` as for :meth:`ella.train.Trainer.run` (a finished
        run's results are returned as they are, with ``"finished": True``).
        """
        cfg = self.config
        desc = f"{cfg.method} x{cfg.members}"
        with self.owning():
            finished = self.finished_results(resume)
            if finished is not None:
                return {**finished, "finished": True}
            seconds = self.run_epochs(desc, resume=resume, overwrite=overwrite)
            if evaluate and self.world.is_main:  # the members are the same on every process
                return self.evaluate(seconds)
        return {"train_time_s": seconds}

    def evaluate(self, train_seconds: float = float("nan")) -> dict:
        """Test metrics, corrupted-test metrics and (with ``osp_group``) orbit metrics."""
        cfg = self.config
        x, y = self.data.test.tensors
        results = {"test": evaluate_ensemble(self.ensemble, x, y)}
        if cfg.corruption_severities:
            stats = standardisation(self.data.name)
            results["corrupted"] = corrupted_metrics(
                self.ensemble, x, y, stats, tuple(cfg.corruption_severities), seed=cfg.seed
            )
        if cfg.osp_group is not None:
            results["orbit"] = orbit_metrics(self.ensemble, x, cfg.osp_group)
        results.update(
            members=len(self.ensemble),
            method=cfg.method,
            parameters_per_member=sum(p.numel() for p in self.ensemble.parameters())
            // len(self.ensemble),
            train_size=self.n_train,
            test_size=len(y),
            epochs=self.state.epoch,
            train_time_s=train_seconds,
            config=cfg.to_dict(),
        )
        if self.out is not None:
            save_json(results, self.out / "results.json")
        return results


def train_ensemble(
    config: EnsembleConfig, out_dir: str | Path | None = None, resume: bool = False, **kwargs
) -> dict:
    """Train and evaluate as configured; returns the contents of ``results.json``."""
    return EnsembleTrainer(config, out_dir, **kwargs).run(resume=resume)
