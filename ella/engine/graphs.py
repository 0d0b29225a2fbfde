"""The training step captured as a CUDA graph (``ella train --cuda-graph``).

On a GPU the host bounds a step of ella's networks: it launches the forward's, the
backward's, the prior's and the optimiser's many small kernels one by one while the GPU
waits. :class:`StepGraph` records one step (forward, loss, backward, the prior's penalty
and its gradient, the optimiser's update, the finite-watch of
:meth:`~ella.engine.epochs.EpochRun.watch_step`) as a CUDA graph and replays it for
every later batch of the same shape: the host launches the whole step at once. Torch's
"whole-network capture" (``torch.cuda.graphs``), with these choices:

* Static buffers: each batch's inputs, e.g. images (B, C, H, W) and labels (B,), are
  copied into tensors the graph reads, since a graph reads fixed addresses; the step's
  outputs (its loss terms, (), and per-example traces, (B,)) are tensors the graph
  writes, cloned after each replay, so that what sums and scatters them runs outside it.
* The learning rate of every parameter group is a 0-dim float32 tensor on the device,
  filled before each step outside the graph (:meth:`~ella.engine.epochs.EpochRun.set_lr`),
  since a Python float would be a constant of the graph (:func:`make_capturable`).
* Adam runs with ``capturable=True``, which keeps its step counts on the device and
  reads a tensor learning rate there; SGD runs ``fused``, since its ``foreach`` update
  reads a tensor learning rate on the host and the fused kernel reads it on the device.
* The first :data:`WARMUP_STEPS` steps after each (re)start run eagerly on the side
  stream the capture then uses, as torch asks: they make what torch makes lazily at a
  first call (the optimiser's moments, cuBLAS workspaces, the prior's per-tensor scales,
  which are read to the host once per change).
* A batch of another shape than the captured one (the last, partial batch of an epoch)
  runs eagerly: one step per epoch, where a second graph would cost a capture and its
  memory.
* The graph is released and captured again when the prior precisions change (an
  evidence round: the prior's per-tensor scales are constants of the graph; ``version``)
  and after a checkpoint is loaded (the optimiser's state tensors are new:
  :meth:`StepGraph.reset`). Checkpoints hold the optimiser in its plain form
  (:func:`plain_state_dict`), so that a run resumes with or without graphs, on any device.
* A step that cannot be captured (an operation that reads the device from the host, an
  operation the capture refuses) makes the steps run eagerly from then on, with one
  message on stderr naming the error.

:func:`eager_reason` says what rules a capture out before any work: a device other than
CUDA, ``--compile`` (torch.compile makes its own graphs of the forward), several
processes (the gradients' all-reduce between processes is not captured here) and an
input-invariant model (its step reads a batch's transformations and steps a second
optimiser). :func:`use_cuda_graph` applies it to the ``--cuda-graph`` choice; ``ella
train`` says on stderr why ``auto`` trains eagerly on a CUDA device, and nothing on the
CPU, where a graph is not to be had.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence

import torch
from tqdm.auto import tqdm

from ella.choices import CudaGraph
from ella.errors import ConfigError, error_summary

__all__ = [
    "WARMUP_STEPS",
    "StepGraph",
    "eager_reason",
    "make_capturable",
    "plain_options",
    "plain_state_dict",
    "use_cuda_graph",
]

#: eager steps before each capture (torch's documented warm-up count)
WARMUP_STEPS = 3
#: the options of a parameter group that :func:`make_capturable` sets
GRAPH_OPTIONS = ("capturable", "fused", "foreach")

Outputs = dict[str, torch.Tensor]


def eager_reason(
    device: torch.device | str,
    *,
    compiled: bool = False,
    processes: int = 1,
    invariant: bool = False,
) -> str | None:
    """Why a training step on ``device`` cannot be captured as a CUDA graph, or None
    where it can: a device other than CUDA, ``compiled`` (``--compile``), ``processes``
    above 1 (torchrun) or an ``invariant`` model (``--invariance``)."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"the device is {device.type}; CUDA graphs need a CUDA device (--device cuda)"
    if compiled:
        return "--compile compiles the step's forward instead"
    if processes > 1:
        return (
            f"data parallelism over {processes} processes, whose gradient all-reduce is "
            "not captured"
        )
    if invariant:
        return (
            "--invariance: an input-invariant model's step reads its batch's "
            "transformations and steps a second optimiser"
        )
    return None


def use_cuda_graph(
    choice: CudaGraph | str, device: torch.device | str, **rule_outs
) -> tuple[bool, str | None]:
    """Whether the training steps are captured for the ``--cuda-graph`` ``choice``, and
    why not where ``auto`` runs them eagerly (:func:`eager_reason`, given ``device`` and
    ``rule_outs``; None otherwise).

    Raises:
        ConfigError: ``on`` where a capture is ruled out, naming why and the fix.
    """
    choice = CudaGraph.parse(choice, "cuda_graph")
    if choice == CudaGraph.OFF:
        return False, None
    reason = eager_reason(device, **rule_outs)
    if reason is None:
        return True, None
    if choice == CudaGraph.ON:
        raise ConfigError(
            f"--cuda-graph on cannot capture the training step: {reason}. Use --cuda-graph "
            "auto (captured where it can be) or off"
        )
    return False, reason


# ---------------------------------------------------------------------- the optimisers
def plain_options(optimizer: torch.optim.Optimizer) -> list[dict]:
    """The options of each parameter group that :func:`make_capturable` changes, as they
    are (to write checkpoints in that form: :func:`plain_state_dict`)."""
    return [{key: group.get(key) for key in GRAPH_OPTIONS} for group in optimizer.param_groups]


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Make ``optimizer``'s step capturable on ``device``, in place (and again after its
    state was loaded): every group's learning rate a 0-dim float32 tensor there (which
    :meth:`~ella.engine.epochs.EpochRun.set_lr` fills), Adam ``capturable`` with its step
    counts moved there, SGD ``fused``.

    Raises:
        TypeError: an optimiser other than Adam or SGD.
    """
    device = torch.device(device)
    if isinstance(optimizer, torch.optim.Adam):
        options = {"capturable": True}
    elif isinstance(optimizer, torch.optim.SGD):
        options = {"fused": True, "foreach": False}
    else:
        raise TypeError(f"a CUDA graph captures Adam or SGD steps, not {type(optimizer).__name__}")
    for group in optimizer.param_groups:
        group.update(options)
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor) or lr.device != device:
            group["lr"] = torch.tensor(float(lr), dtype=torch.float32, device=device)
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            state["step"] = step.to(device=device, dtype=torch.float32)


def plain_state_dict(optimizer: torch.optim.Optimizer, options: Sequence[dict]) -> dict:
    """``optimizer.state_dict()`` as the optimiser before :func:`make_capturable` would
    write it: each group with its ``options`` (:func:`plain_options`) and its learning
    rate a float, Adam's step counts on the CPU. The optimiser itself is left as it is."""
    saved = optimizer.state_dict()
    groups = []
    for group, plain in zip(saved["param_groups"], options, strict=True):
        lr = group["lr"]
        groups.append({**group, **plain, "lr": float(lr) if isinstance(lr, torch.Tensor) else lr})
    state = {
        index: {
            key: value.detach().to("cpu", torch.float32)
            if key == "step" and isinstance(value, torch.Tensor)
            else value
            for key, value in entries.items()
        }
        for index, entries in saved["state"].items()
    }
    return {**saved, "state": state, "param_groups": groups}


# ---------------------------------------------------------------------- the graph
class StepGraph:
    """A training step captured as a CUDA graph on ``device`` and replayed for every
    batch of the captured shape (the module docstring).

    Call it with the step, a function of the batch's tensors that does the step's device
    work and returns its outputs (0-dim terms, per-example tensors), and those tensors:
    ``graph(step, x, y, key=n)``. ``key`` holds what else the captured step depends on
    (a batch size the step scales by): a call with other shapes or another ``key`` runs
    ``step`` eagerly.

    Args:
        optimizers: the optimisers the step takes, made capturable (:meth:`prepare`).
        device: the CUDA device.
        version: what the captured step's constants depend on (the prior precisions'
            version); the graph is captured again when it changes.
        warmup: eager steps on the side stream before each capture (at least 1).
        announce: whether a failed capture is said on stderr (the main process).
    """

    def __init__(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        device: torch.device | str,
        *,
        version: Callable[[], Hashable] = lambda: None,
        warmup: int = WARMUP_STEPS,
        announce: bool = True,
    ):
        if warmup < 1:
            raise ValueError(f"a capture needs at least one warm-up step, got {warmup}")
        self.optimizers = list(optimizers)
        self.device = torch.device(device)
        self.version = version
        self.warmup = warmup
        self.announce = announce
        #: why capturing failed (the steps then run eagerly), or None
        self.failed: str | None = None
        #: captures and replays so far (a replay is one captured step)
        self.captures = 0
        self.replays = 0
        self._plain = [plain_options(optimizer) for optimizer in self.optimizers]
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._graph: object | None = None
        self._replay: Callable[[], None] | None = None
        self._inputs: list[torch.Tensor] = []
        self._outputs: Outputs = {}
        self._signature: Hashable | None = None
        self._captured_version: Hashable | None = None
        self._warm = 0
        self.prepare()

    # ------------------------------------------------------------------ life cycle
    def prepare(self) -> None:
        """Make the optimisers capturable (:func:`make_capturable`)."""
        for optimizer in self.optimizers:
            make_capturable(optimizer, self.device)

    def release(self) -> None:
        """Drop the graph, its buffers and the gradients it wrote (in its memory pool); the
        next steps warm up and capture again."""
        if self._graph is not None or self._replay is not None:
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
        self._graph = self._replay = None
        self._inputs, self._outputs = [], {}
        self._signature = self._captured_version = None
        self._warm = 0

    def reset(self) -> None:
        """After the optimisers' state was loaded: capturable again, and captured again."""
        self.release()
        self.prepare()

    def state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """The state of one of the optimisers in its plain form (:func:`plain_state_dict`),
        for a checkpoint that resumes with or without graphs."""
        index = next(i for i, o in enumerate(self.optimizers) if o is optimizer)
        return plain_state_dict(optimizer, self._plain[index])

    @property
    def captured(self) -> bool:
        """Whether a graph is held now."""
        return self._replay is not None

    # ------------------------------------------------------------------ steps
    def __call__(
        self,
        step: Callable[..., Outputs],
        *inputs: torch.Tensor,
        key: Hashable = None,
    ) -> Outputs:
        """``step(*inputs)``: replayed from the graph, or run eagerly (warm-up, another
        shape, after a failed capture); the outputs are the step's own tensors either way."""
        if self.failed is not None:
            return step(*inputs)
        if self._replay is not None and self.version() != self._captured_version:
            self.release()
        signature = (tuple((t.shape, t.dtype, t.device) for t in inputs), key)
        if self._signature is None:
            self._signature = signature
        if signature != self._signature:
            return step(*inputs)
        if self._replay is None:
            if self._warm < self.warmup:
                self._warm += 1
                return self._side_stream(step, inputs)
            return self._capture(step, inputs)
        for static, value in zip(self._inputs, inputs, strict=True):
            static.copy_(value)
        return self._run_replay()

    def _run_replay(self) -> Outputs:
        self._replay()
        self.replays += 1
        return {name: value.clone() for name, value in self._outputs.items()}

    def _side_stream(self, step: Callable[..., Outputs], inputs: Sequence[torch.Tensor]):
        """An eager step on the capture's side stream, ordered after and before the
        current stream's work."""
        if self._stream is None:
            return step(*inputs)
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            outputs = step(*inputs)
        current.wait_stream(self._stream)
        return outputs

    def _capture(self, step: Callable[..., Outputs], inputs: Sequence[torch.Tensor]) -> Outputs:
        """Capture ``step`` on static copies of ``inputs`` and replay it once (a capture
        records the step without running it); eagerly, with one message, where that fails."""
        static = [t.detach().clone() for t in inputs]
        version = self.version()
        try:
            graph, outputs, replay = self._record(step, static)
        except Exception as err:  # noqa: BLE001 (whatever the capture raises)
            self._fail(err)
            return step(*inputs)
        self._graph, self._inputs, self._outputs, self._replay = graph, static, outputs, replay
        self._captured_version = version
        self.captures += 1
        return self._run_replay()

    def _record(
        self, step: Callable[..., Outputs], static: list[torch.Tensor]
    ) -> tuple[object, Outputs, Callable[[], None]]:
        """The graph of ``step(*static)``, the outputs it writes, and its replay."""
        graph = torch.cuda.CUDAGraph()
        for optimizer in self.optimizers:  # backward then makes them in the graph's pool
            optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph, stream=self._stream):
            outputs = step(*static)
        # detached: kept from step to step, they would keep the captured autograd graph
        outputs = {name: value.detach() for name, value in outputs.items()}
        return graph, outputs, graph.replay

    def _fail(self, err: Exception) -> None:
        self.failed = error_summary(err)
        self.release()
        for optimizer in self.optimizers:  # whatever the capture left there
            optimizer.zero_grad(set_to_none=True)
        if self.announce:
            tqdm.write(
                f"--cuda-graph: the training step could not be captured ({self.failed}); "
                "the steps run eagerly (--cuda-graph off skips the attempt)",
                file=sys.stderr,
            )
