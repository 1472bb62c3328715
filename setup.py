"""Builds tkreg.ops' plan key and planned call in C++ (tkreg/ops/native) where torch is importable in the build.

Everything else is in pyproject.toml. torch is not a build requirement: an isolated build (pip's
default) has none and installs tkreg without the extension, as does a machine without a C++
compiler; tkreg.ops then builds its keys in Python (see tkreg/ops/native/__init__.py).
``make install`` builds without isolation, against the torch it installed first.
"""

from __future__ import annotations

import sys

from setuptools import setup

SOURCES = ["tkreg/ops/native/plan_key.cpp", "tkreg/ops/native/fast_call.cpp", "tkreg/ops/native/outputs.cpp"]


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

    version = torch.__version__
    extension = CppExtension(
        "tkreg.ops.native._plan_key",
        SOURCES,
        define_macros=[("TKREG_TORCH_VERSION", f'"{version}"')],
        extra_compile_args=["-O2", "-w"],
    )
    return {"ext_modules": [extension], "cmdclass": {"build_ext": OptionalBuild.with_options(use_ninja=False)}}


setup(**native_extension())
