"""The dispatch suite's part of the benchmark record: tkreg.ops' choice on shapes nobody chose
(per op), inside tuned buckets, replayed from CUDA graphs, a cold process with a warm cache, and
compiled and training use. Only the standard library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .figures import geomean, is_number, median_of_sorted, ratio_range, us_text
from .markdown import table


def dispatch_table(document: Mapping[str, Any]) -> str:
    """The dispatch suite: tkreg.ops' choice on shapes nobody chose (per op), a cold process with a
    warm cache, CUDA graphs, compiled and training use."""
    rows = list(document.get("rows") or [])
    summary = document.get("summary") or {}
    picks = [r for r in rows if r.get("check") == "pick" and is_number(r.get("ratio"))]
    body = []
    for op in sorted({r["op"] for r in picks}):
        mine = [r for r in picks if r["op"] == op]
        choices = [r["choice_ratio"] for r in mine if is_number(r.get("choice_ratio"))]
        body.append([op, str(len(mine)), f"{sum(1 for r in mine if r.get('choice_pass'))}",
                     f"{min(choices):.2f}" if choices else "-", f"{sum(1 for r in mine if r.get('pass'))}",
                     f"{geomean(r['ratio'] for r in mine):.2f}"])  # fmt: skip
    parts = [
        f"Random shapes (seed {summary.get('seed', '?')}): the candidate tkreg.ops chose was within 5% of the fastest "
        f"on {summary.get('choices_within', '?')} of {summary.get('picks', '?')}; tkreg.ops end to end (its dispatch "
        f"included) on {summary.get('picks_within', '?')} (geomean {summary.get('pick_geomean', '?')} of the fastest).",
        "",
        table(["op", "shapes", "choice within 5%", "worst choice", "tkreg.ops within 5%", "tkreg.ops / fastest (geomean)"],
              body, [False, True, True, True, True, True]),
    ]  # fmt: skip
    missed = _pick_misses_text(picks)
    if missed:
        parts += ["", missed]
    replayed = _replayed_text(picks)
    if replayed:
        parts += ["", replayed]
    inside = _inside_buckets_text([r for r in rows if r.get("check") == "bucket" and is_number(r.get("ratio"))])
    if inside:
        parts += ["", inside]
    cold = [r for r in rows if r.get("check") == "cold" and is_number(r.get("first_us")) and r.get("warm_us")]
    failed = [r for r in rows if r.get("check") == "cold" and r.get("error")]
    if cold or failed:
        parts += ["", " ".join(part for part in (_cold_text(cold), _cold_failures(failed)) if part)]
    graphs = [r for r in rows if r.get("check") == "graph"]
    if graphs:
        if all("runs" in r for r in graphs):  # what each captured call ran (older records do not say)
            same = [f"{r['op']} ({r['runs']})" for r in graphs if r.get("same_bits")]
            said = "the bits of an eager call of what it ran"
        else:
            same, said = [r["op"] for r in graphs if r.get("same_bits")], "the eager call's bits"
        parts += ["", f"CUDA graphs: a tuned call captured and replayed gave {said} for "
                  f"{', '.join(same) or 'none'} ({len(same)} of {len(graphs)} ops)."]  # fmt: skip
    work = []
    for r in rows:
        if r.get("check") == "compiled_mlp" and is_number(r.get("ratio")):
            work.append([f"Llama MLP block, {r['tokens']} tokens, torch.compile", us_text(r.get("tkreg_us")),
                         us_text(r.get("torch_compile_us")), _ratio_with_rounds(r, "ratio")])  # fmt: skip
            if is_number(r.get("graphs_ratio")):
                work.append([f"Llama MLP block, {r['tokens']} tokens, torch.compile reduce-overhead",
                             us_text(r.get("tkreg_graphs_us")), us_text(r.get("torch_graphs_us")),
                             _ratio_with_rounds(r, "graphs_ratio")])  # fmt: skip
            work.append([f"Llama MLP block, {r['tokens']} tokens, eager", us_text(r.get("eager_tkreg_us")),
                         us_text(r.get("eager_torch_us")), f"{r['eager_torch_us'] / r['eager_tkreg_us']:.3f}"])  # fmt: skip
        if r.get("check") == "training" and is_number(r.get("ratio")):
            how = f", float32 weights under autocast({r['autocast']})" if r.get("autocast") else ""
            work.append([f"2-layer MLP training step, {r['tokens']} tokens{how}", us_text(r.get("tkreg_us")),
                         us_text(r.get("torch_us")), _ratio_with_rounds(r, "ratio")])  # fmt: skip
        if r.get("check") == "row_training" and is_number(r.get("ratio")):
            work.append([f"{r['op']} forward and backward, {r['shape']}", us_text(r.get("tkreg_us")), us_text(r.get("torch_us")),
                         _ratio_with_rounds(r, "ratio")])  # fmt: skip
    if work:
        rounds = any(f"{k}_quartiles" in r for r in rows for k in ("ratio", "graphs_ratio"))
        parts += ["", table(["workload (bf16)", "through tkreg.ops (us)", "torch (us)",
                             "torch / tkreg (by round: quartiles)" if rounds else "torch / tkreg"], work,
                            [False, True, True, True])]  # fmt: skip
    coded = [r for r in rows if r.get("check") == "compiled_mlp" and "same_code" in r]
    if coded:
        same = [str(r["tokens"]) for r in coded if r["same_code"]]
        parts += ["", f"Inductor generated the same code for the block through tkreg.ops as for torch's at "
                  f"{' and '.join(same) or 'no'} tokens ({len(same)} of {len(coded)} block sizes)."]  # fmt: skip
    return "\n".join(parts)


def _ratio_with_rounds(row: Mapping[str, Any], key: str) -> str:
    """A workload's ratio of medians, and where the row has them the quartiles of the same ratio
    round by round: how far one run's reading could move (a host-bound step spreads widely)."""
    spread = row.get(f"{key}_quartiles")
    text = f"{row[key]:.3f}"
    if isinstance(spread, list) and len(spread) == 2 and all(is_number(v) for v in spread):
        text += f" ({spread[0]:.2f}-{spread[1]:.2f})"
    return text


def _pick_misses_text(picks: Sequence[Mapping[str, Any]]) -> str:
    """Each shape where tkreg.ops end to end was over 5% behind the fastest: its ratio, and where
    the row has them the ratio's quartiles round by round (the first sitting's), which say whether
    the miss stood clear of the host's noise between rounds. A kernel is named without its config."""
    missed = sorted((r for r in picks if r.get("pass") is False), key=lambda r: r["ratio"])
    if not missed:
        return ""
    said = [f"{r['op']} {r['shape']} {r.get('dtype', '')} ({str(r.get('chosen', '?')).split('[')[0]} chosen, "
            f"{_ratio_with_rounds(r, 'ratio')})" for r in missed]  # fmt: skip
    rounds = " (by round: quartiles)" if any("ratio_quartiles" in r for r in missed) else ""
    return f"tkreg.ops over 5% behind the fastest, fastest / tkreg.ops{rounds}: {'; '.join(said)}."


def _replayed_text(picks: Sequence[Mapping[str, Any]]) -> str:
    """The picks replayed from CUDA graphs: tkreg.ops (its choice for captured calls) against the
    fastest replayed, and what the eager choice would have given there."""
    replayed = [r for r in picks if is_number(r.get("graph_ratio"))]
    if not replayed:
        return ""
    eager = []
    for r in replayed:
        times = {k: v for k, v in (r.get("graphed_us") or {}).items() if k != "tkreg.ops" and is_number(v)}
        if times and r.get("chosen") in times:
            eager.append(min(times.values()) / times[r["chosen"]])
    switched = sum(1 for r in replayed if r.get("graph_chosen") not in (None, r.get("chosen")))
    text = (f"Replayed from CUDA graphs (each call captured a few hundred times over, the replays timed: the calls' "
            f"GPU time alone), tkreg.ops was within 5% of the fastest replayed on "
            f"{sum(1 for r in replayed if r.get('graph_pass'))} of {len(replayed)} shapes (geomean "
            f"{geomean(r['graph_ratio'] for r in replayed):.3f}); a captured call ran another candidate than an eager "
            f"one on {switched}.")  # fmt: skip
    if eager:
        text += (f" The eager choice, replayed, would have been within 5% on {sum(1 for x in eager if x >= 0.95)} of "
                 f"{len(eager)} (geomean {geomean(eager):.3f}).")  # fmt: skip
    return text


def untimed_siblings(siblings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The bucket siblings (``check`` "bucket") that found their tuned bucket and timed nothing."""
    return [r for r in siblings if r.get("same_bucket") and r.get("timing_calls") == 0]


def own_bucket_siblings(siblings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The bucket siblings in a bucket of their own: another rows class (an odd width), or a shape
    the bucket's winner refuses."""
    return [r for r in siblings if r.get("own_bucket")]


def _inside_buckets_text(siblings: Sequence[Mapping[str, Any]]) -> str:
    """Other shapes of tuned buckets: did they time nothing, and did the first shape's choice hold."""
    if not siblings:
        return ""
    held = untimed_siblings(siblings)
    text = (f"Inside the buckets: another shape of {len(siblings)} buckets (every size over 8 redrawn within it) "
            f"found the first shape's choice and timed nothing on {len(held)}")
    if held:
        text += (f"; tkreg.ops was within 5% of the fastest for its own inputs on {sum(1 for r in held if r.get('pass'))} "
                 f"of {len(held)} (geomean {geomean(r['ratio'] for r in held):.3f}), the choice called directly on "
                 f"{sum(1 for r in held if r.get('choice_pass'))}")  # fmt: skip
        odd = [r for r in held if r.get("odd_width")]
        if odd:  # recorded before odd widths were a bucket of their own
            text += f" (of them {len(odd)} of an odd width, {sum(1 for r in odd if r.get('pass'))} within 5%)"
    own = own_bucket_siblings(siblings)
    if own:
        odd_widths = sum(1 for r in own if r.get("odd_width"))
        why = "of odd widths (rows off 16 bytes: another bucket)" if odd_widths == len(own) else (
            f"({odd_widths} of odd widths, rows off 16 bytes; {len(own) - odd_widths} refused by their bucket's winner)")
        text += (f"; {len(own)} {why} were timed in a bucket of their own, "
                 f"{sum(1 for r in own if r.get('pass'))} of them then within 5%")
    text += "."
    return text


def _cold_text(cold: Sequence[Mapping[str, Any]]) -> str:
    """A cold process with the warm cache, without and with tkreg.ops.warm() first: how each was
    set up and its timing calls, then a table of first calls against warm calls (where the peer
    runs the shape and where a kernel does; torch's own alike), then what the table leans on."""
    said, body = [], []
    for warmed in (False, True):
        mine = [r for r in cold if bool(r.get("warmed")) is warmed]
        if not mine:
            continue
        kinds = [("every shape", mine)]  # older records do not say what ran each shape
        if all("runs" in r for r in mine):
            kinds = [("the peer runs", [r for r in mine if r["runs"] == "peer"]),
                     ("a kernel runs", [r for r in mine if r["runs"] != "peer"])]  # fmt: skip
        for what, group in kinds:
            if group:
                firsts = [(r["first_us"], r["warm_us"], _after_work(r)) for r in group]
                body.append(_cold_row(f"tkreg.ops, {_cold_process(warmed)}", what, firsts))
        warm_said = f"tkreg.ops.warm() took {mine[0].get('warm_s', '?')} s"
        if "install_s" not in mine[0]:  # older records timed installing tkreg.ops inside warm()
            warm_said += ", installing tkreg.ops included"
        setup = [_installed(mine), warm_said if warmed else _preloaded(mine)]
        setup_said = "; ".join(part for part in setup if part)
        timed = sum(r.get("timing_calls", 0) for r in mine)
        said.append(f"The cold process {_cold_process(warmed)}{f' ({setup_said})' if setup_said else ''} made {timed} "
                    f"timing calls.")  # fmt: skip
    plain = [r for r in cold if not r.get("warmed")]
    peers_first = all(r.get("peers_first") for r in cold)  # older records made each peer's first call just before tkreg's
    torch_first = [(r["torch_first_us"], r["torch_warm_us"], _after_work(r, "torch_")) for r in plain
                   if is_number(r.get("torch_first_us")) and r.get("torch_warm_us")]  # fmt: skip
    if torch_first:
        when = "in a pass before tkreg's" if peers_first else "just before tkreg's"
        body.append(_cold_row(f"torch's own first call, {when}", "every shape", torch_first))
    here = [r for r in plain if is_number(r.get("torch_at_same_point_us")) and r.get("torch_warm_us")]
    if here:
        firsts = [(r["torch_at_same_point_us"], r["torch_warm_us"], None) for r in here]
        body.append(_cold_row("torch's own call at the point of tkreg's first call", "every shape", firsts))
    after_tkreg = [r for r in plain if is_number(r.get("torch_after_tkreg_at_same_point_us")) and r.get("torch_warm_us")]
    if after_tkreg:
        firsts = [(r["torch_after_tkreg_at_same_point_us"], r["torch_warm_us"], None) for r in after_tkreg]
        body.append(_cold_row("torch's own call there, after tkreg.ops' calls of the previous shape", "every shape", firsts))
    if not body:
        return ""
    headers = ["calls", "shapes", "count", "first call within 2x of a warm call",
               "within 2x of a warm call after the same work", "first / warm (median)", "range"]  # fmt: skip
    text = " ".join(said) + "\n\n" + table(headers, body, [False, False, True, True, True, True, False])
    notes = " ".join(_cold_notes(cold, bool(torch_first), here, peers_first, after_tkreg))
    return text + ("\n\n" + notes if notes else "")


def _cold_row(calls: str, shapes: str, firsts: Sequence[tuple[float, float, float | None]]) -> list[str]:
    """A row of the cold-process table from (first, warm, warm after the same work or None) per shape."""
    ratios = sorted(first / warm for first, warm, _ in firsts)
    after = [first / later for first, _, later in firsts if later]
    return [calls, shapes, str(len(ratios)), str(sum(x <= 2.0 for x in ratios)),
            f"{sum(x <= 2.0 for x in after)} of {len(after)}" if after else "-", f"{median_of_sorted(ratios):.1f}x",
            ratio_range(ratios)]  # fmt: skip


def _cold_notes(
    cold: Sequence[Mapping[str, Any]], torch_timed: bool, here: Sequence[Mapping[str, Any]], peers_first: bool,
    after_tkreg: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """What the cold-process table leans on: the order of the calls (where torch's first calls
    were timed), what the misses had in common with torch's own calls at the same point (the rows
    ``here`` that have one, and ``after_tkreg``, where it followed tkreg.ops' calls of the previous
    shape) and tkreg's first calls in that process, the host's part of the first
    calls' cost, the driver's allocations and the base rate of a one-sample miss."""
    said = []
    work_calls = next((r["model_work_calls"] for r in cold if is_number(r.get("model_work_calls"))), None)
    if torch_timed:
        then = (f"each first call (in either pass) right after {work_calls} calls of the previous shape, made after "
                f"its warm calls" if work_calls else "each right after the previous shape's warm calls")  # fmt: skip
        said.append(f"The peer's own first and warm calls of every shape came first, in a pass of their own; then "
                    f"tkreg's, {then}." if peers_first else
                    "Each tkreg first call came right after the peer's own first and warm calls of the shape.")  # fmt: skip
    if here:
        missed, also = misses_torch_also_over_2x(here, "torch_at_same_point_us")
        after = ""
        if work_calls and any(r.get("torch_at_same_point_after") == "peer" for r in here):
            after = f", after {work_calls} of torch's own calls of the previous shape, as a model of torch's alone makes them"
        said.append(f"torch's own call at the point of tkreg's first call was made by a process of its own making the same "
                    f"calls, right before tkreg's first call of the shape{after}. Of the {missed} tkreg first calls "
                    f"over 2x a warm call as a model would call them, torch's was over 2x there too on {also}.")  # fmt: skip
    same_process = [r for r in here if is_number(r.get("first_after_torch_at_same_point_us"))
                    and r.get("warm_in_same_point_process_us")]  # fmt: skip
    if same_process:
        within = sum(r["first_after_torch_at_same_point_us"] <= 2 * r["warm_in_same_point_process_us"] for r in same_process)
        said.append(f"In that process, tkreg's first call right after torch's was within 2x of a warm call on {within} "
                    f"of {len(same_process)}.")  # fmt: skip
    if after_tkreg:
        missed, also = misses_torch_also_over_2x(after_tkreg, "torch_after_tkreg_at_same_point_us")
        said.append(f"A fourth process made torch's call at that point after tkreg.ops' calls of the previous shape "
                    f"instead, the work tkreg's first call came after: of the {missed} tkreg first calls over 2x, "
                    f"torch's was over 2x there too on {also}.")  # fmt: skip
        host = _host_over_torch(after_tkreg)
        if host:
            said.append(host)
    host = _host_part(cold)
    if host:
        said.append(host)
    counted = [r for r in cold if is_number(r.get("device_allocs"))]
    if counted:
        grew = sum(r["device_allocs"] > 0 for r in counted)
        said.append(f"{grew} of the {len(counted)} tkreg first calls took memory from the driver (every shape's "
                    f"inputs were made first).")  # fmt: skip
    spread = [r for r in cold if is_number(r.get("warm_over_2x")) and is_number(r.get("warm_calls"))]
    if spread:  # the base rate of a one-sample miss (.bench.dispatch.cold._first_and_warm)
        said.append(f"A first call is one sample: of the warm calls behind the medians, each also one sample, "
                    f"{sum(r['warm_over_2x'] for r in spread)} of {sum(r['warm_calls'] for r in spread)} took over "
                    f"twice their shape's median.")  # fmt: skip
    if any(_after_work(r) for r in cold):
        work = (("ten of the previous shape's calls, as each first call came right after "
                 + ("calls of the previous shape" if work_calls else "the previous shape's warm calls"))
                if peers_first else "ten of the peer's calls, as the first call was")  # fmt: skip
        said.append(f"A warm call after the same work is one right after {work} (median of three): a call after other "
                    "work costs more than one of a run of calls.")  # fmt: skip
    return said


def _host_part(cold: Sequence[Mapping[str, Any]]) -> str:
    """How much of what tkreg's first calls cost over a warm call the host paid (to the call's
    return), per cold process, leaving out the process's first call (which preloads), where the
    record timed the host's part."""
    parts = []
    for warmed in (False, True):
        mine = [r for r in cold if bool(r.get("warmed")) is warmed and is_number(r.get("first_host_us"))][1:]
        if mine:
            host = sorted(r["first_host_us"] - r["warm_host_us"] for r in mine)
            total = sorted(r["first_us"] - r["warm_us"] for r in mine)
            parts.append(f"{median_of_sorted(host):.1f} of {median_of_sorted(total):.1f} us {_cold_process(warmed)}")
    if not parts:
        return ""
    return f"The host's part of a first call's cost over a warm call (median; the process's first left out): {', '.join(parts)}."


def misses_torch_also_over_2x(rows: Sequence[Mapping[str, Any]], torch_key: str) -> tuple[int, int]:
    """Of ``rows``, each with a torch call of its shape timed under ``torch_key``: how many tkreg
    first calls were over 2x a warm call, and on how many of those torch's call was over 2x its
    warm call too."""
    missed = [r for r in rows if r["first_us"] > 2 * r["warm_us"]]
    return len(missed), sum(r[torch_key] > 2 * r["torch_warm_us"] for r in missed)


def _host_over_torch(after_tkreg: Sequence[Mapping[str, Any]]) -> str:
    """tkreg's first calls where the peer runs against torch's own call at the same point after
    the same tkreg.ops calls, in host time (the process's first call, which preloads, left out):
    what of a peer's first-call cost is tkreg's rather than torch's."""
    pairs = [(r["first_host_us"], r["torch_after_tkreg_at_same_point_host_us"]) for r in after_tkreg
             if r.get("runs") == "peer" and "preload" not in r and is_number(r.get("first_host_us"))
             and is_number(r.get("torch_after_tkreg_at_same_point_host_us"))]  # fmt: skip
    if not pairs:
        return ""
    over = sorted(first - torch for first, torch in pairs)
    return (f"Where the peer runs, tkreg's first call took {median_of_sorted(over):+.1f} us of host time over "
            f"torch's call there (median of {len(over)} shapes, the process's first left out; {over[0]:+.1f} to "
            f"{over[-1]:+.1f}).")  # fmt: skip


def _cold_process(warmed: bool) -> str:
    """Which of the two cold processes: one that called tkreg.ops.warm() first, or not."""
    return "after tkreg.ops.warm()" if warmed else "calling each shape as a model would"


def _cold_failures(failed: Sequence[Mapping[str, Any]]) -> str:
    """The cold processes that gave no figures, and why (a time limit, a crash)."""
    return " ".join(f"The cold process {_cold_process(bool(r.get('warmed')))} gave no figures: {r['error']}." for r in failed)


def _installed(rows: Sequence[Mapping[str, Any]]) -> str:
    """How long installing tkreg.ops took in the process (plugins, torch operators), before its
    calls or warm(), where the record says."""
    seconds = rows[0].get("install_s")
    return "" if seconds is None else f"installing tkreg.ops took {seconds} s"


def _preloaded(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the process's first call loaded ahead (tkreg.ops.warming.preload), where it says."""
    said = next((r["preload"] for r in rows if isinstance(r.get("preload"), Mapping)), None)
    if said is None:
        return ""
    left = f", {said['left']} left to their first calls" if said.get("left") else ""
    return (f"its first call, the process's first through tkreg.ops, loaded {said.get('signatures')} remembered "
            f"kernel signatures ahead in {said.get('seconds')} s{left}")  # fmt: skip


def _after_work(row: Mapping[str, Any], prefix: str = "") -> float | None:
    """A cold row's warm call made after the same work as its first call (us), under the name its
    record gives it: after the previous shape's calls, or in older records after the peer's (or,
    for torch's own, after tkreg's)."""
    older = "torch_warm_after_tkreg_us" if prefix else "warm_after_peer_us"
    got = row.get(f"{prefix}warm_after_same_work_us", row.get(older))
    return got if is_number(got) and got else None
