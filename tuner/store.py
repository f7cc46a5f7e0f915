"""The result store: an SQLite database where every result is written the moment it arrives.

A result is keyed by what it depends on: the candidate's key (a digest of the dispatch, the input
it came from, the target, the config and its flags) and the compiler and runtime versions. Each
write is its own committed transaction in WAL mode, so a run killed at any moment (kill -9
included) loses nothing it had written, and several runs may share one store at once: SQLite
serializes their writes (a writer waits up to `BUSY_TIMEOUT_S` for another's). WAL needs a local
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

from tuner.errors import OutputError
from tuner.results import Result, Status

BUSY_TIMEOUT_S = 60.0
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT NOT NULL,
    compiler TEXT NOT NULL,
    runtime TEXT NOT NULL,
    dispatch TEXT NOT NULL,
    target TEXT NOT NULL,
    config TEXT NOT NULL,
    flags TEXT NOT NULL,
    status TEXT NOT NULL,
    median_ms REAL,
    result TEXT NOT NULL,
    run TEXT NOT NULL,
    written_at REAL NOT NULL,
    PRIMARY KEY (key, compiler, runtime)
);
CREATE INDEX IF NOT EXISTS results_by_dispatch ON results (dispatch, target);
"""

# Worth trying again rather than reusing: a longer timeout or a calmer machine may change them.
RETRIED = frozenset({Status.COMPILE_TIMEOUT, Status.RUN_TIMEOUT})


def run_id() -> str:
    """Who wrote a row: host, process and start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{time.strftime('%Y-%m-%dT%H:%M:%S')}"


class ResultStore:
    """Results of one compiler and runtime version pair in an SQLite file. One object per
    thread (SQLite connections are not shared between threads)."""

    def __init__(self, path: Path, compiler: str, runtime: str, run: Optional[str] = None) -> None:
        self.path = Path(path)
        self.compiler = compiler
        self.runtime = runtime
        self.run = run or run_id()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise OutputError(f"{self.path}: result store schema {version}, this tuner reads {SCHEMA_VERSION}")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as e:
            raise OutputError(f"{self.path}: cannot open the result store ({e})") from None

    def put(self, result: Result) -> None:
        """Write (or overwrite) the result for its key, committed before this returns."""
        self._db.execute(
            "INSERT INTO results (key, compiler, runtime, dispatch, target, config, flags, status, median_ms,"
            " result, run, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key, compiler, runtime) DO UPDATE SET dispatch=excluded.dispatch,"
            " target=excluded.target, config=excluded.config, flags=excluded.flags, status=excluded.status,"
            " median_ms=excluded.median_ms, result=excluded.result, run=excluded.run, written_at=excluded.written_at",
            (result.key, self.compiler, self.runtime, result.dispatch, result.target, result.compilation_info,
             " ".join(result.config_flags), result.status.value, result.median_ms, json.dumps(result.to_json()),
             self.run, time.time()),
        )

    def get(self, key: str) -> Optional[Result]:
        row = self._db.execute("SELECT result FROM results WHERE key = ? AND compiler = ? AND runtime = ?",
                               (key, self.compiler, self.runtime)).fetchone()
        return Result.from_json(json.loads(row[0])) if row else None

    def reusable(self, keys: list[str]) -> dict[str, Result]:
        """Stored results worth keeping for these keys (timeouts are tried again)."""
        found = {}
        for key in keys:
            result = self.get(key)
            if result is not None and result.status not in RETRIED:
                found[key] = result
        return found

    def rows(self) -> list[dict]:
        """Every row of this store (all versions), for reports and tests."""
        cursor = self._db.execute("SELECT key, compiler, runtime, dispatch, target, config, flags, status,"
                                  " median_ms, run, written_at FROM results ORDER BY written_at")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
