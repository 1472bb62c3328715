"""Gradients of tkreg.ops add, sum_row and matmul against float64 torch, and matmul's backward
running through registered kernels (dA = dC B^T, dB = A^T dC, whatever their layouts)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import assert_matmul_close, device_or_skip, install, installed_ops, randn, registry_with  # noqa: E402

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


def _leaf(*shape: int, dtype: Any, device: str, seed: int) -> Any:
    return randn(*shape, dtype=dtype, device=device, seed=seed).requires_grad_()


def test_add_gradient_is_the_incoming_gradient(ops: Any, device: str) -> None:
    a, b = (_leaf(3, 4, 33, dtype=torch.float32, device=device, seed=s) for s in (1, 2))
    grad = randn(3, 4, 33, dtype=torch.float32, device=device, seed=3)
    ops.add(a, b).backward(grad)
    assert torch.equal(a.grad, grad) and torch.equal(b.grad, grad)
    c = _leaf(5, 7, dtype=torch.float32, device=device, seed=4)
    grad_c = randn(5, 7, dtype=torch.float32, device=device, seed=13)
    ops.add(c, torch.ones(5, 7, device=device)).backward(grad_c)  # only one input needs a gradient
    assert torch.equal(c.grad, grad_c)


@pytest.mark.parametrize("shape", [(65,), (9, 33), (2, 3, 130)], ids=lambda s: "x".join(map(str, s)))
def test_sum_row_gradient_reaches_every_element_of_its_row(ops: Any, device: str, shape: tuple[int, ...]) -> None:
    x = _leaf(*shape, dtype=torch.float32, device=device, seed=5)
    grad = randn(*shape[:-1], dtype=torch.float32, device=device, seed=6)
    ops.sum_row(x).backward(grad)
    x64 = x.detach().double().requires_grad_()
    x64.sum(-1).backward(grad.double())
    assert torch.equal(x.grad.double(), x64.grad)


class MatmulSpy:
    """A matmul kernel that records the layouts it is called with and runs the portable kernel:
    it ranks first, so every matmul tkreg.ops runs passes through it."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        from tkreg_matmul.triton_kernel import matmul_triton

        self.calls.append((tuple(a.shape), a.stride(), tuple(b.shape), b.stride()))
        return matmul_triton(a, b, out)

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        register(tkreg.Kernel(name="matmul_spy", op="matmul", launcher=self, interpretable=True, priority=1000))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_gradients_run_through_registered_kernels(device: str, dtype: Any) -> None:
    spy = MatmulSpy()
    ops = install(registry_with(spy))
    try:
        a = _leaf(2, 5, 40, dtype=dtype, device=device, seed=7)
        weight = _leaf(24, 40, dtype=dtype, device=device, seed=8)  # (N, K), used as F.linear does: a @ weight.t()
        grad = randn(2, 5, 24, dtype=dtype, device=device, seed=9)
        ops.matmul(a, weight.t()).backward(grad)
        a64, w64 = a.detach().double(), weight.detach().double()
        assert_matmul_close(a.grad, grad.double() @ w64, k=24)  # dA = dC W
        assert_matmul_close(weight.grad, grad.double().reshape(10, 24).t() @ a64.reshape(10, 40), k=10)  # dW = dC^T A
        forward, grad_a, grad_b = spy.calls
        assert forward == ((10, 40), (40, 1), (40, 24), (1, 40))  # A's rows merged; B the transposed weight
        assert grad_a == ((10, 24), (24, 1), (24, 40), (40, 1))  # dC times B^T, which is the weight itself
        assert grad_b[0] == (40, 10) and grad_b[1] == (1, 40)  # A^T: a transposed view, no copy
    finally:
        tkreg.ops.uninstall()


def test_matmul_gradient_of_a_vector(ops: Any, device: str) -> None:
    a = _leaf(40, dtype=torch.float16, device=device, seed=10)
    b = _leaf(40, 16, dtype=torch.float16, device=device, seed=11)
    grad = randn(16, dtype=torch.float16, device=device, seed=12)
    ops.matmul(a, b).backward(grad)
    assert_matmul_close(a.grad, b.detach().double() @ grad.double(), k=16)
    assert_matmul_close(b.grad, torch.outer(a.detach().double(), grad.double()), k=1)
