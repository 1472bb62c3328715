"""Shared by the tkreg.ops tests: where kernels can run here, float64 references, and a
third-party plugin whose op appears in tkreg.ops with no code in tkreg."""

from __future__ import annotations

import math
from typing import Any

import pytest

import tkreg
from tkreg.core.tolerances import EXACT, UNIT_ROUNDOFF
from tkreg.launch.inputs import interpreter_active


def device_or_skip() -> str:
    """"cuda" on a GPU; "cpu" when the Triton interpreter is on for this whole process (as
    `pytest --tkreg` turns it on with no GPU: kernels run on CPU tensors); else skip."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if interpreter_active():
        return "cpu"
    pytest.skip("needs a GPU, or the Triton interpreter on for the whole process (pytest --tkreg, or TRITON_INTERPRET=1)")


def choice_by_priority(monkeypatch: Any, cache: Any, interpreter: bool = True) -> None:
    """What these tests assume of a plan: kernels in the registry's priority order, nothing timed.
    On a GPU that means tuning off, a tuning cache of the test's own (``cache``, an empty folder:
    choices earlier runs on this machine measured must not decide) and no shipped wall-time data
    (whose estimates put torch first at these small sizes); without one, the registry runs kernels
    on CPU tensors only with the Triton interpreter on, so (``interpreter``) say it is on: the toy
    kernels are torch code."""
    import torch

    monkeypatch.setenv("TKREG_CACHE_DIR", str(cache))
    if torch.cuda.is_available():
        monkeypatch.setenv("TKREG_TUNE", "0")
        monkeypatch.setattr("tkreg.ops.walltime.for_platform", lambda platform, op: None)
        tkreg.default_registry().forget_rankings()
    elif interpreter:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def installed_ops() -> Any:
    """Fixture body: tkreg.ops built from the installed plugins, forgotten after the test."""
    yield install()
    tkreg.ops.uninstall()


def fresh_dynamo() -> Any:
    """Fixture body: each test compiles from scratch, with no graph a previous test left."""
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def capturing_backend(graphs: list[str]) -> Any:
    """aot_eager that keeps the code of every forward graph AOTAutograd hands the compiler."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def forward(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward)


def recorded_calls() -> Any:
    """Fixture body: the toy kernels' calls (:data:`CALLS`) recorded from empty; tkreg.ops
    forgotten after the test."""
    CALLS.clear()
    yield
    CALLS.clear()
    tkreg.ops.uninstall()


def randn(*shape: int, dtype: Any, device: str, seed: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=device)


def same_alignment_as(t: Any, seed: int) -> Any:
    """A new tensor with t's shape, dtype and base-address alignment class (CPU allocations are
    not all 128-byte aligned), filled with fresh values."""
    import torch

    from tkreg.core.signature import ALIGNMENT_CLASS_BYTES

    spare = ALIGNMENT_CLASS_BYTES // t.element_size()
    buffer = torch.empty(t.numel() + spare, dtype=t.dtype, device=t.device)
    shift = ((t.data_ptr() - buffer.data_ptr()) % ALIGNMENT_CLASS_BYTES) // t.element_size()
    new = buffer[shift : shift + t.numel()].view(t.shape)
    new.copy_(randn(*t.shape, dtype=t.dtype, device=t.device.type, seed=seed))
    assert new.data_ptr() % ALIGNMENT_CLASS_BYTES == t.data_ptr() % ALIGNMENT_CLASS_BYTES
    return new


def assert_sum_close(got: Any, x: Any) -> None:
    """sum_row's tolerance (tkreg_reductions.plugin.TOLERANCES): fp32 accumulation of N terms,
    one rounding to the output dtype."""
    import torch

    n = x.shape[-1]
    dtype = str(x.dtype).removeprefix("torch.")
    ref = x.double().sum(-1)
    torch.testing.assert_close(got.double(), ref, atol=8 * UNIT_ROUNDOFF["float32"] * n, rtol=2 * UNIT_ROUNDOFF[dtype])
    assert got.dtype == x.dtype and got.shape == ref.shape


def assert_matmul_close(got: Any, ref64: Any, k: int) -> None:
    """matmul's tolerance (tkreg_matmul.op): atol lambda u32 (2/pi) K^1.5, rtol 2u of the dtype."""
    import torch

    dtype = str(got.dtype).removeprefix("torch.")
    atol = 8.0 * UNIT_ROUNDOFF["float32"] * (2.0 / math.pi) * k**1.5
    expected = ref64.to(got.dtype).double()
    torch.testing.assert_close(got.double(), expected, atol=atol, rtol=2 * UNIT_ROUNDOFF[dtype])


def install(registry: tkreg.Registry | None = None) -> Any:
    """tkreg.ops built from ``registry`` (default: the installed plugins)."""
    import tkreg.ops

    tkreg.ops.install(registry)
    return tkreg.ops


# -- a third-party plugin: op "toy_mul" (x * y), kernels and a peer --------------------------------
def toy_reference(x: Any, y: Any) -> Any:
    return x * y


def toy_make_output(x: Any, y: Any) -> Any:
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def toy_peer(x: Any, y: Any, out: Any) -> Any:
    import torch

    return torch.mul(x, y, out=out)


def toy_cost(dims: dict[str, int], itemsize: int) -> tkreg.Cost:
    return tkreg.Cost(bytes=3 * dims["M"] * dims["N"] * itemsize, flops=dims["M"] * dims["N"])


def toy_make_inputs(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    import torch

    return tuple(torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device) for _ in range(2))


def toy_checks(x: Any, y: Any) -> list[str]:
    return [] if x.shape == y.shape else [f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}"]


def toy_wide_rows_only(x: Any, y: Any) -> list[str]:
    return [] if x.shape[-1] >= 8 else [f"rows of {x.shape[-1]} elements; toy_mul_wide needs at least 8"]


def toy_mul_torch(x: Any, y: Any, out: Any = None) -> Any:
    """A "kernel" made of torch ops: traceable on FakeTensors, as a wrap_triton launcher is."""
    import torch

    if out is None:
        out = toy_make_output(x, y)
    return torch.mul(x, y, out=out)


toy_mul_torch.tkreg_traceable = True  # type: ignore[attr-defined]


def toy_mul_refusing(x: Any, y: Any, out: Any = None) -> Any:
    """Declares no constraint but refuses odd row counts at launch time."""
    if x.shape[0] % 2:
        raise tkreg.InputError(f"toy_mul_picky: {x.shape[0]} rows; it takes an even number")
    return toy_mul_torch(x, y, out)


class ToyPlugin:
    """Registers op toy_mul and kernels through the public hooks, as a third party would."""

    def __init__(self, *kernels: tkreg.Kernel, peer: bool = True, autocast: Any = None) -> None:
        self.kernels = kernels
        self.peer = peer
        self.autocast = autocast  # Op.autocast: what torch.autocast does to toy_mul

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(
            tkreg.Op(
                name="toy_mul",
                reference=toy_reference,
                make_inputs=toy_make_inputs,
                make_output=toy_make_output,
                cases=(tkreg.case(M=5, N=7),),
                dtypes=("float32", "float16"),
                tolerances=EXACT,
                cost=toy_cost,
                peer=toy_peer if self.peer else None,
                peer_name="torch.mul" if self.peer else "",
                autocast=self.autocast,
            )
        )

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        for k in self.kernels:
            register(k)


def toy_kernel(name: str, launcher: Any, **kw: Any) -> tkreg.Kernel:
    return tkreg.Kernel(name=name, op="toy_mul", launcher=launcher, interpretable=True, **kw)


def registry_with(*plugins: Any) -> tkreg.Registry:
    """The installed plugins plus ``plugins``, registered in-process."""
    from tkreg.core.loading import build_registry

    return build_registry(plugins=[(f"toy{i}", p) for i, p in enumerate(plugins)])


# -- third-party ops with parameters, several outputs, integer inputs and gradients ---------------
# What launchers, formulas and make_output saw, per call: (name, shapes of the tensors, params).
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []


def _record(name: str, tensors: Any, **params: Any) -> None:
    CALLS.append((name, tuple(tuple(t.shape) for t in tensors), params))


def calls(name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    return [(shapes, params) for n, shapes, params in CALLS if n == name]


# toy_rms_norm: y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row; contract
# "rows"; outputs y (returned) and rstd (float32, kept for the backward only).
def rms_reference(x: Any, weight: Any, eps: float = 1e-6) -> tuple[Any, Any]:
    import torch

    rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)
    return x * rstd.unsqueeze(-1) * weight, rstd


def _rms(x: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    y, rstd = rms_reference(x.float(), weight.float(), eps)
    return y.to(x.dtype), rstd


def rms_make_output(x: Any, weight: Any) -> tuple[Any, Any]:
    import torch

    _record("rms_make_output", (x, weight))
    return torch.empty_like(x), torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


def rms_peer(x: Any, weight: Any, out: Any = None, eps: float = 1e-6) -> Any:
    _record("rms_peer", (x, weight), eps=eps)
    y, rstd = _rms(x, weight, eps)
    if out is None:
        return y, rstd
    out[0].copy_(y)
    out[1].copy_(rstd)
    return out


def rms_peer_y_only(x: Any, weight: Any, out: Any = None, eps: float = 1e-6) -> Any:
    """A peer as torch's own norms are: it computes y only (rstd is the kernels' own)."""
    _record("rms_peer", (x, weight), eps=eps)
    y = _rms(x, weight, eps)[0]
    if out is None:
        return (y,)
    out[0].copy_(y)
    return out


def rms_peer_y_bare(x: Any, weight: Any, out: Any = None, eps: float = 1e-6) -> Any:
    """rms_peer_y_only returning y itself, not (y,), where it allocates (as the norms' peers do)."""
    got = rms_peer_y_only(x, weight, out, eps)
    return got[0] if out is None else got


def rms_full_peer(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """The full peer beside rms_peer_y_only, as torch._fused_rms_norm is beside F.rms_norm."""
    _record("rms_full_peer", (x, weight), eps=eps)
    return _rms(x, weight, eps)


def rms_torch(x: Any, weight: Any, out: Any, eps: float) -> Any:
    """A forward "kernel" of torch ops that takes 2-D rows only (as a Triton kernel would)."""
    _record("rms_torch", (x, weight, *out), eps=eps)
    if x.dim() != 2:
        raise tkreg.InputError(f"rms_torch takes 2-D rows, got shape {tuple(x.shape)}")
    y, rstd = _rms(x, weight, eps)
    out[0].copy_(y)
    out[1].copy_(rstd)
    return out


rms_torch.tkreg_traceable = True  # type: ignore[attr-defined]


def _rms_grads(x: Any, weight: Any, rstd: Any, grad_y: Any) -> tuple[Any, Any]:
    """dx and dweight of y = x * rstd * weight over the last dim, dweight summed over every row."""
    xf, gf, r = x.float(), grad_y.float() * weight.float(), rstd.float().unsqueeze(-1)
    xhat = xf * r
    dx = r * (gf - xhat * (gf * xhat).mean(-1, keepdim=True))
    dweight = (grad_y.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dweight.to(weight.dtype)


def rms_backward_torch(x: Any, weight: Any, y: Any, rstd: Any, grad_y: Any, out: Any, eps: float) -> Any:
    """A backward "kernel": (inputs, outputs, upstream gradient of y) in, out=(dx, dweight)."""
    _record("rms_backward_torch", (x, weight, y, rstd, grad_y, *out), eps=eps)
    dx, dweight = _rms_grads(x, weight, rstd, grad_y)
    out[0].copy_(dx)
    out[1].copy_(dweight)
    return out


def rms_backward_refusing(*tensors: Any, out: Any, eps: float) -> Any:
    raise tkreg.InputError("rms_backward_picky: not today")


def rms_formula(inputs: Any, outputs: Any, grad_outputs: Any, eps: float) -> tuple[Any, Any]:
    """The op's backward formula, in torch operations on callers' tensors."""
    (x, weight), (_, rstd), (grad_y,) = inputs, outputs, grad_outputs
    _record("rms_formula", (x, weight, rstd, grad_y), eps=eps)
    return _rms_grads(x, weight, rstd, grad_y)


def toy_cost_rows(dims: dict[str, int], itemsize: int) -> tkreg.Cost:
    return tkreg.Cost(bytes=2 * dims["M"] * dims["N"] * itemsize)


def toy_make_rows(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    import torch

    x = torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device)
    return x, torch.randn(case["N"], generator=generator, dtype=dtype, device=device)


class RmsPlugin:
    """Registers op toy_rms_norm (a parameter, two outputs, gradients) with the pieces asked for:
    a forward kernel, backward kernels, a formula, a peer."""

    def __init__(
        self, *kernels: tkreg.Kernel, formula: bool = False, peer: bool = True, grads: bool | tuple[str, ...] = True,
        peer_y_only: bool = False, full_peer: bool = False, peer_bare: bool = False,
    ) -> None:
        self.kernels, self.formula, self.peer, self.grads = kernels, formula, peer, grads
        self.peer_fn = rms_peer_y_bare if peer_bare else rms_peer_y_only if peer_y_only else rms_peer
        self.full_peer = rms_full_peer if full_peer else None

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(
            tkreg.Op(
                name="toy_rms_norm",
                reference=rms_reference,
                make_inputs=toy_make_rows,
                make_output=rms_make_output,
                cases=(tkreg.case(M=5, N=7),),
                dtypes=("float32",),
                tolerances={"float32": tkreg.Tolerance(1e-5, 1e-5)},
                cost=toy_cost_rows,
                peer=self.peer_fn if self.peer else None,
                peer_name="rms_peer" if self.peer else "",
                full_peer=self.full_peer,
                inputs=("x", "weight"),
                params=(tkreg.Param("eps", 1e-6, values=(1e-6, 0.5)),),
                outputs=(tkreg.Output("y"), tkreg.Output("rstd", dtype="float32", differentiable=False, returned=False)),
                grads=("x", "weight") if self.grads is True else tuple(self.grads or ()),
                backward=rms_formula if self.formula else None,
                contract=tkreg.contracts.rows(),
            )
        )

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        for k in self.kernels:
            register(k)


def rms_kernel(name: str, launcher: Any, **kw: Any) -> tkreg.Kernel:
    return tkreg.Kernel(name=name, op="toy_rms_norm", launcher=launcher, interpretable=True, **kw)


RMS_FORWARD = rms_kernel("rms_torch", rms_torch)
RMS_BACKWARD = rms_kernel("rms_backward_torch", rms_backward_torch, backward=True)


# toy_pick: out[...] = x[..., target[...]]: contract "rows" with a per-row int64 target;
# differentiable in x through its peer only.
def pick_reference(x: Any, target: Any) -> Any:
    return x.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def pick_make_output(x: Any, target: Any) -> Any:
    import torch

    return torch.empty(x.shape[0], dtype=x.dtype, device=x.device)


def pick_peer(x: Any, target: Any, out: Any = None) -> Any:
    picked = pick_reference(x, target)
    return picked if out is None else out.copy_(picked)


def pick_torch(x: Any, target: Any, out: Any) -> Any:
    _record("pick_torch", (x, target, out))
    return out.copy_(pick_reference(x, target))


def toy_make_pick(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    import torch

    x = torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device)
    return x, torch.randint(0, case["N"], (case["M"],), generator=generator, device=device)


# toy_axpy: alpha * x + y, contract "elementwise", a float parameter, no gradients.
def axpy_reference(x: Any, y: Any, alpha: float = 1.0) -> Any:
    return alpha * x + y


def axpy_torch(x: Any, y: Any, out: Any, alpha: float) -> Any:
    _record("axpy_torch", (x, y, out), alpha=alpha)
    return out.copy_(alpha * x + y)


def axpy_peer(x: Any, y: Any, out: Any = None, alpha: float = 1.0) -> Any:
    result = alpha * x + y
    return result if out is None else out.copy_(result)


class ContractsPlugin:
    """toy_pick (rows, int targets, gradients through the peer) and toy_axpy (elementwise, a
    parameter), each with one torch "kernel"."""

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        common = dict(cases=(tkreg.case(M=5, N=7),), dtypes=("float32",), tolerances=EXACT, cost=toy_cost_rows)
        register(
            tkreg.Op(
                name="toy_pick", reference=pick_reference, make_inputs=toy_make_pick, make_output=pick_make_output,
                peer=pick_peer, inputs=("x", "target"), grads=("x",), contract=tkreg.contracts.rows(), **common,
            )
        )
        register(
            tkreg.Op(
                name="toy_axpy", reference=axpy_reference, make_inputs=toy_make_inputs, make_output=toy_make_output,
                peer=axpy_peer, inputs=("x", "y"), params=(tkreg.Param("alpha", 1.0),),
                contract=tkreg.contracts.elementwise(), **common,
            )
        )

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        register(tkreg.Kernel(name="pick_torch", op="toy_pick", launcher=pick_torch, interpretable=True))
        register(tkreg.Kernel(name="axpy_torch", op="toy_axpy", launcher=axpy_torch, interpretable=True))
