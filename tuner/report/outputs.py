"""What a tuning leaves behind: best_spec.mlir, best_flags.txt, results.json, and the table."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console
from rich.table import Table

from tuner.core.names import printable
from tuner.errors import OutputError
from tuner.input.parameters import runtime_flags
from tuner.run_dir import write_file
from tuner.ranking import Ranking
from tuner.core.comparison import Paired
from tuner.core.results import Result, Status


def make_console(stderr: bool = False) -> Console:
    """The console tables and messages go to. On a terminal, rich's (as wide as the terminal);
    piped or redirected, nothing is cut or wrapped (full dispatch names and config labels, one
    line each), unless COLUMNS says how wide to be."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=10_000, soft_wrap=True)


def response_file(flags: list[str]) -> str:
    """Flags as an LLVM response file (`iree-compile INPUT @FILE`), one per line, each quoted
    where it holds whitespace (a newline included: unquoted, it splits the flag in two), a quote
    or a backslash (GNU quoting, as LLVM reads it on Linux)."""
    def quote(flag: str) -> str:
        if not any(c in flag for c in " \t\n\r\v\f\"'\\"):
            return flag
        return '"' + flag.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "".join(quote(f) + "\n" for f in flags)


def rebuild_command(output_dir: Path, program: str, flags_file: str = "best_flags.txt",
                    parameters: Sequence[str] = ()) -> str:
    """How plain iree-compile rebuilds the result: the program the tuner compiled (the user's
    MLIR, or what an ONNX model was imported to, or a dispatch benchmark without its baked
    config, in the run's directory) with the flags in best_flags.txt; paths absolute (model_spec.mlir's
    header held a relative program where the screen showed an absolute one) and quoted for a shell.
    A model with external parameters is run with them (the compiler needs none)."""
    flags = shlex.quote("@" + str((output_dir / flags_file).resolve()))
    program = str(Path(program).resolve())
    run = f"\nrun it with: iree-run-module --module=OUT.vmfb {' '.join(map(shlex.quote, runtime_flags(parameters)))}" \
        if parameters else ""
    return f"iree-compile {shlex.quote(str(program))} {flags} -o OUT.vmfb{run}"


def comment(text: str) -> str:
    """`text` as MLIR comment lines: whatever a path holds (a newline, say) stays in a comment."""
    return "".join(f"// {line}\n" for line in text.splitlines() or [""])


def write_outputs(output_dir: Path, ranking: Ranking, results: list[Result], spec: str, flags: list[str],
                  meta: dict, annotations: Optional[dict[int, dict]] = None) -> None:
    """best_spec.mlir and best_flags.txt rebuild the winner with plain iree-compile (or, when no
    candidate beat the default beyond the noise, the default: an empty spec saying why);
    results.json keeps every candidate (with `annotations`' fields by candidate id: who proposed
    it)."""
    header = comment(f"iree-tuner: {ranking.verdict}") + comment(
        f"rebuild: {rebuild_command(output_dir, meta.get('input', 'INPUT'), parameters=meta.get('parameters', ()))}")
    try:
        write_file(output_dir / "best_spec.mlir", header + spec)
        write_file(output_dir / "best_flags.txt", response_file(flags))
        payload = {
            **meta,
            "best": ranking.best.candidate_id if ranking.best else None,
            "verdict": ranking.verdict,
            "within_noise_of_best": [r.candidate_id for r in ranking.within_noise_of_best()],
            "candidates": [{**r.to_json(), **(annotations or {}).get(r.candidate_id, {})} for r in results],
        }
        write_file(output_dir / "results.json", json.dumps(payload, indent=2))
    except OSError as e:
        raise OutputError(f"cannot write the outputs to {output_dir}: {e.strerror or e}") from None


TABLE_LEGEND = (
    "ms: the candidate's median in its first pass, alone; base ms: the baseline's, timed nearest to it; alone: their "
    "ratio (* timed again after a drift); ±%: the spread of its times; paired: the median of its ratios to the "
    "baseline in the interleaved rounds that chose the winner; won: in how many of them it was faster; after: the "
    "winner's figure, from fresh rounds timed after it was chosen (the choosing rounds run high), with its interval; "
    "err: relative error off the reference")


def _ms(x: Optional[float]) -> str:
    """Milliseconds with the same decimals down a column (3; 1 from 100 ms)."""
    return "-" if x is None else f"{x:.3f}" if x < 100 else f"{x:.1f}"


def _least_width(columns, rows: list[dict], wrapping: dict[str, int]) -> int:
    """The width a SIMPLE_HEAD table of these columns needs: two spaces of padding and one of
    division a column, each as wide as its widest cell or header; a column of `wrapping` only
    its least width there."""
    return sum(3 + (wrapping.get(c) or max([len(c), *(len(r[c]) for r in rows)])) for c in columns)


# Dropped in this order where the terminal is too narrow for every column (results.json keeps them).
_NARROW_DROPS = ("err", "±%", "base ms", "ms")


def render_table(ranking: Ranking, results: list[Result], console: Optional[Console] = None, top: int = 15,
                 families: Optional[Sequence[str]] = None) -> None:
    """Confirmed candidates first (the winner, then by their side-by-side figure), then the others
    by their first-pass figure, then the failures. Each column is one measurement: the first pass
    (the candidate's ms and the baseline's timed nearest to it, so a row reads on its own when
    the load changed between rows), the interleaved rounds that chose the winner, and the fresh
    rounds after it was chosen (the winner's figure and interval); the legend below says so. In a
    narrow terminal the columns of `_NARROW_DROPS` go first, so config names are never cut."""
    from rich import box

    console = console or make_console()
    shown = list(ranking.ranked[:top])
    if ranking.baseline and ranking.baseline not in shown:
        shown.append(ranking.baseline)
    rows = []
    for r in shown + list(ranking.failed):
        first = r.first_pass_speedup
        chose = r.confirmed and not r.is_baseline
        after = Paired(tuple(r.holdout_ratios)) if r.holdout_ratios else None
        interval = after.interval() if after else None
        rows.append((r, {
            "#": str(r.candidate_id),
            "config": printable(r.label if len(r.label) < 90 else r.label[:87] + "..."),
            "status": r.status.value,
            "ms": _ms(r.median_ms),
            "base ms": _ms(r.baseline_ms) if not r.is_baseline else "-",
            "alone": (f"{first:.2f}x" + ("*" if r.retimed else "")) if first and not r.is_baseline else "-",
            "±%": f"{r.spread_pct:.0f}" if r.spread_pct is not None else "-",
            "paired": f"{r.paired.speedup:.2f}x" if chose else "-",
            "won": f"{sum(x > 1.0 for x in r.round_ratios)}/{len(r.round_ratios)}" if chose else "-",
            "after": (f"{after.speedup:.2f}x" + (f" ({interval.low:.2f}-{interval.high:.2f})" if interval else ""))
            if after else "-",
            "err": f"{r.relative_error:.0e}" if r.relative_error is not None else "-",
        }))
    columns = ["#", "config", "status", "ms", "base ms", "alone", "±%", "paired", "won", "after", "err"]

    for drop in _NARROW_DROPS:
        if _least_width(columns, [cells for _, cells in rows], {"config": 14}) <= console.width:
            break
        columns.remove(drop)
    table = Table(title="Candidates: confirmed side by side with the baseline first", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for col in columns:
        table.add_column(col, justify="left" if col in ("config", "status") else "right", no_wrap=col != "config",
                         min_width=14 if col == "config" else None)
    for r, cells in rows:
        values = [cells[c] for c in columns]
        if not (r.ok or r.status == Status.DUPLICATE):
            values[columns.index("status")] = f"[red]{r.status.value}[/red]"
        table.add_row(*values, style="bold green" if r is ranking.best else None)
    console.print(table)
    if len(ranking.ranked) > top:
        console.print(f"({len(ranking.ranked) - top} more successful candidates in results.json)")
    console.print(TABLE_LEGEND)
    close = ranking.within_noise_of_best()
    if close:
        console.print(f"within noise of the best: {', '.join(f'{r.candidate_id} ({printable(r.label)})' for r in close)}")
    said = family_verdict(ranking, results, families) if families else ""
    if said:
        console.print(said)


def read_families(value: object) -> tuple[str, ...]:
    """A run's recorded "families" (results.json, a manifest's meta) as family_verdict takes them:
    () where none is recorded; ValueError where it is not a knob and its two families' names."""
    if value is None:
        return ()
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(f, str) for f in value)):
        raise ValueError(f"families is {value!r}, not a knob and the names of its two families")
    return tuple(value)


def family_verdict(ranking: Ranking, results: Sequence[Result], families: Sequence[str]) -> str:
    """Where the results hold configs of both families of the tuned pipeline's family knob
    (`Pipeline.families`: (knob, name when true, name when false); llvm-cpu contractions: data
    tiling or their own tiles; a run's results.json says them under "families"), which family
    won and the best of the other by its first-pass speedup; "" where they hold one only."""
    knob, yes, no = families
    kinds = {yes: [r for r in results if r.ok and r.knobs.get(knob)],
             no: [r for r in results if r.ok and not r.is_baseline and knob in r.knobs and not r.knobs.get(knob)]}
    if not all(kinds.values()):
        return ""

    def best(rs):
        return max(rs, key=lambda r: r.first_pass_speedup or 0.0)

    if ranking.best is None:
        return (f"{yes} or not: neither beat the default; best first passes: "
                + "; ".join(f"{k}: {best(v).label}, {best(v).first_pass_speedup or 0:.2f}x" for k, v in kinds.items()))
    won = yes if ranking.best.knobs.get(knob) else no
    other = no if won == yes else yes
    o = best(kinds[other])
    return (f"{yes} or not: {won} won ({ranking.best.label}); the best of {other}: {o.label}, "
            f"{o.first_pass_speedup or 0:.2f}x in its first pass")


def render_model(data: dict, console: Optional[Console] = None) -> None:
    """A tune-model run's results.json as a person reads it: one row per dispatch (from the
    profile, its time per model call and its share of the model's dispatch time; from its
    tuning, what was timed (the dispatch, or the whole model call where the target times the
    entry, as the CPU does), the default's and the winner's times of that and their paired
    speedup; the winner's paired figure on the model; what the model stage did with it), the
    choices tried on the whole model, and the model-level figure."""
    from rich import box

    console = console or make_console()
    console.print(f"gain: {gain_line(data)}", markup=False, highlight=False)

    def num(v, fmt):
        return fmt.format(v) if v is not None else "-"

    def pair(d, timed):  # the default's and the winner's times in its tuning, where they are of `timed`
        if d.get("timed") != timed or d.get("default_ms") is None:
            return "-"
        return f"{d['default_ms']:.3f}" + (f" -> {d['tuned_ms']:.3f}" if d.get("tuned_ms") is not None else "")

    untuned, rows = [], []
    for d in data.get("dispatches", []):
        name = d["name"] + (f" (+{len(d['also_covers'])} alike)" if d.get("also_covers") else "")
        share = num(d.get("share") and 100 * d["share"], "{:.1f}%")
        if d["status"].startswith("not tuned"):
            untuned.append((f"{name} ({share})", d["status"]))
            continue
        rows.append({"dispatch": short_dispatch_name(d["name"]) + (f" (+{len(d['also_covers'])})" if d.get("also_covers") else ""),
                     "shape": d.get("shape", ""), "profile ms": num(d.get("profile_ms"), "{:.3f}"),
                     "calls": num(d.get("calls"), "{}"), "share": share,
                     "dispatch ms": pair(d, "dispatch"), "model call ms": pair(d, "model call"),
                     "tuning": num(d.get("speedup"), "{:.2f}x"), "on the model": num(d.get("model_speedup"), "{:.2f}x"),
                     "status": d["status"]})
    # A column no row fills says nothing (a CPU run times model calls, a GPU run dispatches); in
    # a narrow terminal the shape goes first: the dispatch's name carries it.
    columns = [c for c in ("dispatch", "shape", "profile ms", "calls", "share", "dispatch ms", "model call ms", "tuning",
                           "on the model", "status") if any(r[c] != "-" for r in rows) or c in ("dispatch", "status")]
    if rows and "shape" in columns and _least_width(columns, rows, {"status": 12}) > console.width:
        columns.remove("shape")
    if rows and _least_width(columns, rows, {"status": 12}) > console.width:  # too narrow for a table: a line per dispatch
        console.print(f"Dispatches of @{data.get('entry', '')} on {data.get('target', '')}", markup=False)
        for r in rows:
            tuning = " ".join(f"{c} {r[c]}" for c in ("dispatch ms", "model call ms") if r.get(c, "-") != "-")
            console.print(f"{r['dispatch']}: {r['share']} of the model, {r['profile ms']} ms a call in {r['calls']} "
                          f"calls; {tuning}" + (f", {r['tuning']} in its tuning" if r["tuning"] != "-" else "")
                          + (f", {r['on the model']} on the model" if r["on the model"] != "-" else "")
                          + f": {r['status']}", markup=False, highlight=False)
        rows = []
    prefix = common_dispatch_prefix([d["name"] for d in data.get("dispatches", [])])
    table = Table(title=f"Dispatches of @{data.get('entry', '')} on {data.get('target', '')}"
                        + (f" (names after {prefix})" if prefix else ""), box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="profile ms: the dispatch per model call (its calls summed); dispatch ms or model call ms: "
                          "its tuning's default -> winner, one call, of the dispatch's kernels or of the whole model "
                          "call; tuning: their paired speedup; on the model: the model with the winner against "
                          "without it")
    for col in columns:
        table.add_column(col, justify="left" if col in ("dispatch", "shape", "status") else "right",
                         no_wrap=col != "status", min_width=12 if col == "status" else None)
    for r in rows:
        table.add_row(*(r[c] for c in columns))
    if table.row_count:
        console.print(table)
    for line in untuned_lines(untuned):
        console.print(line)
    kept = kept_choice(data)
    trials = data.get("flag_trials") or {}
    short_flags, flag_legend = _flag_names()
    for choice, result in trials.items():
        # a figure is the model's; a reason ("nothing in the model to rewrite") is said as it is
        figure = f"{result:.2f}x the default on the whole model" if isinstance(result, (int, float)) else result
        chosen = " (chosen)" if kept and choice == kept else ""
        console.print(f"model-wide choice {short_flags(choice)}: {figure}{chosen}",
                      markup=False, highlight=False)
    legend = flag_legend([*trials, kept])
    if legend:
        console.print(f"flags by name: {legend}", markup=False, highlight=False)
    figure = data.get("figure")
    if figure:
        err = figure.get("relative_error")
        method = f" ({data['timing_method']})" if data.get("timing_method") else ""
        console.print(f"model{method}: default {figure['default_ms']:.3f} ms, tuned {figure['tuned_ms']:.3f} ms; "
                      f"{figure['speedup']:.2f}x (the ratio 3 of 4 rounds reach: {figure['lower']:.2f}x, "
                      f"{figure['rounds']} rounds)" + (f"; output relative error {err:.2g}" if err is not None else ""))
    console.print(f"verdict: {data.get('verdict', '')}")
    console.print(f"kept: {kept_line(data)}", markup=False, highlight=False)


def kept_choice(data: dict) -> str:
    """The label of the model-wide choice a tune-model run kept (its results.json), as the flag
    stage labels a choice (tuner.stages.flag_options.FlagOption.label): the rewrites joined into
    one by `+`, then the flags."""
    return " ".join(filter(None, ["+".join(data.get("rewrites", [])), *data.get("flags", [])]))


def short_dispatch_name(name: str) -> str:
    """A dispatch's name less what every dispatch of its model shares (`main$async_dispatch_`):
    its number, kind and shape. Cut at the first `_dispatch_`: IREE names a softmax dispatch
    `..._dispatch_6_softmax_12x384x384xf32_dispatch_tensor_store`, which the last one cut to
    `tensor_store` (issue 63)."""
    return name.split("_dispatch_", 1)[-1]


def common_dispatch_prefix(names: Sequence[str]) -> str:
    """What short_dispatch_name cuts off the names, where they share it; "" where they do not."""
    prefixes = {n[: -len(short_dispatch_name(n))] for n in names if "_dispatch_" in n}
    return prefixes.pop() if len(prefixes) == 1 else ""


def _flag_names():
    """(short_flags, flag_legend) of pipelines.model_flags; where the pipelines cannot be imported
    (a runtime-only machine without z3: the package imports it), the flags as they are and no
    legend."""
    try:
        from pipelines.model_flags import flag_legend, short_flags
    except ImportError:
        return (lambda text: text), (lambda texts: "")
    return short_flags, flag_legend


def gain_line(data: dict) -> str:
    """Where a tune-model run's gain came from, in one line: the model-wide choices, the dispatch
    configs, or both with what each gave (issue 63: a gain made wholly by data tiling was said
    only at the end, as "dispatch configs: 0 of 5 tuned kept")."""
    figure = data.get("figure") or {}
    choices = _flag_names()[0](" ".join([*data.get("rewrites", []), *data.get("flags", [])]))
    kept = sum(d.get("status") == "kept" for d in data.get("dispatches", []))
    configs = f"{kept} dispatch config{'s' if kept != 1 else ''}"
    if not choices and not kept:
        return "none: the compiler's default is the result"
    if not figure:
        return f"not measured against the default (kept: {choices or 'no model-wide choice'}, {configs})"
    total = f"{figure['speedup']:.2f}x the default"
    if not kept:
        return f"{total}, all from the model-wide choices ({choices}); no dispatch config kept"
    if not choices:
        return f"{total}, all from {configs} (no model-wide choice kept)"
    if figure.get("choices_speedup") is not None and figure.get("configs_speedup") is not None:
        return (f"{total}: the model-wide choices ({choices}) {figure['choices_speedup']:.2f}x, {configs} "
                f"{figure['configs_speedup']:.2f}x on top of them")
    return f"{total}, from the model-wide choices ({choices}) and {configs}"


def kept_line(data: dict) -> str:
    """What the tuned model is made of, in one line: the model-wide choices kept, the dispatch
    configs kept, and how many dispatches were not tuned and why (their reasons by count)."""
    import collections

    rows = data.get("dispatches", [])
    choices = _flag_names()[0](" ".join([*data.get("rewrites", []), *data.get("flags", [])])) or "none"
    carried = [d["name"] for d in rows if d.get("status") == "kept" and d.get("carried_from")]
    kept = [d["name"] for d in rows if d.get("status") == "kept" and not d.get("carried_from")]
    tuned = [d for d in rows if not d.get("status", "").startswith("not tuned") and not d.get("carried_from")]
    why = collections.Counter(d["status"].removeprefix("not tuned: ").split(" (")[0]
                              for d in rows if d.get("status", "").startswith("not tuned"))
    parts = [f"model-wide choices: {choices}",
             f"dispatch configs: {len(kept)} of {len(tuned)} tuned kept"
             + (f" ({', '.join(short_dispatch_name(n) for n in kept)})" if kept else "")
             + (f", and a winner's config carried over to {len(carried)} untuned" if carried else "")]
    if why:
        parts.append("not tuned: " + "; ".join(f"{n} {reason}" for reason, n in why.most_common()))
    return "; ".join(parts)


def untuned_lines(untuned: list[tuple[str, str]], shown: int = 3) -> list[str]:
    """The dispatches not tuned, (name with its share, status) largest first: one line each, but
    where more than `shown` share a status, one line for them (`by_reason`: a GoogLeNet's 42
    copies into slices were 42 lines of one status)."""
    return by_reason(untuned, shown, alone=shown)


def by_reason(named: Sequence[tuple[str, str]], shown: int = 3, alone: int = 1) -> list[str]:
    """(name, reason) pairs as lines, a reason's in the place of its first: "NAME: REASON" for
    each of a reason held by at most `alone`, else one line "N dispatches (the first `shown`
    and M more): REASON"."""
    by_why: dict[str, list[str]] = {}
    for name, why in named:
        by_why.setdefault(why, []).append(name)
    lines = []
    for why, names in by_why.items():
        if len(names) <= alone:
            lines += [f"{n}: {why}" for n in names]
        else:
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            lines.append(f"{len(names)} dispatches ({', '.join(names[:shown])}{more}): {why}")
    return lines
