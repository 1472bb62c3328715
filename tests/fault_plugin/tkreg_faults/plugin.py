"""Registers the faulty ``add`` kernels (specs only: imports neither torch nor triton).

Every one is ranked far below the real add kernels (priority -100), takes float32 only (fewer
items, same coverage) and names its fault, so a run's report reads plainly:

- GPU kernels (need a CUDA GPU): ``add_fault_oob`` stores 2^36 elements past its output (an
  illegal address: a sticky CUDA error), ``add_fault_assert`` trips a device-side assert (sticky
  too), ``add_fault_spin`` never finishes.
- CPU launchers (run anywhere, under the interpreter included): ``add_fault_kill`` SIGKILLs its
  own process, ``add_fault_segfault`` reads address 0, ``add_fault_blocked`` blocks every signal
  and sleeps for an hour.
"""

from __future__ import annotations

from collections.abc import Callable

import tkreg

FAULTS = {
    "add_fault_oob": ("stores far out of bounds (illegal memory access)", False),
    "add_fault_assert": ("trips a device-side assert", False),
    "add_fault_spin": ("spins forever on the GPU", False),
    "add_fault_kill": ("SIGKILLs its own process in the launcher", True),
    "add_fault_segfault": ("dereferences a null pointer in the launcher (SIGSEGV)", True),
    "add_fault_blocked": ("blocks every signal, then sleeps for an hour in the launcher", True),
}


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[tkreg.Kernel], None]) -> None:
    for name, (what, on_cpu) in FAULTS.items():
        register(
            tkreg.Kernel(
                name=name,
                op="add",
                launcher=f"tkreg_faults.launchers:{name}",
                requires=tkreg.Requirements(dtypes=("float32",)),
                interpretable=on_cpu,
                priority=-100,  # never chosen by lookup or dispatch while a real kernel can run
                description=f"FAULT FIXTURE: {what}",
            )
        )
