"""The device's CUDA context current in the calling thread before a launch fills TMA descriptors.

Triton fills a kernel's host-side tensor descriptors (``make_tensordesc_arg``, which calls the
driver's ``cuTensorMapEncodeTiled``) before its C launch makes the device's primary context
current. In a thread that has made no CUDA call yet the fill fails with "Failed to create tensor
map descriptor: invalid device context". torch's autograd engine runs a backward in a thread of
its own, so a backward whose first work is a tkreg kernel with descriptors (the matmul formula's
products on Hopper) met it, as does a caller's worker thread. This makes the context current the
way triton's launch does (the device's primary context, retained), once per thread and device.
"""

from __future__ import annotations

import ctypes
import functools
import threading

from ..core.platform import cuda_driver

_made = threading.local()  # .devices: the devices this thread has a current context for
# The driver library, loaded and initialized once per process (tkreg.core.platform's own).
_driver = functools.cache(cuda_driver)


def make_current(device: int) -> None:
    """Makes ``device``'s primary context current in this thread where none is; cheap after the
    first call. A failure here is left to the fill, which raises the driver's own error."""
    devices = getattr(_made, "devices", None)
    if devices is None:
        devices = _made.devices = set()
    if device in devices:
        return
    if _make_current(device):
        devices.add(device)


def _make_current(device: int) -> bool:
    cuda = _driver()
    if cuda is None:
        return False
    context = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(context)) != 0:
        return False
    if context.value:  # a context is current here already (torch's, or one made before)
        return True
    handle = ctypes.c_int()
    return (cuda.cuDeviceGet(ctypes.byref(handle), device) == 0
            and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle) == 0
            and cuda.cuCtxSetCurrent(context) == 0)  # fmt: skip
