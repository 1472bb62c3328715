"""The launcher's choice of config and scheduler for a problem (M, N, K, B layout). Pure Python.

1. The measured table (``choice.json``, written by ``scripts/gpu/matmul_suite.py`` on an H100): on a
   shape of the suite, the config and scheduler measured fastest there.
2. Near a measured shape (table distance at most ``NEAR``, see tkreg_matmul.choice_table), the
   measured config, unless the model (:mod:`.model`) estimates it more than ``MODEL_MARGIN`` slower
   here than the model's own best (e.g. a tile count that now needs one more round of units).
3. Elsewhere, the model's fastest candidate (:data:`.config.TILES` with any K split) with the
   scheduler ``MODEL_SCHEDULER``.

Choices are cached per (M, N, K, layout, SM count): the launcher pays for one only once per shape.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tkreg_matmul.choice_table import Entry, Table, packaged_table

from tkreg import InputError

from .config import TILES, HopperConfig, effective_split_k
from .model import estimate, ranked

TABLE_FILE = "choice.json"
TABLE_KIND = "hopper_choice"
NEAR = 0.75  # log2 units: e.g. within a factor 1.68 in one size, the others equal
MODEL_MARGIN = 0.15
# Grouped-8 measured best or within 2% of the best on every shape of the Llama-3-8B projection suite (H100, bf16).
MODEL_SCHEDULER = "grouped-8"


@dataclass(frozen=True)
class Pick:
    config: HopperConfig
    scheduler: str
    why: str


def table() -> Table:
    return packaged_table("tkreg_hopper_matmul", TABLE_FILE, TABLE_KIND)


def entry_config(entry: Entry) -> HopperConfig:
    return HopperConfig.from_params(entry.params)


@functools.lru_cache(maxsize=4096)
def choose(M: int, N: int, K: int, layout: str, num_sms: int) -> Pick:
    """The config and scheduler for C = A @ B, A (M, K), B (K, N) in ``layout``, on ``num_sms`` SMs,
    from the packaged table."""
    return choose_from(table(), M, N, K, layout, num_sms)


def choose_from(table: Table, M: int, N: int, K: int, layout: str, num_sms: int) -> Pick:
    """:func:`choose` with a given table."""
    best_estimate, best = ranked(M, N, K, TILES, num_sms)[0]
    model_pick = Pick(best, MODEL_SCHEDULER, f"model: {best_estimate.describe()}")
    near = table.nearest(M, N, K, layout)
    if near is None or near[1] > NEAR:
        return model_pick
    entry, distance = near
    try:
        config = entry_config(entry)
    except InputError as e:  # a table from another version of the kernel: its entry cannot be built
        return Pick(best, MODEL_SCHEDULER, f"{model_pick.why}; the table's entry for {entry.shape} is unusable: {e}")
    scheduler = entry.scheduler or MODEL_SCHEDULER
    measured = f"measured best at {entry.shape} ({table.provenance()})"
    if distance == 0:
        return Pick(config, scheduler, measured)
    theirs = estimate(M, N, K, config, num_sms).seconds
    if theirs > (1 + MODEL_MARGIN) * best_estimate.seconds:
        slower = theirs / best_estimate.seconds
        return Pick(best, MODEL_SCHEDULER, f"{model_pick.why}; the {measured} is estimated {slower:.2f}x slower here")
    return Pick(config, scheduler, f"{measured}, distance {distance:.2f}")


def explain_choice(M: int, N: int, K: int, layout: str, num_sms: int) -> str:
    """One line: what the launcher runs for this problem and why."""
    pick = choose(M, N, K, layout, num_sms)
    c = pick.config
    split = effective_split_k(K, c)
    shape = f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K} s{c.NUM_STAGES} c{c.CONSUMERS}{' pingpong' if c.PINGPONG else ''}"
    return f"{shape} split-K {split} {pick.scheduler}: {pick.why}"


# Configs tkreg.ops times beside the launcher's own choice when it tunes a shape: the model's best
# two and the measured table's pick with the other scheduler. The table was measured on an H100;
# on another GPU (an H200's faster memory moves the balance) the timing decides between them.
TUNE_FROM_MODEL = 2
OTHER_SCHEDULER = {"grouped-8": "persistent", "persistent": "grouped-8", "grouped-1": "grouped-8"}


def tune_configs(a: Any, b: Any, bias: Any = None) -> list[dict[str, Any]]:
    """A few plausible (config, scheduler) pairs for A (M, K) @ B (K, N) (+ bias: the same tiles),
    as launcher keywords."""
    from tkreg_matmul.gluon_common import num_sms
    from tkreg_matmul.layouts import b_layout

    M, K = a.shape
    N = b.shape[1]
    layout = b_layout(b)
    if layout is None:
        return []
    sms = num_sms(a.device)
    configs: list[dict[str, Any]] = []
    for _, config in ranked(M, N, K, TILES, sms)[:TUNE_FROM_MODEL]:
        configs.append({**config.params(), "scheduler": MODEL_SCHEDULER})
    pick = choose(M, N, K, layout, sms)
    configs.append({**pick.config.params(), "scheduler": OTHER_SCHEDULER.get(pick.scheduler, MODEL_SCHEDULER)})
    return configs
