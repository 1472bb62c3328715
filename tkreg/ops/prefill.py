"""``tkreg tune``: fill the tuning cache ahead of a run, for given shapes or a model's linear layers.

Each shape is called once through tkreg.ops on fresh inputs made by the op's own input factory
(``Op.make_inputs`` with a case of those dims), or, for a model, as nn.Linear calls it: x (M, K)
times the transposed view of a weight stored (N, K). The call tunes its bucket where nobody has;
the result says what was chosen, from where, and by how much it beats the peer and the runner-up.
With ``training``, each shape is called again with the inputs the op differentiates wanting a
gradient, which times the bucket's training choice where a kernel runs the forward (a forward and
a backward each way; see docs/ops.md, Autograd).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import dtypes, refs
from ..core.errors import TkregError
from ..core.specs import Case
from .measuring import PEER
from .model_shapes import LinearShape, linear_shapes
from .tuning_cache import Choice


@dataclass(frozen=True)
class Tuned:
    """What tuning one shape gave."""

    op: str
    shape: str
    choice: Choice | None
    note: str = ""
    training: Choice | None = None  # the bucket's training choice, where one was made

    def describe(self) -> str:
        if self.choice is None:
            return f"{self.op} {self.shape}: {self.note or 'nothing to choose'}"
        c = self.choice
        times, best, runner_up = _times(c)
        parts = [f"{self.op} {self.shape}: {c.winner}"]
        if best:
            parts.append(f"{best:.1f} us")
            peer = times.get(PEER)
            if peer and c.winner != PEER:
                parts.append(f"{peer / best:.2f}x the peer")
            if runner_up:
                parts.append(f"{runner_up / best:.2f}x the runner-up")
        parts.append(f"({c.source})")
        text = " ".join(parts)
        if c.graphed:
            text += "; captured in a CUDA graph: " + _graphed(c)
        if self.training is not None:
            text += "; training: " + _lead(self.training)
        return text


def _times(choice: Choice) -> tuple[dict[str, float], float | None, float | None]:
    """A choice's timed candidates (us), the winner's time, and the next fastest's."""
    times = {k: v for k, v in choice.times_us.items() if isinstance(v, float)}
    others = sorted(v for k, v in times.items() if k != choice.winner)
    return times, times.get(choice.winner), others[0] if others else None


def _graphed(choice: Choice) -> str:
    """"peer 3.1 us a call replayed, 1.35x the eager winner's replay"."""
    graphed, winner = choice.replayed_us.get(choice.graphed), choice.replayed_us.get(choice.winner)
    if not isinstance(graphed, float):
        return choice.graphed
    text = f"{choice.graphed} {graphed:.1f} us a call replayed"
    return text + (f", {winner / graphed:.2f}x the eager winner's replay" if isinstance(winner, float) else "")


def _lead(choice: Choice) -> str:
    """"peer 369.9 us a step, 1.77x the other way (tuning)"."""
    _, best, other = _times(choice)
    text = choice.winner + (f" {best:.1f} us a step" if best else "")
    if best and other:
        text += f", {other / best:.2f}x the other way"
    return f"{text} ({choice.source})"


def tune(op: str, shapes: Sequence[Mapping[str, int]], dtype: str = "bfloat16", variant: str = "",
         params: Mapping[str, Any] | None = None, training: bool = False) -> list[Tuned]:
    """Tune ``op`` on inputs of each shape (dims as the op's cases name them, e.g. M, N, K),
    made by the op's input factory with case ``variant`` (and, with ``training``, its training
    choice); returns what was chosen."""
    import torch

    import tkreg.ops

    _need_gpu()
    call = tkreg.ops.get(op)
    dispatcher = tkreg.ops._installed["dispatchers"][op]
    spec = dispatcher.op
    factory = refs.resolve(spec.make_inputs)
    results = []
    for dims in shapes:
        generator = torch.Generator(device="cuda").manual_seed(0)
        case = Case(dims=dict(dims), variant=variant)
        inputs = factory(case, dtypes.torch_dtype(dtype), generator, "cuda")
        results.append(_tuned(op, dispatcher, call, tuple(inputs), dict(params or {}), case.id, training))
    return results


def tune_model(config: Mapping[str, Any], op: str | None = None, tokens: Sequence[int] | None = None,
               dtype: str = "bfloat16", training: bool = False) -> list[Tuned]:
    """Tune the linear layers of a model (a Hugging Face style config) at each token count, as
    nn.Linear calls them (with a bias where the config gives the layer one), through ``op``
    (default: the one op whose contract is linear); with ``training``, their training choices
    too."""
    import torch

    import tkreg.ops

    _need_gpu()
    name = op or _linear_op()
    call = tkreg.ops.get(name)
    dispatcher = tkreg.ops._installed["dispatchers"][name]
    shapes: list[LinearShape] = linear_shapes(config, tokens) if tokens else linear_shapes(config)
    results = []
    kind = dtypes.torch_dtype(dtype)
    for shape in shapes:
        x = torch.randn(shape.M, shape.K, device="cuda", dtype=kind)
        weight = torch.randn(shape.N, shape.K, device="cuda", dtype=kind)
        inputs = (x, weight.t(), torch.randn(shape.N, device="cuda", dtype=kind)) if shape.bias else (x, weight.t())
        results.append(_tuned(name, dispatcher, call, inputs, {}, shape.describe(), training))
    return results


def _tuned(op: str, dispatcher: Any, call: Any, inputs: tuple[Any, ...], params: dict[str, Any], label: str,
           training: bool = False) -> Tuned:
    import torch

    call(*inputs, **params)
    if training and dispatcher.op.grads:
        wanting = [t if t is None else t.detach().requires_grad_(i in dispatcher.grad_index and t.is_floating_point())
                   for i, t in enumerate(inputs)]  # fmt: skip  # None: an absent optional input
        call(*wanting, **params)  # a call that wants a gradient: times the training choice
    torch.cuda.synchronize()
    plan = dispatcher.plan(inputs, dispatcher.params.values(params), tune=False)
    view = dispatcher.form.kernel_view(inputs)
    choice = trained = None
    if not isinstance(view, str):
        device, kernel_inputs = dispatcher.chooser.device(inputs), view.inputs(inputs)
        choice = dispatcher.chooser.known(kernel_inputs, plan.params, device, plan.bucket)
        if training and choice is not None:
            trained = dispatcher.chooser.training(kernel_inputs, plan.params, device, None, plan.bucket)
    return Tuned(op, label, choice, "" if choice is not None else plan.describe(op), trained)


def _linear_op() -> str:
    import tkreg.ops

    linear = [d.op.name for d in tkreg.ops._installed["dispatchers"].values() if d.op.contract.kind == "linear"]
    if len(linear) != 1:
        raise TkregError(f"name the op to tune (--op): ops with a linear contract: {', '.join(linear) or 'none'}")
    return linear[0]


def _need_gpu() -> None:
    import torch

    import tkreg.ops

    if not torch.cuda.is_available():
        raise TkregError("tkreg tune times kernels on a CUDA GPU; this machine has none")
    tkreg.ops.names()  # builds the callables and dispatchers
