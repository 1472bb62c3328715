"""tkreg.ops.rms_norm and tkreg.ops.layer_norm as a model calls them: 3-D inputs, eps as a keyword,
autograd and torch.compile(fullgraph=True), on the CPU under the interpreter. Outputs and
gradients match torch's (in float64, rounded as the op's tolerances allow), and the calls run
this plugin's kernels, forward and backward: a peer fallback is an error, except for inputs the
kernels refuse (a transposed x), which reach torch with the kernels' reason.

Runs in a fresh process with TRITON_INTERPRET=1 (this file as a script). Skipped, saying why,
only while tkreg.ops cannot pass eps to the op."""

from __future__ import annotations

import inspect
import itertools
import json
import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tkreg.testing.markers import runs_the_interpreter
from tkreg.testing.ops_log import ChoiceLog


def _skip_reason() -> str | None:
    import tkreg

    ops: Any = tkreg.ops
    try:
        parameters = inspect.signature(ops.rms_norm).parameters
    except (TypeError, ValueError):
        return "tkreg.ops.rms_norm has no signature to read"
    if "eps" not in parameters and not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return "tkreg.ops.rms_norm does not accept eps yet (tkreg.ops has no op parameters)"
    return None


def _close(what: str, got: torch.Tensor, want: torch.Tensor, tol: Any) -> list[str]:
    from tkreg.testing.checking import compare

    result = compare(got.detach(), want.detach().to(got.dtype).double(), tol)
    return [] if result.ok else [f"{what}: {result.report()}"]


def _check(name: str, dtype: torch.dtype, eps: float, compiled: bool, absent: tuple[str, ...] = (),
           omit: bool = False) -> list[str]:
    """One call of tkreg.ops.<name> on 3-D inputs, its y and gradients against torch's in float64;
    the inputs named in ``absent`` are passed as None (Op.optional), to torch too; with ``omit``,
    trailing absent ones are left out of tkreg's call instead."""
    from tkreg_norms import plugin

    import tkreg

    layer = name == "layer_norm"
    op = plugin.LAYER_NORM if layer else plugin.RMS_NORM
    g = torch.Generator().manual_seed(11)
    shape = (2, 3, 300)
    tensors = [torch.randn(*shape, generator=g), *(torch.randn(300, generator=g) for _ in op.inputs[1:])]
    leaves = [None if n in absent else t.to(dtype).requires_grad_() for n, t in zip(op.inputs, tensors)]
    fn = getattr(tkreg.ops, name)
    if compiled:
        # every check's lambda is one code object: without a reset its graphs (one per dtype and
        # absent input) would pass dynamo's recompile limit (8), which fullgraph=True makes an error
        torch._dynamo.reset()
    call = torch.compile(lambda *t: fn(*t, eps=eps), fullgraph=True) if compiled else (lambda *t: fn(*t, eps=eps))
    given = list(leaves)
    while omit and given[-1] is None:
        given.pop()
    y = call(*given)
    wide = [None if t is None else t.detach().double().requires_grad_() for t in leaves]
    want = F.layer_norm(*wide[:1], (300,), *wide[1:], eps) if layer else F.rms_norm(wide[0], (300,), wide[1], eps)
    tag = f"{name} {dtype} eps={eps} compiled={compiled}" + (f" without {', '.join(absent)}" if absent else "")
    tag += " (left out)" if omit else ""
    case = plugin.CASES[0]
    problems = [] if y.shape == shape else [f"{tag}: y has shape {tuple(y.shape)}"]
    problems += _close(f"{tag} y", y, want, op.tolerance(str(dtype).removeprefix("torch."), case))
    dy = torch.randn(*shape, generator=g).to(dtype)
    present = [i for i, t in enumerate(leaves) if t is not None]
    grads = torch.autograd.grad(y, [leaves[i] for i in present], dy)
    wants = torch.autograd.grad(want, [wide[i] for i in present], dy.double())
    for input_name, got, expected in zip([op.inputs[i] for i in present], grads, wants):
        problems += _close(f"{tag} grad {input_name}", got, expected, op.grad_tolerance(str(dtype).removeprefix("torch."), case))
    return problems


def run_checks() -> dict[str, Any]:
    reason = _skip_reason()
    if reason is not None:
        return {"skip": reason}
    from tkreg.ops import PeerFallbackWarning

    warnings.simplefilter("error", PeerFallbackWarning)  # every call must run a kernel of ours
    calls = ChoiceLog().attach()
    problems: list[str] = []
    for name, eps in (("rms_norm", 1e-5), ("layer_norm", 1e-6)):
        for dtype in (torch.float32, torch.bfloat16):
            for compiled in (False, True):
                problems += _check(name, dtype, eps, compiled)
        for kernel in (f"{name}_triton", f"{name}_bwd_triton"):
            if not calls.ran(kernel):
                problems.append(f"tkreg.ops.{name} never called {kernel}; its log: {calls.lines}")
    problems += _refused_inputs_fall_back()
    return {"problems": problems, "absent": _absent_inputs(calls), "log": calls.lines}


# rms_norm's weight, layer_norm's bias or both vectors left out: nn.RMSNorm(d,
# elementwise_affine=False), nn.LayerNorm(d, bias=False), nn.LayerNorm(d, elementwise_affine=False)
ABSENT = (("rms_norm", ("weight",)), ("layer_norm", ("bias",)), ("layer_norm", ("weight", "bias")))
OPS_INPUTS = {"rms_norm": ("x", "weight"), "layer_norm": ("x", "weight", "bias")}


def _absent_inputs(calls: ChoiceLog) -> list[str]:
    """tkreg.ops with None for optional inputs runs this plugin's kernels (a peer fallback is an
    error here too), forward and backward, and matches torch given the same None."""
    problems: list[str] = []
    for name, absent in ABSENT:
        before = len(calls.lines)
        trailing = absent[-1] == OPS_INPUTS[name][-1]  # then also left out of the call, as F.layer_norm(x, shape)
        for dtype in (torch.float32, torch.bfloat16):
            for compiled, omit in itertools.product((False, True), (False, True) if trailing else (False,)):
                try:
                    problems += _check(name, dtype, 1e-5, compiled, absent, omit)
                except Exception as e:  # the next combination still runs; the first error says why
                    problems.append(f"{name} without {', '.join(absent)} {dtype} compiled={compiled} omit={omit}: {e!r}")
        for kernel in (f"{name}_triton", f"{name}_bwd_triton"):
            if not calls.ran(kernel, since=before):
                log = calls.lines[before:]
                problems.append(f"tkreg.ops.{name} without {', '.join(absent)} never called {kernel}; its log: {log}")
    return problems


def _refused_inputs_fall_back() -> list[str]:
    """Rows the kernels do not take (a transposed x: column stride != 1) go to torch, saying why."""
    import tkreg
    from tkreg.ops import PeerFallbackWarning

    x, w = torch.randn(64, 5).t(), torch.randn(64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PeerFallbackWarning)
        y = tkreg.ops.rms_norm(x, w, eps=1e-5)
    said = [str(c.message) for c in caught if issubclass(c.category, PeerFallbackWarning)]
    problems = [] if torch.allclose(y, F.rms_norm(x, (64,), w, 1e-5)) else ["the fallback's y differs from torch's"]
    if not any("column stride" in message for message in said):
        problems.append(f"a transposed x fell back without the kernels' reason: {said}")
    return problems


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Inductor's own cache in a directory of this run: a graph compiled before a plugin changed its
    # outputs' layout would otherwise be reused (its key holds the graph, not the op's fake)
    inductor = tmp_path_factory.mktemp("inductor")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TKREG_PLUGINS": "norms", "TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@runs_the_interpreter
def test_tkreg_ops_match_torch_with_autograd_and_torch_compile_on_3d_inputs(outcome: dict[str, Any]) -> None:
    if "skip" in outcome:
        pytest.skip(outcome["skip"])
    assert not outcome["problems"], "\n".join(outcome["problems"])


@runs_the_interpreter
def test_tkreg_ops_take_none_for_an_absent_weight_or_bias_and_run_the_kernels(outcome: dict[str, Any]) -> None:
    if "skip" in outcome:
        pytest.skip(outcome["skip"])
    assert not outcome.get("absent", ["the checks did not run"]), "\n".join(outcome.get("absent", []))


if __name__ == "__main__":
    import traceback

    try:
        result = run_checks()
    except Exception:
        result = {"problems": [traceback.format_exc()]}
    print(json.dumps(result))
