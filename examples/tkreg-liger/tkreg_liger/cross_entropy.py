"""The `cross_entropy` op and liger-kernel 0.8.5's cross-entropy kernel.

liger_cross_entropy_kernel does the forward and the backward in one pass: it computes each
row's loss and, with HAS_GRADIENTS, overwrites the row of logits with d(loss)/d(logits) (for an
upstream gradient of 1, divided by the number of kept rows for `mean`). Rows whose target is
ignore_index are zeroed in the logits even without HAS_GRADIENTS. liger's backward
(cross_entropy_backward) then only scales that buffer by the upstream gradient. liger's Python
wrapper also synchronizes with the host: it reads the count of kept rows (a scalar argument of
the kernel) and asserts that targets are in range. Three kernels map this onto tkreg:

- liger_cross_entropy (forward): the kernel without HAS_GRADIENTS, leaving the logits as they
  were, so that tkreg.ops can call it, and without a host sync, so that it can be captured in a
  CUDA graph. Ignored rows are handed to the kernel as class 0 with an ignore_index no target
  has, and their losses zeroed afterwards (the kernel would otherwise zero their logits); the
  kernel runs with reduction "sum" (no division), and `mean` divides the sum by the number of
  kept rows on the device. Kept rows' losses are computed exactly as liger computes them; `mean`
  rounds once after the division where liger rounds each row's loss / n, then the sum.
- liger_cross_entropy_fused (forward): liger's training path as it is (with liger's host sync).
  It declares that it writes the logits (Writes with the expected gradient); tkreg.ops never
  calls it, tests check what it leaves in the logits.
- liger_cross_entropy_bwd (backward): copies the logits into the gradient tensor, runs the kernel
  with HAS_GRADIENTS on it (unscaled: reduction "sum"), then multiplies by the upstream gradient,
  divided by the number of kept rows for `mean`, with liger's element_mul_kernel (a 0-d upstream
  gradient) or torch (one per row), as liger's cross_entropy_backward does. No host sync.

Targets outside [0, V) (other than ignore_index) are refused as liger refuses them: with a
ValueError on the CPU, and on a GPU with torch._assert_async (a device-side assert, as
F.cross_entropy does), which avoids a host sync. They are wrong for every implementation, not a
reason to choose another kernel, hence no tkreg.InputError. With no kept row, `mean` is 0, as
liger gives it (torch gives NaN).
"""

import torch
import torch.nn.functional as F
import triton
from liger_kernel.ops import cross_entropy as liger
from liger_kernel.ops.utils import device_context, element_mul_kernel, is_hip
from liger_kernel.utils import infer_device_arch

from tkreg import Cost
from tkreg.launch.aot import AotSpec
from tkreg.launch.inputs import fail_if, tensor_reasons
from tkreg.launch.tma import TRITON_TYPE

from ._common import devices, ordered_signature, outputs, row_reasons

REDUCTIONS = ("mean", "sum", "none")
NEVER = -1  # an ignore_index no remapped target equals (they all lie in [0, V))


def forward_reasons(logits, targets):
    found = row_reasons(logits, "logits")
    found += tensor_reasons(targets, "targets", rank=1, dtypes_allowed=("int64",))
    if not found and targets.shape[0] != logits.shape[0]:
        found.append(f"{targets.shape[0]} targets for {logits.shape[0]} rows of logits")
    return found + devices(logits=logits, targets=targets)


def backward_reasons(logits, targets, loss, grad_loss):
    found = forward_reasons(logits, targets)
    if not found and grad_loss.dim() > 1:
        found.append(f"grad_loss must be 0-d or one value per row, got shape {tuple(grad_loss.shape)}")
    return found


def _range_error(ignore_index, n_cols):
    return f"targets must lie in [0, {n_cols}) or equal ignore_index={ignore_index}"


def _safe_targets(targets, ignore_index, n_cols):
    """(kept-row mask, targets with ignored rows at class 0), checked without a host sync on a GPU."""
    keep = targets != ignore_index
    safe = torch.where(keep, targets, 0)
    in_range = ((safe >= 0) & (safe < n_cols)).all()
    if safe.is_cuda:
        torch._assert_async(in_range, _range_error(ignore_index, n_cols))
    elif not bool(in_range):
        raise ValueError(_range_error(ignore_index, n_cols))
    return keep, safe


def _kept_count(targets, ignore_index, n_cols):
    """The number of kept rows as a Python int, with liger's range check: one host sync."""
    keep = targets != ignore_index
    kept = torch.where(keep, targets, 0)
    count, high, low = torch.stack((keep.sum(), kept.max(), kept.min())).tolist()
    if high >= n_cols or low < 0:
        raise ValueError(_range_error(ignore_index, n_cols) + f"; got values in [{low}, {high}]")
    return count


def _num_warps(logits):
    """liger's choice in cross_entropy_forward."""
    if is_hip():
        return 16
    blackwell = infer_device_arch().startswith("blackwell")
    return 8 if (logits.element_size() == 2 and blackwell) else 32


def _run(x, targets, loss_1d, ignore_index, n_kept, label_smoothing, reduction, lse_square_scale,
         gradients):
    """liger_cross_entropy_kernel over x's rows, as cross_entropy_forward launches it (no
    weight, no softcap, no z-loss/accuracy/prediction outputs)."""
    n_rows, n_cols = x.shape
    with device_context(x.device):
        liger.liger_cross_entropy_kernel[(n_rows,)](
            X_ptr=x, X_stride=x.stride(0), Y_ptr=targets, Y_stride=targets.stride(0),
            weight_ptr=None, loss_ptr=loss_1d, z_loss_ptr=None, loss_stride=loss_1d.stride(0),
            token_accuracy_ptr=None, token_accuracy_stride=0,
            predicted_tokens_ptr=None, predicted_tokens_stride=0,
            n_cols=n_cols, n_non_ignore=n_kept, sum_non_ignore_weight=n_kept, ignore_index=ignore_index,
            weight_sum=0.0, lse_square_scale=lse_square_scale, label_smoothing=label_smoothing,
            reduction=reduction, softcap=None,
            RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
            BLOCK_SIZE=min(liger.MAX_FUSED_SIZE, triton.next_power_of_2(n_cols)),
            HAS_WEIGHT=False, HAS_SOFTCAPPING=False, HAS_GRADIENTS=gradients,
            num_warps=_num_warps(x))


def _check_params(label_smoothing, reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")


def _loss_out(out, logits, reduction):
    shape = (logits.shape[0],) if reduction == "none" else ()
    (loss,) = outputs(out, [(shape, logits.dtype)], logits.device)
    return loss


def cross_entropy_forward(logits, targets, *, out=None, ignore_index=-100, label_smoothing=0.0,
                          reduction="mean", lse_square_scale=0.0):
    fail_if(forward_reasons(logits, targets))
    _check_params(label_smoothing, reduction)
    loss = _loss_out(out, logits, reduction)
    keep, safe = _safe_targets(targets, ignore_index, logits.shape[1])
    loss_1d = loss if reduction == "none" else torch.empty(logits.shape[0], dtype=logits.dtype,
                                                            device=logits.device)
    # reduction "sum": the kernel divides nothing; n_non_ignore is then unused
    _run(logits, safe, loss_1d, NEVER, 1, label_smoothing, "sum", lse_square_scale, gradients=False)
    loss_1d.masked_fill_(~keep, 0)
    if reduction == "sum":
        torch.sum(loss_1d, dim=0, out=loss)
    elif reduction == "mean":
        loss.copy_(loss_1d.sum(dtype=torch.float32) / keep.sum().clamp_min(1))
    return loss


def cross_entropy_fused(logits, targets, *, out=None, ignore_index=-100, label_smoothing=0.0,
                        reduction="mean", lse_square_scale=0.0):
    fail_if(forward_reasons(logits, targets))
    _check_params(label_smoothing, reduction)
    loss = _loss_out(out, logits, reduction)
    n_kept = _kept_count(targets, ignore_index, logits.shape[1])
    # liger's kernel leaves ignored rows' losses unwritten: start from zeros, as liger does
    if reduction == "none":
        loss_1d = loss.zero_()
    else:
        loss_1d = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device)
    _run(logits, targets, loss_1d, ignore_index, n_kept, label_smoothing, reduction, lse_square_scale,
         gradients=True)
    if reduction != "none":
        torch.sum(loss_1d, dim=0, out=loss)  # liger: torch.sum(loss_1d), in the logits' dtype
    return loss


def cross_entropy_backward(logits, targets, loss, grad_loss, *, out=None, ignore_index=-100,
                           label_smoothing=0.0, reduction="mean", lse_square_scale=0.0):
    fail_if(backward_reasons(logits, targets, loss, grad_loss))
    _check_params(label_smoothing, reduction)
    (grad,) = outputs(out, [(tuple(logits.shape), logits.dtype)], logits.device)
    keep, _ = _safe_targets(targets, ignore_index, logits.shape[1])
    grad.copy_(logits)
    scratch = torch.empty(logits.shape[0], dtype=logits.dtype, device=logits.device)
    # the gradient of each row's own loss (reduction "sum": undivided); ignored rows are zeroed
    _run(grad, targets, scratch, ignore_index, 1, label_smoothing, "sum", lse_square_scale, gradients=True)
    if grad_loss.dim() == 1:  # reduction="none": liger returns grad * grad_output.unsqueeze(1)
        grad.mul_(grad_loss.unsqueeze(1))
    else:  # liger's cross_entropy_backward for a scalar gradient, with mean's 1/n folded in
        scale = grad_loss.float()
        if reduction == "mean":
            scale = scale / keep.sum().clamp_min(1)
        with device_context(grad.device):
            element_mul_kernel[(grad.shape[0],)](
                grad, grad.stride(0), scale, grad.shape[1],
                BLOCK_SIZE=min(liger.MAX_FUSED_SIZE, triton.next_power_of_2(grad.shape[1])),
                num_warps=32 if not is_hip() else 16)
    return (grad,)


# ---------------------------------------------------------------------------------------------
# the op


def reference(logits, targets, *, ignore_index, label_smoothing, reduction, lse_square_scale):
    loss = F.cross_entropy(logits, targets, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)
    if lse_square_scale:  # liger's z-loss: scale * lse^2 per kept row, reduced like the loss
        keep = targets != ignore_index
        z = lse_square_scale * torch.logsumexp(logits, dim=-1).square() * keep
        if reduction == "none":
            loss = loss + z
        elif reduction == "sum":
            loss = loss + z.sum()
        else:
            loss = loss + z.sum() / keep.sum()
    return loss


def gradient_in_logits(logits, targets, **params):
    """What liger_cross_entropy_fused leaves in the logits: d(sum of the loss)/d(logits)."""
    with torch.enable_grad():
        x = logits.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(reference(x, targets, **params).sum(), x)
    return grad


def make_inputs(case, dtype, generator, device, ignore_index):
    m, n = case["M"], case["N"]
    width = n + 5 if case.variant == "padded" else n  # padded: rows strided inside a wider buffer
    logits = torch.randn(m, width, generator=generator, device=device).to(dtype)[:, :n]
    targets = torch.randint(0, n, (m,), generator=generator, device=device)
    targets[1::3] = ignore_index  # every third row is padding
    if 0 <= ignore_index < n:  # keep row 0, so that mean never divides by zero kept rows
        targets[0] = 0 if ignore_index != 0 else n - 1
    return logits, targets


def make_output(logits, targets, reduction):
    shape = (logits.shape[0],) if reduction == "none" else ()
    return torch.empty(shape, dtype=logits.dtype, device=logits.device)


def tolerance_scale(dims):
    return 1.0 / dims["N"]  # gradients scale with 1/V (see XENT_GRAD_TOL in plugin.py)


def cost(dims, itemsize):
    m, n = dims["M"], dims["N"]
    return Cost(bytes=m * (n * itemsize + 8 + itemsize), flops=4 * m * n)


def backward_cost(dims, itemsize):
    m, n = dims["M"], dims["N"]
    return Cost(bytes=m * (2 * n * itemsize + 8 + itemsize), flops=6 * m * n)


def peer(logits, targets, *, out=None, ignore_index=-100, label_smoothing=0.0, reduction="mean",
         lse_square_scale=0.0):
    loss = F.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)
    if lse_square_scale:
        keep = targets != ignore_index
        z = lse_square_scale * torch.logsumexp(logits.float(), dim=-1).square() * keep
        z = z if reduction == "none" else (z.sum() if reduction == "sum" else z.sum() / keep.sum())
        loss = (loss.float() + z).to(logits.dtype)
    if out is None:
        return loss
    return out.copy_(loss)


# ---------------------------------------------------------------------------------------------
# ahead-of-time compile specs: V = 32000 (Llama-2), default parameters (mean, no smoothing)

AOT_COLS = 32000


def _aot(dtype, gradients, reduction):
    fn = liger.liger_cross_entropy_kernel
    ptr = f"*{TRITON_TYPE[dtype]}"
    constexprs = {
        "weight_ptr": None, "z_loss_ptr": None, "token_accuracy_ptr": None, "predicted_tokens_ptr": None,
        "softcap": None, "lse_square_scale": 0.0, "label_smoothing": 0.0, "reduction": reduction,
        "RETURN_Z_LOSS": False, "RETURN_TOKEN_ACCURACY": False, "RETURN_PREDICTED_TOKENS": False,
        "BLOCK_SIZE": min(liger.MAX_FUSED_SIZE, triton.next_power_of_2(AOT_COLS)),
        "HAS_WEIGHT": False, "HAS_SOFTCAPPING": False, "HAS_GRADIENTS": gradients,
    }
    sig = {"X_ptr": ptr, "X_stride": "i32", "Y_ptr": "*i64", "Y_stride": "i32", "loss_ptr": ptr,
           "loss_stride": "i32", "token_accuracy_stride": "i32", "predicted_tokens_stride": "i32",
           "n_cols": "i32", "n_non_ignore": "i32", "sum_non_ignore_weight": "i32", "weight_sum": "fp32",
           "ignore_index": "i32"}
    sig.update({k: "constexpr" for k in constexprs})
    return AotSpec(fn=fn, signature=ordered_signature(fn, sig), constexprs=constexprs,
                   options={"num_warps": 32}, aligned=("X_ptr", "Y_ptr", "loss_ptr"))


def forward_aot(arch, dtype, config):
    return _aot(dtype, gradients=False, reduction="sum")


def fused_aot(arch, dtype, config):
    return _aot(dtype, gradients=True, reduction="mean")


def backward_aot(arch, dtype, config):
    return _aot(dtype, gradients=True, reduction="sum")
