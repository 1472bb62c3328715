"""Find plugins and fill a registry from them.

Plugins come from the ``tkreg`` entry-point group of installed distributions (the path built-in
plugins take too) and, for tests and local work, from objects passed in-process. ``TKREG_PLUGINS``
limits the entry points loaded: unset means all, empty means none, a comma list means only those.
A plugin that fails to import, or registers something invalid, is recorded as a problem naming
the plugin, its distribution and version, and the error; every other plugin still loads. A name in
``TKREG_PLUGINS`` that no installed distribution provides is not an error here (the registry just
lacks it); :func:`unknown_selected` finds such names, for the CLI and the pytest plugin to report.
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any

import pluggy

from . import hookspecs
from .errors import TkregError
from .registry import PluginInfo, PluginProblem, Registry
from .specs import Kernel, Op, Scheduler

ENTRY_POINT_GROUP = "tkreg"
ENV_VAR = "TKREG_PLUGINS"

_SPEC_TYPES: dict[str, type] = {"op": Op, "scheduler": Scheduler, "kernel": Kernel}


_default: list[Registry] = []  # the one default registry, once built
_building = threading.RLock()  # reentrant: a plugin's import may ask for the registry


def default_registry() -> Registry:
    """The registry of installed plugins (entry points, filtered by TKREG_PLUGINS), built once,
    by one thread where several ask at once; :func:`forget_default_registry` forgets it."""
    if _default:
        return _default[0]
    with _building:
        if not _default:
            _default.append(build_registry())
        return _default[0]


def forget_default_registry() -> None:
    """The next :func:`default_registry` loads the plugins again."""
    with _building:
        _default.clear()


def selected_names(env: Mapping[str, str] | None = None) -> set[str] | None:
    """Entry-point names ``TKREG_PLUGINS`` allows; None means all."""
    value = (os.environ if env is None else env).get(ENV_VAR)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def installed_plugins() -> list[PluginInfo]:
    """Every plugin in the entry-point group, selected by TKREG_PLUGINS or not (none is imported)."""
    return [_info(ep) for ep in entry_points()]


def unknown_selected(env: Mapping[str, str] | None = None) -> list[str]:
    """Names in TKREG_PLUGINS that no installed distribution provides (a typo, or a plugin that
    is not installed), sorted; empty when TKREG_PLUGINS is unset."""
    allowed = selected_names(env)
    if not allowed:
        return []
    installed = {ep.name for ep in entry_points()}
    return sorted(allowed - installed)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name`` (difflib's ratio of at least 0.6), or None."""
    matches = difflib.get_close_matches(name, list(known), n=1)
    return matches[0] if matches else None


def unknown_names_message(kind: str, unknown: Iterable[str], known: Iterable[str], known_as: str = "known") -> str:
    """``unknown op 'nrom' (did you mean 'norm'?); known ops: ...`` for the names given and known."""
    known = sorted(known)
    parts = []
    for name in unknown:
        match = closest(name, known)
        parts.append(f"{name!r}" + (f" (did you mean {match!r}?)" if match else ""))
    plural = "s" if len(parts) > 1 else ""
    return f"unknown {kind}{plural} {', '.join(parts)}; {known_as} {kind}s: {', '.join(known) or 'none'}"


def unknown_plugins_message(env: Mapping[str, str] | None = None) -> str:
    """What is wrong with TKREG_PLUGINS, naming the installed plugins; empty when nothing is."""
    unknown = unknown_selected(env)
    if not unknown:
        return ""
    installed = [p.name for p in installed_plugins()]
    value = (os.environ if env is None else env).get(ENV_VAR, "")
    return f"{ENV_VAR}={value!r}: {unknown_names_message('plugin', unknown, installed, known_as='installed')}"


def plugins_from_files(files: Iterable[tuple[str, str]]) -> list[tuple[str, Any]]:
    """In-process plugins (conftests implementing tkreg hooks) loaded again from their files, as
    (name, module) pairs for build_registry: how a child process (compile worker, runner) gets the
    plugins the pytest process found."""
    import importlib.util

    loaded = []
    for name, path in files:
        spec = importlib.util.spec_from_file_location(f"tkreg_child_plugin_{name}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import plugin {name} from {path}")
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs, as an import would: its specs may name their functions by
        # f"{__name__}:function", which refs.resolve imports by that name.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        loaded.append((name, module))
    return loaded


def build_registry(
    *,
    use_entry_points: bool = True,
    plugins: Iterable[tuple[str, Any]] = (),
    env: Mapping[str, str] | None = None,
) -> Registry:
    """A registry filled from entry points (filtered by TKREG_PLUGINS) and ``plugins``, a list of
    (name, object with hook implementations) registered in-process."""
    registry = Registry()
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    loaded: list[tuple[PluginInfo, Any]] = []

    if use_entry_points:
        allowed = selected_names(env)
        for ep in entry_points():
            if allowed is not None and ep.name not in allowed:
                continue
            info = _info(ep)
            try:
                obj = ep.load()
            except Exception as e:  # a broken plugin must not take the others down
                registry.problems.append(PluginProblem(info, "import", _one_line(e)))
                continue
            loaded.append((info, obj))
    loaded.extend((PluginInfo(name), obj) for name, obj in plugins)

    accepted: list[tuple[PluginInfo, Any]] = []
    for info, obj in loaded:
        try:
            manager.register(obj, name=info.name)
        except (pluggy.PluginValidationError, ValueError) as e:
            registry.problems.append(PluginProblem(info, "hook validation", _one_line(e)))
            continue
        accepted.append((info, obj))
        registry.plugins.append(info)

    for hook_name, kind in hookspecs.STAGES:
        for info, _ in accepted:
            others = [o for i, o in accepted if i.name != info.name]
            caller = manager.subset_hook_caller(hook_name, remove_plugins=others)
            register = _register_callback(registry, info, kind)
            try:
                caller(register=register)
            except Exception as e:  # report and keep going; what it registered before stays
                registry.problems.append(PluginProblem(info, f"register {kind}s", _one_line(e)))
    return registry


def _info(ep: metadata.EntryPoint) -> PluginInfo:
    dist = ep.dist
    return PluginInfo(ep.name, dist.name if dist else "", dist.version if dist else "")


def _register_callback(registry: Registry, info: PluginInfo, kind: str) -> Callable[[Any], None]:
    expected = _SPEC_TYPES[kind]

    def register(spec: Any) -> None:
        if not isinstance(spec, expected):
            registry.problems.append(
                PluginProblem(info, f"register {kind}", f"expected a {expected.__name__}, got {type(spec).__name__}")
            )
            return
        try:
            registry.add(spec, info)
        except TkregError as e:
            registry.problems.append(PluginProblem(info, f"register {kind}", str(e)))

    return register


def _one_line(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"
