"""The result store: an SQLite database where every result is written the moment it arrives.

A result is keyed by what it depends on: the candidate's key (a digest of the dispatch, the input
it came from, the target, the config and its flags), the compiler and runtime versions, the
identity of the device that timed it and what was timed (tuner.evaluation.device_identity); a build failure
holds on every device and is stored with neither. Each write is its own committed transaction
in WAL mode, so a run killed at any moment (kill -9 included) loses nothing it had written, and
several runs may share one store at once: SQLite serializes their writes (a writer waits up to `BUSY_TIMEOUT_S` for another's). WAL needs a local
file system: do not share a store over NFS.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Optional

from tuner.errors import OutputError, StoreError
from tuner.core.results import Result, Status
from tuner.run_dir import fresh_in_run, real_directory

STORE = "results.sqlite"  # DIR/results.sqlite: a run's result store, unless another is given

BUSY_TIMEOUT_S = 60.0
SCHEMA_VERSION = 4  # 3: the features table; 4: the confirmations table (older stores get them when opened)
TABLE = "results"

_SCHEMA = """
CREATE TABLE results (
    key TEXT NOT NULL,
    compiler TEXT NOT NULL,
    runtime TEXT NOT NULL,
    device_id TEXT NOT NULL,
    timing TEXT NOT NULL,
    dispatch TEXT NOT NULL,
    target TEXT NOT NULL,
    config TEXT NOT NULL,
    flags TEXT NOT NULL,
    status TEXT NOT NULL,
    median_ms REAL,
    result TEXT NOT NULL,
    run TEXT NOT NULL,
    written_at REAL NOT NULL,
    PRIMARY KEY (key, compiler, runtime, device_id, timing)
);
CREATE INDEX results_by_dispatch ON results (dispatch, target);
"""
# What a search knew of each config it had measured (tuner.search.prior): its features and the
# pipeline's preferences it meets, by name. Keyed like results (the candidate's key) but
# device-free: features depend on the dispatch and the config only.
_FEATURES = """
CREATE TABLE IF NOT EXISTS features (
    key TEXT PRIMARY KEY,
    pipeline TEXT NOT NULL,
    dispatch TEXT NOT NULL,
    features TEXT NOT NULL,
    tiers TEXT NOT NULL
)
"""
# A finished confirmation (tuner.evaluation.passes.confirm): the baseline and the candidates timed
# side by side in interleaved rounds, keyed by which they were (their keys, sorted, the baseline's
# first), how many rounds and the conditions they were timed under. A rerun that would confirm the
# same candidates the same way reuses it (unless told to confirm again); one taken under a load that
# did not pass is stored for the record and never reused.
_CONFIRMATIONS = """
CREATE TABLE IF NOT EXISTS confirmations (
    keys TEXT NOT NULL,
    rounds INTEGER NOT NULL,
    compiler TEXT NOT NULL,
    runtime TEXT NOT NULL,
    device_id TEXT NOT NULL,
    timing TEXT NOT NULL,
    results TEXT NOT NULL,
    loaded INTEGER NOT NULL,
    run TEXT NOT NULL,
    written_at REAL NOT NULL,
    PRIMARY KEY (keys, rounds, compiler, runtime, device_id, timing)
)
"""

# Worth trying again rather than reusing: a longer timeout or a calmer machine may change them,
# and a wrong result or a failed run may be the inputs', a flaky device's or a faulty tool's doing
# rather than a fact about the config (kept in the store for the record, never reused).
# Cut short (a timeout, an interruption): no outcome of the config at all.
CUT_SHORT = frozenset({Status.COMPILE_TIMEOUT, Status.COMPILE_INTERRUPTED, Status.RUN_TIMEOUT})
RETRIED = CUT_SHORT | {Status.WRONG_NUMERICS, Status.RUN_FAILED}
# Decided by the compiler alone, whatever device would time it: stored with no device or timing,
# so they are reused on every device (and written by a compile-only run, which has no device).
BUILD_FAILURES = frozenset({Status.COMPILE_FAILED, Status.COMPILE_TIMEOUT, Status.COMPILE_INTERRUPTED,
                            Status.CONFIG_NOT_APPLIED})


def run_id() -> str:
    """Who wrote a row: host, process and start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{time.strftime('%Y-%m-%dT%H:%M:%S')}"


def _conditions(result: Result) -> tuple[str, str]:
    return ("", "") if result.status in BUILD_FAILURES else (result.device_id, result.timing)


def _confirmed_keys(baseline: str, keys: list[str]) -> str:
    return json.dumps([baseline, *sorted(keys)])


class ResultStore:
    """Results of one compiler and runtime version pair in an SQLite file, each under the device
    and timing it was measured with. One object per thread (SQLite connections are not shared
    between threads). A file that is not a store of this schema is refused before anything in it
    is changed."""

    def __init__(self, path: Path, compiler: str, runtime: str, run: Optional[str] = None) -> None:
        self.path: Optional[Path] = Path(path)
        self.compiler = compiler
        self.runtime = runtime
        self.run = run or run_id()
        try:
            real_directory(self.path.parent)
        except OSError as e:
            raise OutputError(f"cannot create the result store's directory {self.path.parent}: {e.strerror or e}") from None
        for companion in ("", "-wal", "-shm", "-journal"):  # SQLite's own files beside it too
            fresh_in_run(self.path.with_name(self.path.name + companion))
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._check_schema()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        except sqlite3.OperationalError as e:
            raise OutputError(f"{self.path}: cannot open the result store ({e})") from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a result store ({e}); give --store a new file") from None
        self._inode = self.path.stat().st_ino

    @classmethod
    def in_memory(cls, compiler: str, runtime: str, run: Optional[str] = None) -> "ResultStore":
        """A store in this process alone (SQLite's in-memory database: the same schema and
        queries as a file's, gone when closed), for what keeps nothing between runs: the tests'
        in-memory evaluations (tests/test_store_forms.py holds both forms to the same behaviour)."""
        store = cls.__new__(cls)
        store.path, store.compiler, store.runtime, store.run = None, compiler, runtime, run or run_id()
        store._db = sqlite3.connect(":memory:", isolation_level=None)
        store._check_schema()
        store._inode = None
        return store

    def _still_there(self) -> None:
        """Refuse to write into a store whose file was deleted or replaced while the run had it
        open: what SQLite wrote would vanish with the deleted file, unnoticed."""
        if self.path is None:  # in memory: nothing to lose to another process
            return
        try:
            same = self.path.stat().st_ino == self._inode
        except OSError:
            same = False
        if not same:
            raise StoreError(f"{self.path}: the result store was deleted or replaced during the run; what this run "
                             f"measured since is lost with it; run the command again (it starts a new store)")

    def _check_schema(self) -> None:
        """Create the schema in a new (empty) database; refuse any other database untouched."""
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if not tables and version == 0:
            # Another run may have created it meanwhile: the schema only where there is none.
            self._in_transaction(lambda: None if self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() else self._create())
            return
        if TABLE in tables and version == 1:
            self._db.close()
            raise StoreError(f"{self.path}: a result store written before results were keyed by device and timing; "
                             f"its times cannot be told apart, so start afresh: delete it or give --store a new file")
        if TABLE in tables and version in (2, 3):  # the results are as they were: add the newer tables
            self._in_transaction(lambda: self._create(_FEATURES, _CONFIRMATIONS))
            return
        if TABLE not in tables or version != SCHEMA_VERSION:
            self._db.close()
            raise StoreError(f"{self.path}: an SQLite database that is not a result store of this tuner "
                             f"(schema {version}, this tuner writes {SCHEMA_VERSION}); left untouched: "
                             f"give --store a new file")

    def _in_transaction(self, work) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            work()
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _create(self, *statements: str) -> None:
        """Run the schema's statements (default: all of it) and mark the database as this schema."""
        for statement in statements or (*_SCHEMA.split(";"), _FEATURES, _CONFIRMATIONS):
            if statement.strip():
                self._db.execute(statement)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def put(self, result: Result) -> None:
        """Write (or overwrite) the result for its key and conditions, committed before this returns."""
        self._still_there()
        device_id, timing = _conditions(result)
        self._db.execute(
            "INSERT INTO results (key, compiler, runtime, device_id, timing, dispatch, target, config, flags, status,"
            " median_ms, result, run, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key, compiler, runtime, device_id, timing) DO UPDATE SET dispatch=excluded.dispatch,"
            " target=excluded.target, config=excluded.config, flags=excluded.flags, status=excluded.status,"
            " median_ms=excluded.median_ms, result=excluded.result, run=excluded.run, written_at=excluded.written_at",
            (result.key, self.compiler, self.runtime, device_id, timing, result.dispatch, result.target,
             result.compilation_info, " ".join(result.config_flags), result.status.value, result.median_ms,
             json.dumps(result.to_json()), self.run, time.time()),
        )

    def get(self, key: str, device_id: str = "", timing: str = "") -> Optional[Result]:
        """The result stored for `key` under these conditions, or the build failure stored for it
        (which holds on every device)."""
        row = self._db.execute(
            "SELECT result FROM results WHERE key = ? AND compiler = ? AND runtime = ?"
            " AND ((device_id = ? AND timing = ?) OR (device_id = '' AND timing = '')) ORDER BY written_at DESC",
            (key, self.compiler, self.runtime, device_id, timing)).fetchone()
        return Result.from_json(json.loads(row[0])) if row else None

    def reusable(self, keys: list[str], device_id: str = "", timing: str = "") -> dict[str, Result]:
        """Stored results worth keeping for these keys under these conditions (timeouts are tried
        again), as a later run reuses them: without the rounds of the run that confirmed them."""
        found = {}
        for key in keys:
            result = self.get(key, device_id, timing)
            if result is not None and result.status not in RETRIED:
                found[key] = result.unconfirmed()
        return found

    def latest(self, key: str) -> Optional[Result]:
        """The newest result stored for `key` on any device, timeouts left out (tried again): what
        a search replaying its rounds was told."""
        for (blob,) in self._db.execute(
                "SELECT result FROM results WHERE key = ? AND compiler = ? ORDER BY written_at DESC",
                (key, self.compiler)):
            result = Result.from_json(json.loads(blob))
            if result.status not in RETRIED and (not result.ok or result.first_pass_speedup is not None):
                return result
        return None

    def put_confirmation(self, results: list[Result], rounds: int, device_id: str, timing: str, loaded: bool) -> None:
        """Record a finished confirmation asked for in `rounds` rounds (contested candidates may
        have been timed in more) on a device of this identity, timed this way: the baseline
        first, then the candidates, with their rounds."""
        baseline = results[0]
        self._db.execute(
            "INSERT OR REPLACE INTO confirmations (keys, rounds, compiler, runtime, device_id, timing, results, loaded,"
            " run, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_confirmed_keys(baseline.key, [r.key for r in results[1:]]), rounds, self.compiler,
             self.runtime, device_id, timing, json.dumps([r.to_json() for r in results]),
             int(loaded), self.run, time.time()))

    def confirmation(self, baseline: str, keys: list[str], rounds: int, device_id: str,
                     timing: str) -> Optional[tuple[list[Result], float]]:
        """A finished confirmation of exactly these candidates in `rounds` rounds under these
        conditions, taken on a machine whose load did not change (the baseline first), and when
        it was written; None where there is none."""
        row = self._db.execute(
            "SELECT results, written_at FROM confirmations WHERE keys = ? AND rounds = ? AND compiler = ? AND"
            " runtime = ? AND device_id = ? AND timing = ? AND loaded = 0",
            (_confirmed_keys(baseline, keys), rounds, self.compiler, self.runtime, device_id, timing)).fetchone()
        if row is None:
            return None
        return [Result.from_json(r) for r in json.loads(row[0])], row[1]

    def put_features(self, key: str, pipeline: str, dispatch: str, features: dict[str, float],
                     tiers: dict[str, bool]) -> None:
        """Record what a search knew of a config (its features and preferences, by name)."""
        self._db.execute("INSERT OR REPLACE INTO features (key, pipeline, dispatch, features, tiers) VALUES (?, ?, ?, ?, ?)",
                         (key, pipeline, dispatch, json.dumps(features), json.dumps(tiers)))

    def measured_elsewhere(self, pipeline: str, dispatch: str, device_id: str,
                           timing: str) -> list[tuple[dict, dict, float, str]]:
        """Measured configs of other dispatches of `pipeline`, timed on this device the same way:
        (features, tiers, speedup, dispatch) each, the speedup as a later run would reuse it
        (the first pass against its nearest baseline timing). Learning across runs starts here."""
        out = []
        for features, tiers, blob, name in self._db.execute(
                "SELECT f.features, f.tiers, r.result, f.dispatch FROM features f JOIN results r ON r.key = f.key"
                " WHERE f.pipeline = ? AND f.dispatch != ? AND r.compiler = ? AND r.runtime = ? AND r.device_id = ?"
                " AND r.timing = ? AND r.status = 'ok'", (pipeline, dispatch, self.compiler, self.runtime, device_id, timing)):
            result = Result.from_json(json.loads(blob))
            if result.first_pass_speedup and not result.is_baseline:
                out.append((json.loads(features), json.loads(tiers), result.first_pass_speedup, name))
        return out

    def rows(self) -> list[dict]:
        """Every row of this store (all versions), for reports and tests."""
        cursor = self._db.execute("SELECT key, compiler, runtime, device_id, timing, dispatch, target, config, flags, status,"
                                  " median_ms, run, written_at FROM results ORDER BY written_at")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def recorded_results(path: Path) -> dict[str, Result]:
    """The newest result of each key in the store at `path` (any device and version; timeouts and
    interruptions left out, as a rerun tries them again), read without writing to it: what an
    earlier run measured, for a run that replays it (tuner.evaluation.replay_runner)."""
    try:
        db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        rows = db.execute("SELECT key, result FROM results ORDER BY written_at").fetchall()
        db.close()
    except sqlite3.Error as e:
        raise StoreError(f"{path}: cannot read it as a result store ({e})") from None
    found: dict[str, Result] = {}
    for key, blob in rows:
        result = Result.from_json(json.loads(blob))
        if result.status not in CUT_SHORT:
            found[key] = result
    return found


def store_history(path: Path) -> list[dict]:
    """The runs whose results the store at `path` holds, oldest first, read without changing the
    file or writing beside it: for each, who wrote it and when (its `run`, its first and last
    write), how many results it left (of which timed, failed), the dispatches, its best
    first-pass figure (each candidate's ratio to the baseline timed nearest it, so a drift of the
    machine between candidates does not make one) and its confirmed figure (of the candidate a
    confirmation it finished chose: the median of its fresh rounds where it has them, else of the
    interleaved rounds that chose it; the best over its confirmations; `confirmed_loaded`: taken
    while the machine's load changed). None where it has none. A rerun that measured a config again holds
    it under its own run: the history is what each run left, not everything each one did."""
    # With no write-ahead log beside it (no run has it open, none was killed mid-write), opened as
    # immutable: SQLite then makes no -shm or -wal file of its own; with one, read through it.
    live = Path(f"{path}-wal").exists()
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}", uri=True)
    except sqlite3.OperationalError as e:
        raise OutputError(f"{path}: cannot read the result store ({e})") from None
    try:
        rows = db.execute(f"SELECT run, dispatch, status, result, written_at FROM {TABLE} ORDER BY written_at").fetchall()
        confirmations = db.execute("SELECT run, results, loaded FROM confirmations").fetchall()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path}: not a result store of this tuner ({e})") from None
    finally:
        db.close()
    runs: dict[str, dict] = {}
    for run, dispatch, status, blob, written in rows:
        record = runs.setdefault(run, {"run": run, "first": written, "last": written, "results": 0, "ok": 0,
                                       "failed": 0, "dispatches": [], "best_first_pass": None, "confirmed": None,
                                       "confirmed_loaded": False})
        record["last"] = written
        record["results"] += 1
        if dispatch not in record["dispatches"]:
            record["dispatches"].append(dispatch)
        result = Result.from_json(json.loads(blob))
        record["ok" if status == Status.OK.value else "failed"] += 1
        if result.ok and not result.is_baseline and result.first_pass_speedup:
            record["best_first_pass"] = max(record["best_first_pass"] or 0.0, result.first_pass_speedup)
    for run, blob, loaded in confirmations:
        if run not in runs:
            continue
        confirmed = [r for r in map(Result.from_json, json.loads(blob)) if not r.is_baseline and r.confirmed]
        if confirmed:  # the one its rounds chose, with the figure the run claimed for it (its fresh rounds')
            figure = max(confirmed, key=lambda r: r.paired.speedup).speedup
            if figure > (runs[run]["confirmed"] or 0.0):
                runs[run]["confirmed"], runs[run]["confirmed_loaded"] = figure, bool(loaded)
    return list(runs.values())
