"""The shapes nobody chose: per op, random signatures drawn across the sizes its contract names,
in its benchmark dtypes and layouts, from a seed the record keeps; and for a tuned one, another
shape of the same tuning bucket."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from ...core.specs import Op
from ...ops.tuning import bucket_floor, bucket_size
from ..calls import Signature

SHAPES_PER_OP = {"linear": 10}  # random shapes per contract kind (others: DEFAULT_SHAPES)
DEFAULT_SHAPES = 12
MAX_ELEMENTS = 1 << 26  # per input: keeps each shape's inputs under a few hundred MB
LINEAR_WIDTHS = (256, 16384)  # N and K of a linear layer: model widths, multiples of 64


def unseen(op: Op, rng: random.Random) -> list[Signature]:
    """Random signatures across the sizes the op's contract names, in its benchmark dtypes and the
    layouts (case variants) its benchmark cases use."""
    names = op.contract.dims or tuple(op.cases_in("bench")[0].dims)
    variants = sorted({c.variant for c in op.cases_in("bench")} | {""})
    found: list[Signature] = []
    while len(found) < SHAPES_PER_OP.get(op.contract.kind, DEFAULT_SHAPES):
        dims = _random_dims(op.contract.kind, names, rng)
        if max(_elements(op.contract.kind, dims)) > MAX_ELEMENTS:
            continue
        found.append(Signature.of(op.name, dims, rng.choice(op.bench_dtypes), rng.choice(variants)))
    return found


def sibling(sig: Signature, kind: str, rng: random.Random, odd_width: bool = False) -> Signature | None:
    """Another signature of ``sig``'s tuning bucket: every size over 8 redrawn at random within its
    bucket, keeping its remainder modulo 8 (a linear layer's widths modulo 64, multiples of it as
    :func:`unseen` draws them), so its rows class too; the dtype and layout kept; None where no
    size can change. ``odd_width``: a linear layer's N drawn odd instead (a vocabulary of 50257,
    say), rows off 16 bytes: another bucket, which TMA kernels refuse and cuBLAS runs slower."""
    dims = dict(sig.dims)
    names = list(dims)
    widths = set(names[1:]) if kind == "linear" else set()
    odd = odd_width and kind == "linear"
    for _ in range(20):
        drawn = {name: within_bucket(n, rng, 64 if name in widths else 8) for name, n in dims.items()}
        if odd:
            drawn[names[1]] = within_bucket(dims[names[1]], rng, 2, remainder=1)
            if drawn[names[1]] % 2 == 0:  # an exact even size: its bucket has no odd one
                return None
        if drawn != dims and max(_elements(kind, drawn)) <= MAX_ELEMENTS:
            return Signature.of(sig.op, drawn, sig.dtype, sig.variant)
    return None


def within_bucket(n: int, rng: random.Random, step: int = 8, remainder: int | None = None) -> int:
    """A size drawn at random from ``n``'s bucket (tkreg.ops.tuning.bucket_size), equal to
    ``remainder`` (default: ``n``'s) modulo ``step``: by default rows of it span a multiple of 16
    bytes where ``n``'s do (the bucket's rows class, tkreg.ops.choosing). ``n`` for the exact
    sizes up to 8, or where the bucket has no such size."""
    top = bucket_size(n)
    wanted = n % step if remainder is None else remainder
    sizes = [m for m in range(bucket_floor(n) + 1, top + 1) if m % step == wanted] if top > 8 else []
    return rng.choice(sizes) if sizes else n


def _random_dims(kind: str, names: Sequence[str], rng: random.Random) -> dict[str, int]:
    def log_uniform(low: int, high: int) -> int:
        return round(math.exp(rng.uniform(math.log(low), math.log(high))))

    if kind == "linear":
        m = log_uniform(1, 8192)
        n, k = (64 * max(1, log_uniform(*LINEAR_WIDTHS) // 64) for _ in range(2))
        return dict(zip(names, (m, n, k)))
    return {name: log_uniform(1, 1 << 17) for name in names}


def _elements(kind: str, dims: dict[str, int]) -> list[int]:
    sizes = list(dims.values())
    if kind == "linear":
        m, n, k = sizes
        return [m * k, k * n, m * n]
    return [math.prod(sizes)]

