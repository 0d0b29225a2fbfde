"""``--precision`` and ``--compile``: a bf16 or compiled run of ``ella train`` matches the
float32 eager run on the CPU within stated tolerances, and a compiler that fails leaves a
message and an eager run."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from ella.engine import arithmetic
from ella.engine.arithmetic import CompiledOrEager, StepArithmetic
from ella.train import TrainConfig, Trainer

#: a bf16 run's test NLL and learned prior precisions against the fp32 run's (relative):
#: bfloat16 keeps 8 bits of mantissa, and two epochs of 3 steps compound its rounding
BF16_NLL_TOL, BF16_PRIOR_TOL = 0.05, 0.1
#: a compiled run's against the eager run's (relative): the same operations, fused
COMPILE_TOL = 1e-5


def small(**options) -> TrainConfig:
    return TrainConfig(
        train_size=64, test_size=32, width=1, batch_size=32, epochs=2, n_epochs_burnin=1,
        marglik_frequency=1, marglik_subset_size=32, progress=False, **options,
    )  # fmt: skip


def run(tmp_path, name: str, **options) -> tuple[Trainer, dict]:
    trainer = Trainer(small(**options), tmp_path / name)
    return trainer, trainer.run()


def close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol)


def test_bf16_runs_its_products_in_bfloat16_and_matches_fp32(tmp_path):
    _, fp32 = run(tmp_path, "fp32")
    trainer = Trainer(small(precision="bf16"), tmp_path / "bf16")
    seen = []
    trainer.net.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    bf16 = trainer.run()
    # the training steps' outputs were bfloat16; the evidence's and the test metrics' not
    assert torch.bfloat16 in seen and torch.float32 in seen
    assert close(bf16["test_nll"], fp32["test_nll"], BF16_NLL_TOL)
    for group, value in fp32["prior_precision"].items():
        assert close(bf16["prior_precision"][group], value, BF16_PRIOR_TOL), group
    assert all(p.dtype == torch.float32 for p in trainer.net.parameters())


def test_tf32_flags_hold_inside_the_steps_only():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    steps = StepArithmetic("tf32", "cpu")
    with steps.arithmetic():
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    with StepArithmetic("fp32", "cpu").arithmetic():
        assert not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="torch.compile on the CPU needs a C++ compiler",
)
def test_a_compiled_run_matches_the_eager_run(tmp_path):
    _, eager = run(tmp_path, "eager", model="mlp")
    trainer, compiled = run(tmp_path, "compiled", model="mlp", compile=True)
    assert isinstance(trainer.train_model, CompiledOrEager)
    assert trainer.train_model.compiled is not None  # it compiled, it did not fall back
    for key in ("test_accuracy", "test_nll"):
        assert close(compiled[key], eager[key], COMPILE_TOL), key
    for group, value in eager["prior_precision"].items():
        assert close(compiled["prior_precision"][group], value, COMPILE_TOL), group


def test_a_failing_compiler_leaves_a_message_and_an_eager_run(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise RuntimeError("no C++ compiler found\nsecond line")

    monkeypatch.setattr(arithmetic.torch, "compile", lambda module, **options: refuse)
    _, eager = run(tmp_path, "eager", model="mlp")
    trainer, fallen = run(tmp_path, "fallen", model="mlp", compile=True)
    err = capsys.readouterr().err
    assert err.count("torch.compile failed (RuntimeError: no C++ compiler found)") == 1
    # said once, before the first compiled step (which may take minutes on a CPU)
    assert err.count("--compile: compiling the training step with torch.compile") == 1
    assert err.index("compiling the training step") < err.index("torch.compile failed")
    assert trainer.train_model.compiled is None
    assert fallen["test_nll"] == eager["test_nll"]
    assert fallen["prior_precision"] == eager["prior_precision"]
