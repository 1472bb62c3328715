"""Builds tkreg's C++ extensions where torch is importable in the build: tkreg.ops' plan key and
planned call (tkreg/ops/native), and, where triton's copy of cuda.h is there too, recorded launches
made again (tkreg/launch/native).

Everything else is in pyproject.toml. torch is not a build requirement: an isolated build (pip's
default) has none and installs tkreg without the extension, as does a machine without a C++
compiler; tkreg.ops then builds its keys in Python (see tkreg/ops/native/__init__.py).
``make install`` builds without isolation, against the torch it installed first.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

SOURCES = ["tkreg/ops/native/plan_key.cpp", "tkreg/ops/native/fast_call.cpp", "tkreg/ops/native/outputs.cpp",
           "tkreg/ops/native/autocast.cpp", "tkreg/ops/native/replayed_call.cpp",
           "tkreg/ops/native/reordered_call.cpp"]
REPLAY_SOURCES = ["tkreg/launch/native/replay.cpp"]


def triton_cuda_headers() -> str | None:
    """The folder of triton's own cuda.h (its launchers build against it), or None."""
    try:
        import triton
    except ImportError:
        return None
    folder = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include")
    return folder if os.path.isfile(os.path.join(folder, "cuda.h")) else None


def native_extension() -> dict:
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:
        print(f"tkreg: torch is not importable in this build ({e}); the native plan key is not built", file=sys.stderr)
        return {}

    class OptionalBuild(BuildExtension):
        """A failed build leaves tkreg installed without the extension, and says so. The whole
        command is guarded: torch checks the compiler before any extension is built."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as e:  # a missing or failing compiler: the Python keys serve
                print(f"tkreg: the native plan key was not built ({e}); tkreg.ops builds its keys in Python", file=sys.stderr)

    macros = [("TKREG_TORCH_VERSION", f'"{torch.__version__}"')]
    extensions = [CppExtension("tkreg.ops.native._plan_key", SOURCES, define_macros=macros, extra_compile_args=["-O2", "-w"])]
    headers = triton_cuda_headers()
    if headers is None:
        print("tkreg: triton's cuda.h is not here; recorded launches are replayed in Python", file=sys.stderr)
    else:
        extensions.append(CppExtension("tkreg.launch.native._replay", REPLAY_SOURCES, define_macros=macros,
                                       include_dirs=[headers], extra_compile_args=["-O2", "-w"]))  # fmt: skip
    # ninja compiles an extension's sources side by side (torch falls back to one at a time where
    # there is no ninja): `setup.py build_ext --inplace` took 59 s against 78 without it on a 2-core
    # CPU machine (2026-12-04)
    return {"ext_modules": extensions, "cmdclass": {"build_ext": OptionalBuild.with_options(use_ninja=True)}}


setup(**native_extension())
