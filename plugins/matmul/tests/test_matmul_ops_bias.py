"""tkreg.ops.matmul with a bias, as nn.Linear(bias=True) calls F.linear: ``matmul(x, W.t(), b)`` on
3-D inputs, batches, gradients of x, W and b, torch.compile(fullgraph=True), and the torch
operator. Outputs and gradients match float64 torch within the op's tolerances, the calls run this
plugin's kernels (a peer fallback is an error), and a bias the kernels do not take (strided, or
another dtype) reaches torch with the kernels' reason.

Runs in a fresh process with TRITON_INTERPRET=1 (this file as a script), on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from tkreg.testing.markers import runs_the_interpreter
from tkreg.testing.ops_log import ChoiceLog


def _close(what: str, got: torch.Tensor, want: torch.Tensor, k: int, dtype: torch.dtype) -> list[str]:
    """got against the float64 ``want`` rounded to got's dtype, with the op's tolerance for sums of
    ``k`` products."""
    from tkreg_matmul import plugin

    from tkreg import case
    from tkreg.testing.checking import compare

    tol = plugin.MATMUL.tolerance(str(dtype).removeprefix("torch."), case(M=1, N=1, K=k))
    result = compare(got.detach(), want.detach().to(got.dtype).double(), tol)
    return [] if result.ok else [f"{what}: {result.report()}"]


def _linear(dtype: torch.dtype, compiled: bool) -> list[str]:
    """y = x W^T + b on x (2, 3, 40), W (24, 40), b (24): y, dx, dW and db against float64."""
    import tkreg

    g = torch.Generator().manual_seed(5)
    x, w, b = (torch.randn(*s, generator=g).to(dtype).requires_grad_() for s in ((2, 3, 40), (24, 40), (24,)))

    def layer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return tkreg.ops.matmul(x, w.t(), b)

    if compiled:
        torch._dynamo.reset()
    call = torch.compile(layer, fullgraph=True) if compiled else layer
    y = call(x, w, b)
    wide = [t.detach().double().requires_grad_() for t in (x, w, b)]
    want = F.linear(*wide)
    tag = f"{dtype} compiled={compiled}"
    problems = [] if y.shape == (2, 3, 24) else [f"{tag}: y has shape {tuple(y.shape)}"]
    problems += _close(f"{tag} y", y, want, 40, dtype)
    dy = torch.randn(2, 3, 24, generator=g).to(dtype)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    wants = torch.autograd.grad(want, wide, dy.double())
    # dx = dy W sums N = 24 products, dW = dy^T x and db sum the 6 rows
    for name, got, expected, k in zip(("dx", "dW", "db"), grads, wants, (24, 6, 6)):
        if got.shape != expected.shape or got.dtype != dtype:
            problems.append(f"{tag} {name}: {tuple(got.shape)} {got.dtype}, want {tuple(expected.shape)} {dtype}")
        else:
            problems += _close(f"{tag} {name}", got, expected, k, dtype)
    return problems


def _batched(dtype: torch.dtype) -> list[str]:
    """(B, M, K) @ (B, K, N) + bias (N,), as torch.baddbmm broadcasts it."""
    import tkreg

    g = torch.Generator().manual_seed(6)
    a, b, bias = (torch.randn(*s, generator=g).to(dtype) for s in ((3, 5, 40), (3, 40, 24), (24,)))
    got = tkreg.ops.matmul(a, b, bias)
    return _close(f"batched {dtype}", got, a.double() @ b.double() + bias.double(), 40, dtype)


def _without_bias_keeps_its_own_plan() -> list[str]:
    """matmul(a, b) leaves the bias out (None): no bias added, and its own plan apart from calls with one."""
    import tkreg

    g = torch.Generator().manual_seed(7)
    a, b, bias = (torch.randn(*s, generator=g).half() for s in ((9, 16), (16, 8), (8,)))
    problems = []
    for got, want, what in ((tkreg.ops.matmul(a, b), a.double() @ b.double(), "left out"),
                            (tkreg.ops.matmul(a, b, None), a.double() @ b.double(), "None"),
                            (tkreg.ops.matmul(a, b, bias), a.double() @ b.double() + bias.double(), "given")):  # fmt: skip
        problems += _close(f"bias {what}", got, want, 16, torch.float16)
    text = tkreg.ops.explain("matmul", a, b, bias)
    if "matmul_triton" not in text:
        problems.append(f"explain of a call with a bias names no kernel: {text}")
    return problems


def _refused_bias_falls_back() -> list[str]:
    """A bias no kernel takes goes to torch, saying why, and gives torch's answer."""
    import tkreg
    from tkreg.ops import PeerFallbackWarning

    a, b = torch.randn(9, 16).half(), torch.randn(16, 8).half()
    problems = []
    for bias, reason in ((torch.randn(16).half()[::2], "bias must be contiguous"),):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PeerFallbackWarning)
            got = tkreg.ops.matmul(a, b, bias)
        said = [str(c.message) for c in caught if issubclass(c.category, PeerFallbackWarning)]
        if not torch.equal(got, F.linear(a, b.t(), bias)):
            problems.append(f"a refused bias ({reason}): the fallback's result differs from F.linear's")
        if not any(reason in message for message in said):
            problems.append(f"a refused bias fell back without the kernels' reason ({reason}): {said}")
    return problems


def _operator_schema() -> list[str]:
    import tkreg

    tkreg.ops.get("matmul")  # installs the torch operators
    schema = str(torch.ops.tkreg.matmul.default._schema)
    return [] if "Tensor? bias=None" in schema else [f"torch.ops.tkreg.matmul's schema has no optional bias: {schema}"]


def run_checks() -> dict[str, Any]:
    from tkreg.ops import PeerFallbackWarning

    calls = ChoiceLog().attach()
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", PeerFallbackWarning)  # every call here must run a kernel of ours
        for dtype in (torch.float16, torch.bfloat16):
            for compiled in (False, True):
                problems += _linear(dtype, compiled)
            problems += _batched(dtype)
        problems += _without_bias_keeps_its_own_plan()
    for kernel in ("matmul_triton", "matmul_triton_batched"):
        if not calls.ran(kernel):
            problems.append(f"tkreg.ops.matmul never called {kernel}; its log: {calls.lines}")
    problems += _refused_bias_falls_back()
    problems += _operator_schema()
    return {"problems": problems}


@runs_the_interpreter
def test_tkreg_ops_matmul_takes_a_bias_as_f_linear_does(tmp_path: Any) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "TKREG_PLUGINS": "matmul", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
           "TKREG_CACHE_DIR": str(tmp_path / "tuning")}  # fmt: skip
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    problems = json.loads(run.stdout.strip().splitlines()[-1])["problems"]
    assert not problems, "\n".join(problems)


if __name__ == "__main__":
    import traceback

    try:
        result = run_checks()
    except Exception:
        result = {"problems": [traceback.format_exc()]}
    print(json.dumps(result))
