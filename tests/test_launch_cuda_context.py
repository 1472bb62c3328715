"""tkreg.launch.cuda_context: a thread that has no CUDA context current gets the device's primary
context before descriptors are filled, once per thread and device; a thread that has one, or a
machine without the driver, is left as it is. The driver here is a fake that keeps a current
context per thread, as the real one does (a GPU test launches from a fresh thread:
tests/test_fastlaunch_descriptors.py)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pytest

from tkreg.launch import cuda_context


class FakeDriver:
    """cuCtxGetCurrent, cuDeviceGet, cuDevicePrimaryCtxRetain and cuCtxSetCurrent over a
    per-thread current context; ``fail`` names a call that returns an error."""

    def __init__(self, fail: str = "") -> None:
        self.current = threading.local()
        self.calls: list[tuple[str, Any]] = []
        self.fail = fail

    def _result(self, name: str, arg: Any) -> int:
        self.calls.append((name, arg))
        return 1 if name == self.fail else 0

    def cuCtxGetCurrent(self, out: Any) -> int:  # the driver API names
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = getattr(self.current, "context", None)
        return self._result("get", None)

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        ctypes.cast(out, ctypes.POINTER(ctypes.c_int))[0] = ordinal
        return self._result("device", ordinal)

    def cuDevicePrimaryCtxRetain(self, out: Any, device: Any) -> int:
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = 0x1000 + device.value
        return self._result("retain", device.value)

    def cuCtxSetCurrent(self, context: Any) -> int:
        if self.fail != "set":
            self.current.context = context.value
        return self._result("set", context.value)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(cuda_context, "_driver", lambda: fake)
    monkeypatch.setattr(cuda_context, "_made", threading.local())
    return fake


def _in_a_new_thread(work: Any) -> Any:
    """What ``work()`` returns, run in a thread of its own (where it raised, the error, raised here)."""
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(("returned", work()))
        except BaseException as e:  # raised again in the test's own thread
            got.append(("raised", e))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    how, value = got[0]
    if how == "raised":
        raise value
    return value


def test_a_thread_without_a_context_gets_the_devices_primary_one_once(driver: FakeDriver) -> None:
    def work() -> Any:
        for _ in range(3):
            cuda_context.make_current(1)
        return driver.current.context

    assert _in_a_new_thread(work) == 0x1001
    assert [name for name, _ in driver.calls] == ["get", "device", "retain", "set"]
    assert ("retain", 1) in driver.calls


def test_each_thread_and_device_is_made_current_on_its_own(driver: FakeDriver) -> None:
    _in_a_new_thread(lambda: cuda_context.make_current(0))
    _in_a_new_thread(lambda: cuda_context.make_current(0))  # another thread: its own context
    assert [arg for name, arg in driver.calls if name == "retain"] == [0, 0]
    driver.calls.clear()

    def two_devices() -> None:
        cuda_context.make_current(0)
        driver.current.context = None  # as if the caller had popped it
        cuda_context.make_current(1)
        cuda_context.make_current(0)  # done for this thread already

    _in_a_new_thread(two_devices)
    assert [arg for name, arg in driver.calls if name == "retain"] == [0, 1]


def test_a_thread_with_a_current_context_keeps_it(driver: FakeDriver) -> None:
    def work() -> Any:
        driver.current.context = 0x2000  # torch's runtime made one current before
        cuda_context.make_current(0)
        return driver.current.context

    assert _in_a_new_thread(work) == 0x2000
    assert [name for name, _ in driver.calls] == ["get"]


@pytest.mark.parametrize("failing", ["get", "device", "retain", "set"])
def test_a_driver_error_is_left_to_the_fill_and_tried_again(driver: FakeDriver, failing: str) -> None:
    driver.fail = failing

    def work() -> None:
        cuda_context.make_current(0)  # no exception: the fill raises the driver's own error
        cuda_context.make_current(0)

    _in_a_new_thread(work)
    assert [name for name, _ in driver.calls].count("get") == 2  # not remembered as done


def test_without_the_driver_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_context, "_driver", lambda: None)
    monkeypatch.setattr(cuda_context, "_made", threading.local())
    cuda_context.make_current(0)
    assert not getattr(cuda_context._made, "devices", set())
