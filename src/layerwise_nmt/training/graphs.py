"""`cuda_graphs`: each batch shape's update captured once as a CUDA graph and replayed from then on.

An IWSLT-sized Transformer's update is many hundreds of small kernels; launched one by one from Python, the host takes
longer to queue them than the GPU to run them (docs/benchmarks.md: the GPU busy 10-14 ms of a 45-72 ms update). A
captured graph is queued with one call. What the update needs for that, the loop already gives it: fixed batch
shapes (`bucket_growth_factor`), numbers read one update late and a non-finite update skipped by the optimizer's
kernel (`deferred`), target tokens and sentences counted on the device (`loss.accumulate`), the learning rate a
device tensor the graph reads where `set_lr` fills it.

Per update shape (the shapes of its batches), the first update runs eagerly (the per-shape plans of cuBLAS and
attention are made there, outside a capture, as are the optimizer's state and the bf16 copy's buffers); the
second is captured and replayed, and so is every later one of that shape: its batches copied into the graph's own
input tensors, then one replay. Every graph and every eager update runs on one side stream, warm-up and capture
alike (PyTorch's make_graphed_callables does the same: per-stream handles made during a warm-up on another stream
would otherwise be made inside the capture), and the graphs share one memory pool: they run one after another, and
what one leaves behind (its numbers) is copied out right after its replay. A capture that fails (an operation a
model does that a graph cannot hold) leaves its shape eager, with a warning naming it.

Where graphs are not used, and why (logged at the start): off CUDA (`auto`); fp16, whose loss scaler keeps host
state per update; DDP; without fixed shapes (every batch its own shape: nothing would replay). `emulated` runs the
same bookkeeping on any device without graphs, a capture keeping the update's Python function and a replay calling
it again on the same input tensors: how the suite checks, on a CPU, that nothing an update computes is left out of
the tensors a graph would replay."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

from ..data.batching import Batch
from .deferred import Pending

log = logging.getLogger(__name__)

EAGER_UPDATES = 1  # per shape before its capture

Shape = tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (src shape, tgt shape) of each batch of an update


def update_shape(batches: list[Batch]) -> Shape:
    return tuple((tuple(b.src.shape), tuple(b.tgt.shape)) for b in batches)


def why_not(mode: str, device: torch.device, amp: str, fixed_shapes: bool, world_size: int) -> str:
    """Why a run with these settings replays no graphs ("" when it does)."""
    if mode == "off":
        return "cuda_graphs: off"
    if mode == "auto" and device.type != "cuda":
        return "not on CUDA"
    if amp == "fp16":
        return "fp16's loss scaler keeps host state per update"
    if world_size > 1:
        return "DDP (more than one process)"
    if not fixed_shapes:
        return "no fixed batch shapes (bucket_growth_factor: 0); 1.1 gives them"
    return ""


class CudaGraph:
    """A captured update: capture records the kernels (running none), replay runs them."""

    def __init__(self, pool, stream: torch.cuda.Stream):
        self.graph, self.pool, self.stream = torch.cuda.CUDAGraph(), pool, stream

    def capture(self, body: Callable[[], torch.Tensor]) -> None:
        # thread_local: the batch prefetcher's thread pins memory meanwhile, which a global capture would refuse
        with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
            self.output = body()

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.output


class EmulatedGraph:
    """The same protocol without CUDA: capture keeps `body`, each replay calls it again on the same inputs. What
    the body reads from anywhere but its input tensors is read as it was at the capture, as a graph would."""

    def capture(self, body: Callable[[], torch.Tensor]) -> None:
        self.body = body

    def replay(self) -> torch.Tensor:
        return self.body()


@dataclass
class Captured:
    graph: CudaGraph | EmulatedGraph
    inputs: list[Batch]  # the graph's own batches, which each replay's batches are copied into


@dataclass
class UpdateGraphs:
    """The run's graphs, one per update shape, for one optimizer (a new one, RestartAdam's, starts them again)."""

    device: torch.device
    emulated: bool = False
    graphs: dict[Shape, Captured] = field(default_factory=dict)
    seen: Counter = field(default_factory=Counter)
    eager_only: set[Shape] = field(default_factory=set)  # shapes whose capture failed
    counts: Counter = field(default_factory=Counter)  # eager, captured, replayed updates: the log's and benchmarks'
    optimizer: torch.optim.Optimizer | None = None

    def __post_init__(self) -> None:
        cuda = not self.emulated
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        self.pool = torch.cuda.graph_pool_handle() if cuda else None

    @contextmanager
    def on_stream(self) -> Iterator[None]:
        """An update's work, on the graphs' stream: after what the default stream queued before it (a checkpoint's
        copy, a validation), and before what it queues next (reading the update's numbers)."""
        if self.stream is None:
            yield
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

    def update(
        self, batches: list[Batch], body: Callable[[list[Batch]], Pending], optimizer, clear_grads: Callable[[], None]
    ) -> Pending:
        """`body(batches)`, the update (forward, backward, clipping, step), eagerly or as its shape's graph.
        `clear_grads` drops every gradient the body writes: after a failed capture, whose backward may have left
        gradients that were recorded but never computed, for the eager update to add to."""
        if optimizer is not self.optimizer:  # the graphs step the optimizer they captured
            self.graphs.clear()
            self.seen.clear()
            self.optimizer = optimizer
        shape = update_shape(batches)
        captured = self.graphs.get(shape)
        if captured is None:
            self.seen[shape] += 1
            if self.seen[shape] <= EAGER_UPDATES or shape in self.eager_only:
                self.counts["eager"] += 1
                return body(batches)
            captured = self._capture(shape, batches, body, optimizer)
            if captured is None:
                clear_grads()
                self.counts["eager"] += 1
                return body(batches)
        else:
            for into, batch in zip(captured.inputs, batches, strict=True):
                for target, source in ((into.src, batch.src), (into.prev, batch.prev), (into.tgt, batch.tgt)):
                    target.copy_(source, non_blocking=True)
        self.counts["replayed"] += 1
        # the graph's numbers are overwritten by its next replay; the loop reads these an update late
        return Pending(captured.graph.replay().clone())

    def _capture(self, shape: Shape, batches: list[Batch], body, optimizer) -> Captured | None:
        inputs = [b.to(self.device) for b in batches]  # this update's batches become the graph's inputs
        if inputs[0].src is batches[0].src:  # on the same device `to` is no copy: the caller's tensors are theirs
            inputs = [Batch(b.src.clone(), b.prev.clone(), b.tgt.clone(), b.ids, b.ntokens, b.parts) for b in inputs]
        graph = self.new_graph()
        groups = optimizer.param_groups
        capturable = [group.get("capturable", False) for group in groups]
        for group in groups:  # the fused kernel reads its step count on the device either way; the flag is the
            group["capturable"] = True  # optimizer's check that its step may be captured
        try:
            graph.capture(lambda: body(inputs).stats)
        except Exception as err:  # noqa: BLE001 - any failure of a capture leaves its shape eager
            self.eager_only.add(shape)
            log.warning("cuda_graphs: update shape %s runs eagerly: its capture failed: %s", shape, err)
            return None
        finally:
            for group, flag in zip(groups, capturable, strict=True):
                group["capturable"] = flag
        self.counts["captured"] += 1
        self.graphs[shape] = captured = Captured(graph, inputs)
        return captured

    def new_graph(self) -> CudaGraph | EmulatedGraph:
        """A graph to capture into, on the graphs' stream and in their pool (its work inside `on_stream`)."""
        return EmulatedGraph() if self.stream is None else CudaGraph(self.pool, self.stream)

    def summary(self) -> str:
        return (
            f"cuda_graphs: {len(self.graphs)} update shapes captured; updates replayed {self.counts['replayed']:,}, "
            f"eager {self.counts['eager']:,}"
        )


def for_run(mode: str, device: torch.device, amp: str, fixed_shapes: bool, world_size: int) -> UpdateGraphs | None:
    """The run's graphs, or None with the reason logged where `auto` or `emulated` asked for them."""
    why = why_not(mode, device, amp, fixed_shapes, world_size)
    if why:
        if (mode == "auto" and device.type == "cuda") or mode == "emulated":
            log.info("cuda_graphs: updates run eagerly: %s", why)
        return None
    log.info("cuda_graphs: %s: each update shape captured at its second update, then replayed", mode)
    return UpdateGraphs(device, emulated=mode == "emulated")


def stream_of(graphs: UpdateGraphs | None):
    return nullcontext() if graphs is None else graphs.on_stream()
