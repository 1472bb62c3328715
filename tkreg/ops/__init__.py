"""tkreg.ops: every registered op as a callable, ``tkreg.ops.<op>(*inputs)``, and as a PyTorch
operator, ``torch.ops.tkreg.<op>``.

    import tkreg
    y = tkreg.ops.<op>(x, weight, eps=1e-5)   # tensors as the op's contract takes them, params by keyword
    print(tkreg.ops.explain("<op>", x, weight))  # which kernel a call runs, and why

The callables are built from the registry on first use (that imports torch; importing this
module does not), one per op, so a third-party plugin's op appears here with no code in tkreg.
Each takes the op's inputs (any rank its calling contract allows, see :mod:`tkreg.ops.forms`)
and its parameters by keyword, returns the outputs the op marks ``returned``, and is
differentiable in the inputs the op lists in ``grads``.
See :mod:`tkreg.ops.dispatch` for how a call picks its kernel and what is cached, and
:mod:`tkreg.ops.library` for the torch operators (torch.compile, autograd).
"""

from __future__ import annotations

import pkgutil
import threading
from collections.abc import Callable
from typing import Any

from .dispatch import PeerFallbackWarning
from .gradients import NoGradientError
from .tracing import TRACEABLE

__all__ = [
    "NoGradientError",
    "PeerFallbackWarning",
    "explain",
    "get",
    "install",
    "names",
    "traceable",
    "tune",
    "tune_model",
    "uninstall",
    "warm",
]
# Op names that stay reachable through get() only: they would hide this package's own names, its
# functions and its modules (importing a module sets the package's attribute of that name).
_MODULES = frozenset(module.name for module in pkgutil.iter_modules(__path__))
_RESERVED = {*__all__, *_MODULES}

_installed: dict[str, Any] = {"registry": None, "ops": {}, "dispatchers": {}}
# One install at a time: threads that first use tkreg.ops together get one set of callables and
# torch operators (registering an operator twice at once fails). Reentrant: installing imports
# plugins, which may use tkreg.ops.
_installing = threading.RLock()


def install(registry: Any = None) -> list[str]:
    """Build the callables for every op of ``registry`` (default: the installed plugins' registry) and
    make them this module's attributes, replacing those of a previous install; returns their
    names. Called on first use; call it again after tkreg.reload() or to use another registry."""
    with _installing:
        return _install(registry)


def _install(registry: Any) -> list[str]:
    from ..core.loading import default_registry
    from .dispatch import Dispatcher
    from .library import entry_point, torch_operator
    from .walltime import ensure_ranker

    registry = default_registry() if registry is None else registry
    ensure_ranker(registry)
    module = globals()
    for name in _installed["ops"]:
        module.pop(name, None)
    ops: dict[str, Callable[..., Any]] = {}
    dispatchers = {}
    for op in registry.ops():
        dispatcher = dispatchers[op.name] = Dispatcher(registry, op)
        dispatcher.siblings = dispatchers
        slot, overload = torch_operator(dispatcher)
        ops[op.name] = dispatcher.entry = entry_point(dispatcher, overload, *((slot.differentiable, slot.transformed)
                                                                              if slot is not None else ()))  # fmt: skip
        if slot is not None:
            slot.entry = ops[op.name]
    _installed.update(ops=ops, dispatchers=dispatchers)
    for name, fn in ops.items():
        if name.isidentifier() and name not in _RESERVED:
            module[name] = fn
    _installed["registry"] = registry  # last: a first use that finds it set finds everything else
    return sorted(ops)


def uninstall() -> None:
    """Forget the callables; the next use builds them again from tkreg.default_registry()."""
    with _installing:
        module = globals()
        for name in _installed["ops"]:
            module.pop(name, None)
        _installed.update(registry=None, ops={}, dispatchers={})


def _replace_callable(name: str, old: Callable[..., Any], new: Callable[..., Any]) -> bool:
    """Make ``new`` op ``name``'s callable wherever install() put ``old`` (this module's attribute,
    get(), what warming calls); False, changing nothing, where ``old`` is no longer it (a later
    install). A reference a caller took before keeps ``old``."""
    if _installed["ops"].get(name) is not old:
        return False
    _installed["ops"][name] = new
    dispatcher = _installed["dispatchers"][name]
    if dispatcher.entry is old:
        dispatcher.entry = new
    module = globals()
    if module.get(name) is old:
        module[name] = new
    return True


def _ops() -> dict[str, Callable[..., Any]]:
    if _installed["registry"] is None:
        with _installing:
            if _installed["registry"] is None:  # another thread's first use may have installed meanwhile
                _install(None)
    return _installed["ops"]


def get(name: str) -> Callable[..., Any]:
    """The callable of op ``name`` (also for names that are not identifiers)."""
    ops = _ops()
    if name not in ops:
        from ..core.errors import UnknownNameError

        raise UnknownNameError("op", name, list(ops))
    return ops[name]


def names() -> list[str]:
    return sorted(_ops())


def explain(op: str, *inputs: Any, **params: Any) -> str:
    """What ``tkreg.ops.<op>(*inputs, **params)`` does with these inputs and why, without running it."""
    get(op)  # an unknown op's error lists the known ones
    return _installed["dispatchers"][op].describe(inputs, params)


def tune(op: str, shapes: Any, dtype: str = "bfloat16", variant: str = "", params: Any = None,
         training: bool = False) -> Any:
    """Fill the tuning cache for ``op`` on inputs of each shape, with ``training`` its training
    choices too (see :mod:`tkreg.ops.prefill`)."""
    from .prefill import tune as run

    return run(op, shapes, dtype, variant, params, training)


def tune_model(config: Any, op: str | None = None, tokens: Any = None, dtype: str = "bfloat16",
               training: bool = False) -> Any:
    """Fill the tuning cache for a model's linear layers, with ``training`` their training
    choices too (see :mod:`tkreg.ops.prefill`)."""
    from .prefill import tune_model as run

    return run(config, op, tokens, dtype, training)


def warm(ops: Any = None) -> dict[str, int]:
    """Replay, on this process's GPUs, every signature earlier processes ran from a measured choice
    (remembered beside the tuning cache), so that later calls of them find their plans made and
    their kernels loaded; returns how many per op. Call it once at start-up, after the model is
    on its GPUs (see :mod:`tkreg.ops.warming`). Without it, a process's first call on a GPU
    preloads the newest of those a kernel runs, for up to ``TKREG_PRELOAD_S`` seconds."""
    from .warming import warm as replay

    names = None if ops is None else [ops] if isinstance(ops, str) else list(ops)
    for name in names or ():
        get(name)  # an unknown op's error lists the known ones
    _ops()
    return replay(_installed["dispatchers"], names)


def traceable(launcher: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a launcher that torch.compile may trace on FakeTensors: it launches its Triton kernels
    through ``torch.library.wrap_triton`` and reads no data pointer. Returns the launcher."""
    setattr(launcher, TRACEABLE, True)
    return launcher


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in _MODULES:  # a module not imported yet: ``from . import x`` imports it then
        raise AttributeError(name)
    ops = _ops()
    if name in ops:
        return ops[name]
    raise AttributeError(f"tkreg.ops has no op {name!r}; registered ops: {', '.join(sorted(ops)) or 'none'}")
