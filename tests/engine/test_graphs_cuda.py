"""ella.engine.graphs on a GPU: a run whose steps are captured as a CUDA graph ends where the
eager run of the same steps ends, and a step that cannot be captured runs eagerly. Skipped
without CUDA; ``tools/gpu_check.sh`` runs them (``-k cuda``).

The tolerance is zero: with cuDNN's deterministic kernels (:func:`deterministic`) two
eager runs on a GPU end bit for bit alike, and a captured step runs the same kernels on
the same numbers as the step run eagerly. The eager run compared is the graph's own
steps, never captured (the same optimiser arithmetic); for SGD it is also the plain
``--cuda-graph off`` run, since the fused update the graph needs equals the ``foreach``
one bit for bit. Adam's capturable update computes its step size on the device in
float32 where the plain one computes it on the host in float64, and this network's Adam
turns such rounding into steps of about the learning rate (a gradient that is zero by the
group's symmetry up to rounding is normalised to a unit step), so a captured Adam run is
no closer to an eager ``off`` run than two eager runs with nondeterministic kernels are
to each other; it is held to the eager run of its own arithmetic.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from ella.engine.graphs import StepGraph
from ella.train import TrainConfig, Trainer, TrainingDivergedError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class StopRunError(Exception):
    pass


@pytest.fixture
def deterministic():
    """cuDNN's deterministic kernels (and torch's deterministic algorithms where they
    exist), so that two runs of the same steps end bit for bit alike."""
    cudnn = torch.backends.cudnn.deterministic
    algorithms = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.backends.cudnn.deterministic = cudnn
    torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)


def run_config(**overrides) -> TrainConfig:
    # 400 images in batches of 48: 8 full batches (3 warm-up steps, a capture, 4 replays)
    # and a partial one of 16 per epoch; a round after every epoch, on a subset of 100
    # with the training passes' traces
    values = dict(
        train_size=400, test_size=200, width=1, epochs=3, batch_size=48, n_epochs_burnin=1,
        marglik_frequency=1, marglik_subset_size=100, progress=False, device="cuda",
    )  # fmt: skip
    values.update(overrides)
    return TrainConfig(**values)


def stopped_and_resumed(config: TrainConfig, out, captured: bool = True) -> tuple[Trainer, dict]:
    """Two epochs, stopped, then the third resumed from the checkpoint by a new trainer
    (which reseeds torch, so runs are compared stopped and resumed alike); ``captured``
    False: the graph's steps, never captured (a warm-up that does not end)."""

    def stop_after_two(trainer):
        if trainer.state.epoch == 2:
            raise StopRunError

    def made(**options) -> Trainer:
        trainer = Trainer(config, out, **options)
        if trainer.step_graph is not None and not captured:
            trainer.step_graph.warmup = 10**9
        return trainer

    with pytest.raises(StopRunError):
        made(on_epoch_end=stop_after_two).run()
    trainer = made()
    return trainer, trainer.run(resume=True)


def assert_same_run(a: Trainer, b: Trainer, results_a: dict, results_b: dict) -> None:
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(a.log_prior, b.log_prior)
    # every epoch's losses, evidence and test metrics (as written: NaN reads as NaN)
    assert json.dumps(a.state.metrics) == json.dumps(b.state.metrics)
    assert torch.equal(a.output_trace, b.output_trace)
    for key in ("test_accuracy", "test_nll", "log_marglik", "prior_precision"):
        assert results_a[key] == results_b[key], key


@pytest.mark.parametrize("options", [{}, {"optimizer": "sgd", "lr": 0.02}, {"precision": "bf16"}])
def test_a_captured_run_equals_its_steps_run_eagerly_on_cuda(tmp_path, deterministic, options):
    """Three epochs with a round after each (each capturing again), the last resumed from
    the checkpoint, captured against the same steps run eagerly: bit for bit."""
    config = run_config(cuda_graph="on", **options)
    eager, expected = stopped_and_resumed(config, tmp_path / "eager", captured=False)
    assert eager.step_graph.captures == 0
    captured, results = stopped_and_resumed(config, tmp_path / "graph")
    graph = captured.step_graph
    assert graph.failed is None and (graph.captures, graph.replays) == (1, 5)
    assert_same_run(eager, captured, expected, results)
    if options.get("optimizer") == "sgd":  # the plain run's foreach update, too
        plain, plain_results = stopped_and_resumed(
            run_config(cuda_graph="off", **options), tmp_path / "plain"
        )
        assert plain.step_graph is None
        assert_same_run(plain, captured, plain_results, results)


def test_a_captured_step_equals_the_same_step_eager_on_cuda():
    """The graph against the same capturable Adam run eagerly (a graph that never gets
    past its warm-up): the same kernels, so the same numbers to float32's rounding."""

    def trained(warmup: int) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).cuda()
        adam = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
        graph = StepGraph([adam], "cuda", warmup=warmup)

        def step(x, y):
            adam.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            adam.step()
            return {"loss": loss.detach()}

        g = torch.Generator().manual_seed(1)
        for i in range(20):
            x, y = torch.randn(32, 20, generator=g), torch.randint(5, (32,), generator=g)
            adam.param_groups[0]["lr"].fill_(1e-2 / (1 + i))
            graph(step, x.cuda(), y.cuda())
        assert graph.captures == (1 if warmup < 20 else 0)
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(trained(3), trained(10**6), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_an_uncapturable_step_runs_eagerly_on_cuda(capsys):
    graph = StepGraph([], "cuda", warmup=1)
    x = torch.arange(6.0, device="cuda")

    def step(t):  # reads the device from the host: refused by the capture
        return {"sum": t.sum() * float(t.max())}

    for _ in range(3):
        assert graph(step, x)["sum"].item() == 75.0
    assert graph.failed is not None and graph.captures == 0
    assert capsys.readouterr().err.count("could not be captured") == 1
    assert (x + 1).sum().item() == 21.0  # the device works on


def test_a_non_finite_step_in_the_graph_is_named_on_cuda(tmp_path):
    """The finite-watch and its step count run inside the graph: weights poisoned after
    epoch 1 (no rounds, so epoch 2 replays epoch 1's graph) are found at the end of epoch
    2, which names its first step, the tenth of the run."""

    def poison(trainer):
        with torch.no_grad():
            next(trainer.model.parameters()).fill_(float("nan"))

    config = run_config(cuda_graph="on", learn_priors=False)
    trainer = Trainer(config, tmp_path, on_epoch_end=poison)
    with pytest.raises(TrainingDivergedError, match="became nan at epoch 2, step 10;"):
        trainer.run()
    assert (trainer.step_graph.captures, trainer.step_graph.replays) == (1, 13)
