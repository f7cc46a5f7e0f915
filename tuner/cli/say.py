"""What the commands print: which dispatch was picked, what the search starts from, the
candidates, the evaluation's line, the table and verdict, the progress bars; and bad input or a
failed tool as one line and an exit code, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass
import errno
import sqlite3
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichBars  # rich's bars; `Progress` is the tuner's callback (tuner.core.built)

from tuner.core.names import printable
from tuner.cli.options import ended_by
from tuner.discovery.workload import Workload
from tuner.errors import InputError, OutputError, StoreError, TunerError
from tuner.core.results import Status
from tuner.store import BUILD_FAILURES
from tuner.tools import kill_running_tools

SHOWN = 3  # dispatches named in a line of tune's start; `dispatches` lists them all


def say_picked(console: Console):
    """Say which dispatch `tune` picked and how, which it skipped and why, and the sizes given to
    the dynamic dimensions of the function that runs it."""
    def on_discovered(program, dispatch, how: str) -> None:
        others = [d.name for d in program.dispatches if d.name != dispatch.name]
        shown = ", ".join(others[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        console.print(f"tuning {dispatch.name}: {how}" + (f" (others: {shown})" if others else ""))
        for name, why in program.skipped[:SHOWN]:
            console.print(f"skipped {name}: {why}")
        if len(others) > SHOWN or len(program.skipped) > SHOWN:
            console.print(f"({len(others)} other dispatches, {len(program.skipped)} skipped: `iree-tuner dispatches` "
                          "lists each with what tunes it or why nothing does)")
        if program.fixed_dims:
            console.print(program.fixed_text(), markup=False, highlight=False, soft_wrap=True)
        if program.repaired:
            console.print(program.repaired_text(), markup=False, highlight=False, soft_wrap=True)
        workload = program.entries.get(dispatch.name)
        for size in workload.dynamic_sizes() if isinstance(workload, Workload) else ():
            console.print(f"dynamic size of @{workload.entry}'s {size}; --dynamic-size N or your --input files "
                          "choose another")

    return on_discovered


def say_search(console: Console):
    """Say what the search starts from: the space, the seeds and who proposed them."""
    def on_search(summary: dict) -> None:
        size = f"{summary['space']} valid configs" + ("" if summary["space_complete"]
                                                       else f" (a sample of {summary['space_size']})")
        seeds = ", ".join(f"{n} from {who}" for who, n in summary["seeds"].items()) or "none"
        line = (f"search: {summary['search']} over {size}, budget {summary['budget']}"
                + (f" or {summary['time_budget_s']:g} s" if summary["time_budget_s"] else "")
                + f", seed {summary['seed']}; seeds first: {seeds}")
        if summary["dropped_seeds"]:
            line += f"; {len(summary['dropped_seeds'])} seeds not valid for this dispatch were dropped"
        ignored = summary.get("ignored_seeds", [])
        if ignored:
            line += (f"; {len(ignored)} --seeds entries are for another pipeline, target, kind or shape and were not "
                     f"used (first: {ignored[0]})")
        if summary["space_complete"] and summary["space"] <= summary["budget"]:
            line += "; the space holds no more than the budget: every config is tried"
        warm = summary.get("warm_started_from")
        if warm:
            line += (f"; warm start from {warm['points']} measurements of {len(warm['dispatches'])} other "
                     f"dispatches in the store: {', '.join(warm['dispatches'])}")
        console.print(line)

    return on_search


def say_candidates(console: Console, asked: int | None = None):
    def on_candidates(dispatch, candidates) -> None:
        console.print(f"[bold]{dispatch.name}[/bold]: {dispatch.op_name} {dispatch.shape_name}, "
                      f"default {dispatch.default.pipeline}; {len(candidates)} candidates (baseline included)")
        if asked is not None and len(candidates) - 1 < asked:
            console.print(f"the space holds {len(candidates) - 1} distinct configs for this dispatch, "
                          f"fewer than the {asked} asked for: all of them are tried")

    return on_candidates


def stats_line(stats: dict) -> str:
    devices = ", ".join(f"{d} idle {100 * (1 - busy / stats['wall_s']):.0f}%" if stats["wall_s"] else d
                        for d, busy in stats["busy_s"].items())
    rounds = f"confirmation rounds {stats['confirm_s']:.1f} s"
    if stats.get("reused_confirmation"):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(stats["reused_confirmation"]))
        rounds = f"confirmation rounds reused from the run of {when} that confirmed the same (--reconfirm: time them again)"
    if stats.get("waited_for_quiet_s", 0.0) >= 1.0:
        rounds += f" (after waiting {stats['waited_for_quiet_s']:.0f} s for a load to pass)"
    line = (f"{stats['strategy']}: {stats['candidates']} evaluated, {stats['reused']} reused from the store, "
            f"{stats['wall_s']:.1f} s ({devices}); baseline timed {stats.get('baseline_timings', 0)} times; {rounds}")
    for drift in stats.get("drifts", []):
        line += (f"\nthe baseline drifted {drift['change_pct']:+.0f}% on {drift['device']} "
                 f"({drift['from_ms']:.3f} -> {drift['to_ms']:.3f} ms)")
    if stats.get("retimed"):
        line += f"; {stats['retimed']} candidates timed in a drifted span were timed again"
    for warning in stats.get("warnings", []):
        line += f"\n[yellow]warning:[/yellow] {warning}"
    return line


def say_failures(console: Console, results, says: dict) -> bool:
    """For each candidate that failed to build or did not take its config: why (the compiler's
    error, or the config the compiled dispatch carries against the one asked for), then what
    IREE's own constraints say of it where they say something. Returns whether no candidate at
    all took its config (every one config_not_applied): a spec does not reach this dispatch."""
    tried = [r for r in results if not r.is_baseline]
    for r in tried:
        if r.status not in BUILD_FAILURES:
            continue
        said = says.get(r.candidate_id)
        why = (r.error or "").strip()
        console.print(f"candidate {r.candidate_id} ({r.label}) {r.status.value}: "
                      + (why if len(why) <= 600 else why[:600] + " ...")
                      + (f"; IREE's constraints for it: {'; '.join(said)}" if said else ""), markup=False)
    none_took = bool(tried) and all(r.status == Status.CONFIG_NOT_APPLIED for r in tried)
    if none_took:
        console.print(f"[red]error:[/red] none of the {len(tried)} candidates took its config: every compiled "
                      "dispatch carries another config than its spec set (above, each with the two), so nothing "
                      "was tuned; the default is kept")
    return none_took


def say_summary(console: Console, ranking, results, stats, output_dir: Path, families: tuple[str, ...] = ()) -> None:
    from tuner.report.outputs import render_table

    render_table(ranking, results, console, families=families)
    if stats is not None:
        console.print(stats_line(stats.to_json()))
    console.print(("best: " if ranking.best else "no winner: ") + printable(ranking.verdict))
    console.print(f"wrote {output_dir}/best_spec.mlir, best_flags.txt, results.json")
    say_rebuild(console, output_dir)


def say_rebuild(console: Console, output_dir: Path) -> None:
    """How to rebuild the result in `output_dir`, a line that works pasted anywhere, and how to
    run it where the model reads external parameters."""
    import shlex

    from tuner.report.rebuild import read_rebuild, rebuild_line

    console.print(f"rebuild with: {rebuild_line(output_dir)}", markup=False, soft_wrap=True)
    try:
        result = read_rebuild(output_dir)
    except InputError:
        return
    if result.parameters:
        console.print("run it with: " + " ".join(map(shlex.quote, result.run_command("OUT.vmfb"))),
                      markup=False, soft_wrap=True)


def store_error_text(error: sqlite3.DatabaseError) -> str:
    """What a store error means for the user: a full disk and a store another process holds are
    not damage, and the store must not be deleted for them."""
    text = str(error).lower()
    if "disk is full" in text or "disk i/o error" in text:
        return f"the result store could not be written ({error}): free space on its disk and run the same command again"
    if "locked" in text or "busy" in text:
        return (f"the result store is held by another process ({error}) beyond the wait; run the same command again "
                "when it is done, or give --store another file")
    # Opened fine, damaged inside a page that a later query reached.
    return f"the result store is damaged ({error}); delete it or give --store a new file"


# Where a file cannot be written for the machine's reasons, not the program's: a full disk or
# quota, a read-only file system, no permission.
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


class errors_to_exit:
    """Bad input and failed tools end in one line and a non-zero exit, never a traceback."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if isinstance(error, TunerError):
            click.echo(f"error: {error}", err=True)
            sys.exit(error.exit_code)
        if isinstance(error, sqlite3.DatabaseError):
            kill_running_tools()
            click.echo(f"error: {store_error_text(error)}", err=True)
            sys.exit(StoreError.exit_code)
        if isinstance(error, OSError) and error.errno in UNWRITABLE:
            kill_running_tools()
            where = f" {printable(str(error.filename))}" if error.filename else ""
            click.echo(f"error: cannot write{where}: {error.strerror}; every result measured so far is kept in the "
                       "result store: make room (or name another --output) and run the same command again", err=True)
            sys.exit(OutputError.exit_code)
        if isinstance(error, KeyboardInterrupt):
            kill_running_tools()  # nothing this run started outlives it
            signum = ended_by(error)
            how = "terminated" if signum is not None else "interrupted"
            click.echo(f"{how}: every result measured so far is kept in the result store (and every compiled "
                       f"candidate in the manifest); run the same command again to resume", err=True)
            sys.exit(128 + signum if signum is not None else 130)
        return False


class progress_bars:
    """Progress per phase (compile, benchmark, confirm, ...); yields the callback. On a terminal, a
    bar per phase with its elapsed time and ETA, drawn from the first update on (a run that ends
    before any, on an error say, prints nothing: it printed a blank line on stdout before). In a
    log (not a terminal), where a bar is only drawn once at the end with elapsed times that match
    no stage, a line per phase as it completes, and at most every LOG_EVERY_S seconds while it
    runs, each with the time since the phase began."""

    LOG_EVERY_S = 30.0

    def __init__(self, console: Console, clock=time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self.bar: RichBars | None = None
        self.tasks: dict[str, int] = {}
        self.logs: dict[str, _PhaseLog] = {}

    def __enter__(self):
        return self.update

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, phase: str, done: int, total: int) -> None:
        if self.console.is_terminal:
            self._draw(phase, done, total)
        else:
            self._log(phase, done, total)

    def _draw(self, phase: str, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = RichBars(TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console)
            self.bar.__enter__()
        if phase not in self.tasks:
            self.tasks[phase] = self.bar.add_task(phase, total=total)
        self.bar.update(self.tasks[phase], completed=done, total=total)

    def _log(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        log = self.logs.get(phase)
        if log is None or (log.finished and done < total):  # its first update, or it runs again (a second batch)
            log = self.logs[phase] = _PhaseLog(began=now, said_at=now)
        finished = total > 0 and done >= total
        if log.finished or done == log.said_done or not (finished or now - log.said_at >= self.LOG_EVERY_S):
            return
        log.said_at, log.said_done, log.finished = now, done, finished
        self.console.print(f"{phase}: {done}/{total}{' done' if finished else ''}, {now - log.began:.0f} s",
                           markup=False, highlight=False, soft_wrap=True)


@dataclass
class _PhaseLog:
    """A phase's lines in a log: when it began, when its last line was said and at what count."""

    began: float
    said_at: float
    said_done: int = -1
    finished: bool = False


class LiveResults:
    """The search as it runs: the best first-pass figure so far, said when it changes; where the
    output is not a terminal (a log, CI), each candidate's result as a line too, since no progress
    bar shows there. `one` hears each candidate's result as it is stored (Listeners.on_result),
    so that a search of one batch streams too; the instance itself hears each batch's results as
    it ends (Listeners.on_results), and says those not heard one by one (results reused from the
    store)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: set[int] = set()
        self.best: tuple[float, int] | None = None

    def __call__(self, results: list) -> None:
        self._say(results)

    def one(self, result) -> None:
        self._say([result])

    def _say(self, results: list) -> None:
        new = [r for r in results if r.candidate_id not in self.seen and not r.is_baseline]
        self.seen.update(r.candidate_id for r in new)
        if not self.console.is_terminal:
            for r in sorted(new, key=lambda r: r.candidate_id):
                then = f" against the baseline's {r.baseline_ms:.3f} ms then" if r.baseline_ms else ""
                figure = (f"{r.median_ms:.3f} ms{then}, {r.first_pass_speedup:.2f}x in its first pass"
                          if r.ok and r.median_ms is not None and r.first_pass_speedup else (r.error or "")[:120])
                self.console.print(f"candidate {r.candidate_id} ({r.label}): {r.status.value}"
                                   + (f", {figure}" if figure else ""), markup=False, highlight=False, soft_wrap=True)
        timed = [r for r in new if r.ok and r.first_pass_speedup]
        if not timed:
            return
        top = max(timed, key=lambda r: (r.first_pass_speedup, -r.candidate_id))
        if self.best is None or top.first_pass_speedup > self.best[0]:
            self.best = (top.first_pass_speedup, top.candidate_id)
            self.console.print(f"best so far: candidate {top.candidate_id} ({top.label}), {top.first_pass_speedup:.2f}x "
                               f"in its first pass, after {len(self.seen)} evaluations (confirmed side by side at the end)",
                               markup=False, highlight=False, soft_wrap=True)


def dispatches_json(listed) -> str:
    """`dispatches --json`: every row, and with a profile each entry's time and coverage."""
    import json

    measured = listed.profile
    return json.dumps({"dispatches": [r.to_json() for r in listed.rows],
                       "entry_ms": measured.entry_ms if measured else None,
                       "coverage": {e: measured.coverage(e) for e in measured.entry_ms} if measured else None,
                       "busy_ms": measured.busy_ms if measured else None,
                       "busy_coverage": ({e: measured.busy_coverage(e) for e in measured.busy_ms}
                                         if measured else None),
                       "method": measured.method if measured else "", "fixed": listed.fixed}, indent=2)


def say_dispatches(console: Console, listed, input_file: Path, target: str) -> None:
    """`dispatches`' table (with a profile: each dispatch's time and share, each entry's coverage)."""
    from rich.table import Table

    rows, measured = listed.rows, listed.profile
    columns = ["dispatch", "kind", "shape", "runs", "entry"] + (["ms", "share"] if measured else []) + ["tuned by / why not"]
    name_width = max((len(r.name) for r in rows), default=8)
    # The names are what --dispatch takes: never cut. Where the terminal cannot hold a whole name
    # beside the other columns (about 12 characters each), each dispatch is a block instead.
    if name_width + 12 * (len(columns) - 1) + 3 * len(columns) <= console.width:
        table = Table(title=f"Dispatches of {input_file} on {target}")
        for col in columns:
            table.add_column(col, justify="right" if col in ("runs", "ms", "share") else "left",
                             no_wrap=col == "dispatch", min_width=name_width if col == "dispatch" else None,
                             overflow="fold")
        for r in rows:
            timed = [f"{r.ms:.3f}" if r.ms is not None else "-", f"{100 * r.share:.1f}%" if r.share is not None else "-"]
            table.add_row(r.name, r.kind or "-", r.shape or "-", str(r.runs), r.entry, *(timed if measured else []),
                          r.pipeline or f"[yellow]{r.why_not}[/yellow]")
        console.print(table)
    else:
        console.print(f"Dispatches of {input_file} on {target}", markup=False, soft_wrap=True)
        for r in rows:
            timed = (f", {r.ms:.3f} ms" if r.ms is not None else "") + (f", {100 * r.share:.1f}%" if r.share is not None else "")
            console.print(r.name, markup=False, highlight=False, soft_wrap=True)
            console.print(f"    {r.kind or '-'} {r.shape or '-'}, {r.runs} run{'s' if r.runs != 1 else ''} a call of "
                          f"@{r.entry}{timed if measured else ''}; "
                          + (f"tuned by {r.pipeline}" if r.pipeline else f"not tuned: {r.why_not}"),
                          markup=False, highlight=False)
    if measured:
        for entry, ms in measured.entry_ms.items():
            coverage = measured.coverage(entry)
            busy = measured.busy_coverage(entry)
            console.print(f"@{entry}: {ms:.3f} ms per call, timed whole; its dispatch times add up to "
                          + (f"{100 * coverage:.0f}% of it" if coverage else "nothing measurable")
                          + (f" and to {100 * busy:.0f}% of the {measured.busy_ms[entry]:.3f} ms its command buffers "
                             "executed (the rest of a call: allocations, submission, waits)" if busy else ""))
        console.print(f"timed: {measured.method}")
    if listed.fixed:
        console.print(listed.fixed, markup=False, highlight=False, soft_wrap=True)
    tunable = sum(1 for r in rows if r.pipeline)
    console.print(f"{len(rows)} dispatches, {tunable} tunable; tune one with: iree-tuner tune {input_file} "
                  f"--target {target} --dispatch 'NAME'" + (" (single-quoted: the names hold `$`)"
                                                           if any("$" in r.name for r in rows) else ""))
