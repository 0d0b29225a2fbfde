"""ella.engine.graphs: the training step captured as a CUDA graph (``--cuda-graph``).

On the CPU: the option and its refusals, the decision, the optimisers made capturable
and written back in their plain form, and the graph's bookkeeping (warm-up, static
buffers, the eager partial batch, capturing again when the prior changes, the fallback)
with :class:`Recorded`, a stand-in whose "capture" records the step and whose replay runs
it on the static buffers. The capture itself is checked on a GPU
(``tests/engine/test_graphs_cuda.py``).
"""

from __future__ import annotations

import pytest
import torch

from ella.choices import CudaGraph
from ella.engine.graphs import (
    StepGraph,
    eager_reason,
    make_capturable,
    plain_options,
    plain_state_dict,
    use_cuda_graph,
)
from ella.engine.schedule import make_optimizer
from ella.errors import ConfigError
from ella.train import TrainConfig, Trainer

CUDA = torch.device("cuda")  # a device name only: nothing here runs on it


class Recorded(StepGraph):
    """A CPU stand-in for the CUDA graph: capturing records the step without running it,
    as a capture does, and a replay runs it on the static buffers, writing the outputs the
    graph holds in place. The optimisers are left as they are (a CPU Adam is not
    capturable)."""

    def prepare(self) -> None:
        pass

    def _record(self, step, static):
        outputs: dict[str, torch.Tensor] = {}
        return None, outputs, lambda: outputs.update(step(*static))


def tiny_config(**overrides) -> TrainConfig:
    # 40 images in batches of 16: two full batches and a partial one of 8 per epoch
    values = dict(
        train_size=40, test_size=16, width=1, epochs=3, batch_size=16, n_epochs_burnin=1,
        marglik_frequency=1, marglik_subset_size=24, marglik_batch_size=40, progress=False,
    )  # fmt: skip
    values.update(overrides)
    return TrainConfig(**values)


# ---------------------------------------------------------------------- the decision
def test_auto_runs_eagerly_on_the_cpu_and_says_why():
    assert use_cuda_graph("auto", "cpu") == (False, eager_reason("cpu"))
    assert "the device is cpu" in eager_reason("cpu") and "--device cuda" in eager_reason("cpu")
    assert use_cuda_graph(CudaGraph.AUTO, CUDA) == (True, None)
    assert use_cuda_graph("on", CUDA) == (True, None)
    assert use_cuda_graph("off", CUDA) == (False, None)
    assert use_cuda_graph("off", "cpu") == (False, None)


@pytest.mark.parametrize(
    ("rule_out", "said"),
    [
        ({"compiled": True}, "--compile"),
        ({"processes": 2}, "data parallelism over 2 processes"),
        ({"invariant": True}, "--invariance"),
    ],
)
def test_what_rules_a_capture_out(rule_out, said):
    captured, reason = use_cuda_graph("auto", CUDA, **rule_out)
    assert not captured and said in reason
    with pytest.raises(ConfigError, match=f"--cuda-graph on cannot capture.*{said}.*auto"):
        use_cuda_graph("on", CUDA, **rule_out)


def test_the_option_is_parsed_and_refused_when_the_config_is_built():
    assert TrainConfig().cuda_graph == CudaGraph.AUTO
    assert TrainConfig(cuda_graph="off").cuda_graph is CudaGraph.OFF
    assert TrainConfig(device="cuda", cuda_graph="on").cuda_graph is CudaGraph.ON
    with pytest.raises(ConfigError, match="unknown cuda-graph 'yes'; choose from auto, on, off"):
        TrainConfig(cuda_graph="yes")
    with pytest.raises(ConfigError, match=r"the device is cpu.*--device cuda.*auto.*or off"):
        TrainConfig(cuda_graph="on")
    with pytest.raises(ConfigError, match="--compile"):
        TrainConfig(device="cuda", cuda_graph="on", compile=True)
    with pytest.raises(ConfigError, match="--invariance"):
        TrainConfig(device="cuda", cuda_graph="on", invariance="full", augment="none")
    # it does not define the run: a run may resume with another choice
    assert "cuda_graph" not in TrainConfig.run_fields()


def test_auto_on_the_cpu_trains_eagerly_without_a_word(tmp_path, capsys):
    trainer = Trainer(tiny_config(), tmp_path)
    assert trainer.step_graph is None
    assert "cuda-graph" not in capsys.readouterr().err


# ---------------------------------------------------------------------- the optimisers
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_optimiser_made_capturable_and_written_plain(tmp_path, optimizer):
    config = tiny_config(optimizer=optimizer, lr_scaling="none", gconv_lr="same")
    trainer = Trainer(config, tmp_path)
    opt = trainer.optimizer
    x, _ = trainer.train_tensors
    trainer.model(x[:4]).square().mean().backward()
    opt.step()  # the optimiser's state exists
    plain, before = plain_options(opt), opt.state_dict()
    make_capturable(opt, "cpu")
    for group in opt.param_groups:
        assert isinstance(group["lr"], torch.Tensor) and group["lr"].dtype == torch.float32
        if optimizer == "adam":
            assert group["capturable"]
        else:
            assert group["fused"] and not group["foreach"]
    # the schedule fills the tensors in place, outside any graph
    tensors = [group["lr"] for group in opt.param_groups]
    trainer.state.step = 7
    lr = trainer.set_lr(opt)
    for group, tensor in zip(opt.param_groups, tensors, strict=True):
        assert group["lr"] is tensor
        assert tensor.item() == pytest.approx(lr * group.get("lr_scale", 1.0), rel=1e-7)
    make_capturable(opt, "cpu")  # again (after a checkpoint is loaded): the same tensors
    assert all(g["lr"] is t for g, t in zip(opt.param_groups, tensors, strict=True))
    # a checkpoint holds the optimiser as an eager run writes it
    saved = plain_state_dict(opt, plain)
    for group, old in zip(saved["param_groups"], before["param_groups"], strict=True):
        assert {k: group[k] for k in ("capturable", "fused", "foreach") if k in old} == {
            k: old[k] for k in ("capturable", "fused", "foreach") if k in old
        }
        assert isinstance(group["lr"], float)
    assert all(isinstance(g["lr"], torch.Tensor) for g in opt.param_groups)  # left as it is
    for index, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(value, before["state"][index][key]) or key == "step"
            if key == "step":
                assert value.device.type == "cpu" and value == before["state"][index][key]
    fresh = make_optimizer(trainer.model, config)
    fresh.load_state_dict(saved)
    assert plain_options(fresh) == plain


def test_make_capturable_refuses_another_optimiser():
    opt = torch.optim.RMSprop([torch.zeros(2, requires_grad=True)])
    with pytest.raises(TypeError, match="Adam or SGD steps, not RMSprop"):
        make_capturable(opt, "cpu")


# ---------------------------------------------------------------------- the graph
def test_warm_up_capture_replay_and_the_eager_partial_batch():
    calls: list[torch.Tensor] = []
    version = [0]

    def step(x: torch.Tensor) -> dict[str, torch.Tensor]:
        calls.append(x)
        return {"sum": x.sum(), "twice": 2 * x}

    graph = Recorded([], "cpu", version=lambda: version[0], warmup=2)
    batches = [torch.full((4,), float(i)) for i in range(6)]
    for i, x in enumerate(batches[:2]):  # warm-up: eager, on the batch itself
        assert graph(step, x)["sum"] == 4 * i and calls[-1] is x and not graph.captured
    out = graph(step, batches[2])  # captured (not run) and replayed once on a static copy
    assert graph.captured and (graph.captures, graph.replays) == (1, 1)
    assert len(calls) == 3 and calls[-1] is not batches[2] and out["sum"] == 8
    static = calls[-1]
    out = graph(step, batches[3])
    assert calls[-1] is static and torch.equal(static, batches[3])
    assert out["sum"] == 12 and torch.equal(out["twice"], 2 * batches[3])
    out["twice"].zero_()  # a clone: the graph's own output is not the caller's
    assert torch.equal(graph(step, batches[4])["twice"], 2 * batches[4])
    partial = torch.ones(3)
    assert graph(step, partial)["sum"] == 3 and calls[-1] is partial  # another shape: eager
    assert graph(step, batches[5], key="other")["sum"] == 20 and calls[-1] is batches[5]
    assert graph.replays == 3
    version[0] += 1  # the prior changed: released, warmed up and captured again
    assert graph(step, batches[0])["sum"] == 0 and calls[-1] is batches[0]
    assert not graph.captured and graph.captures == 1
    graph(step, batches[1])
    graph(step, batches[2])
    assert graph.captured and graph.captures == 2


def test_a_failed_capture_runs_the_steps_eagerly_with_one_message(capsys):
    class Refused(Recorded):
        def _record(self, step, static):
            raise RuntimeError("operation not permitted when stream is capturing\nmore")

    graph = Refused([], "cpu", warmup=1)
    x = torch.arange(4.0)
    for _ in range(4):
        assert graph(lambda t: {"sum": t.sum()}, x)["sum"] == 6
    assert graph.failed == "RuntimeError: operation not permitted when stream is capturing"
    err = capsys.readouterr().err
    assert err.count("could not be captured") == 1 and "--cuda-graph off" in err


def test_a_graph_needs_a_warm_up_step():
    with pytest.raises(ValueError, match="at least one warm-up step"):
        Recorded([], "cpu", warmup=0)


@pytest.mark.slow
def test_a_run_through_the_graph_machinery_equals_the_eager_one(tmp_path):
    """ella train with the stand-in graph (warm-up, replays on static buffers, the partial
    batch eager, the traces scattered outside, released at each round, the checkpoint in
    plain form, resumed) ends bit for bit where the eager run ends."""

    class StopRunError(Exception):
        pass

    def stop_after_two(trainer):
        if trainer.state.epoch == 2:
            raise StopRunError

    def graphed(trainer: Trainer) -> Trainer:
        # one warm-up step: each epoch of two full batches (and a round after it) captures
        version = lambda: trainer.log_prior._version  # noqa: E731
        trainer.step_graph = Recorded(trainer.step_optimizers(), "cpu", version=version, warmup=1)
        return trainer

    eager = Trainer(tiny_config(), tmp_path / "eager")
    expected = eager.run()
    assert eager.records_traces()  # the training control variate's traces are recorded
    first = graphed(Trainer(tiny_config(), tmp_path / "graph", on_epoch_end=stop_after_two))
    with pytest.raises(StopRunError):
        first.run()
    assert first.step_graph.captures == 2 and first.step_graph.replays > 0
    resumed = graphed(Trainer(tiny_config(), tmp_path / "graph"))
    results = resumed.run(resume=True)
    assert resumed.step_graph.captures == 1
    for key in ("test_accuracy", "test_nll", "log_marglik", "prior_precision"):
        assert results[key] == expected[key], key
    for a, b in zip(eager.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(eager.output_trace, resumed.output_trace)
