"""Compile ahead: run every kernel, the peer, its rivals and tkreg.ops once on each input signature the
selected suites time, in parallel worker processes, so that Triton's on-disk cache serves the
suites (compiling is CPU-bound and the benchmark items would otherwise compile one variant after
another, alone on the GPU). Nothing is timed and no file is written; a signature that fails here
fails again, with its message, in the suite that times it."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

from ..core import refs
from ..core.loading import default_registry
from .calls import Signature, kernel_calls, make_inputs, ops_call, say
from .suites import Deadline, Measured, by_name

# Workers: compiling takes a core each; the GPU machine has cores to spare, its memory less so
# (each worker holds one signature's inputs and outputs, up to 16 GB for the largest add).
MAX_WORKERS = 8
STOP_MARGIN_S = 5.0  # end the workers this long before the step's limit


def run_once(sig: Signature) -> list[str]:
    """(worker) Every candidate once on ``sig``'s inputs; the failures, in words."""
    import torch

    failures: list[str] = []
    try:
        _run_candidates(sig, failures)
        torch.cuda.synchronize()
    except Exception as e:  # out of memory, a broken plugin
        failures.append(f"{sig.label}: {_first_line(e)}")
    finally:
        # the inputs are gone; their memory goes back to the GPU for the other workers
        torch.cuda.empty_cache()
    return failures


def _run_candidates(sig: Signature, failures: list[str]) -> None:
    registry = default_registry()
    op = registry.op(sig.op)
    inputs = make_inputs(registry, sig)
    calls = {"peer": _peer_with_output(op, inputs, op.peer), "tkreg.ops": ops_call(op, inputs),
             **kernel_calls(registry, op, inputs)}  # fmt: skip
    # rivals (torch.compile of the same function, say) compile too: into their own caches
    calls.update({name: _peer_with_output(op, inputs, ref) for name, ref in getattr(op, "rivals", {}).items()})
    for name, call in calls.items():
        if call is None:
            continue
        try:
            call()
        except Exception as e:  # reported; the suite that times it reports it again
            failures.append(f"{sig.label} {name}: {_first_line(e)}")


def _peer_with_output(op: Any, inputs: tuple[Any, ...], ref: Any) -> Any:
    """The peer (or a rival: called the same way) writing into an output of the op's."""
    from ..testing import harness

    if ref is None:
        return None
    out = harness.poisoned_output(op, inputs, op.defaults)
    implementation, params = refs.resolve(ref), op.defaults
    return lambda: implementation(*inputs, out=out, **params)


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {text}"


def warm_up(sigs: list[Signature], workers: int, seconds: float) -> list[str]:
    """Run every signature once in ``workers`` processes, largest inputs first (the long compiles
    of large-problem variants start early); after ``seconds`` the workers are ended. The failures."""
    if workers < 1 or not sigs:
        return []
    failures: list[str] = []
    end = time.monotonic() + seconds
    pool = multiprocessing.get_context("spawn").Pool(workers)
    try:
        results = pool.imap_unordered(run_once, sorted(sigs, key=lambda s: -s.size))
        for _ in sigs:
            try:
                failures.extend(results.next(timeout=max(0.1, end - time.monotonic())))
            except multiprocessing.TimeoutError:
                failures.append(f"stopped after {seconds:.0f} s; the suites compile the rest")
                break
    finally:
        pool.terminate()
        pool.join()
    return failures


def signatures_of(suite_names: list[str]) -> list[Signature]:
    """The union of what the named suites time, in first-seen order."""
    registry = default_registry()
    found: dict[Signature, None] = {}
    for suite in by_name(suite_names):
        if suite.warm:
            found.update(dict.fromkeys(refs.resolve(suite.warm)(registry)))
    return list(found)


def measure(deadline: Deadline, suites: str = "") -> Measured:
    sigs = signatures_of([s for s in suites.split(",") if s])
    workers = max(1, min(MAX_WORKERS, (os.cpu_count() or 2) // 2))
    say(f"warm: {len(sigs)} signatures in {workers} processes")
    failures = warm_up(sigs, workers, deadline.left() - STOP_MARGIN_S)
    for failure in failures[:20]:
        say(f"  warm: {failure}")
    return Measured(kind="warm")
