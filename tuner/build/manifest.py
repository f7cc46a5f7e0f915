"""The manifest: what the compile stage hands to the benchmark stage, possibly on another machine.
A directory with manifest.json, the inputs, and each candidate's module and spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Optional
from pathlib import Path

from tuner.run_dir import write_file
from tuner.store import BUILD_FAILURES
from tuner.core.trusted_flags import checked_flags
from tuner.errors import InputError
from tuner.core.built import Built, inside
from tuner.discovery.workload import Workload

MANIFEST = "manifest.json"
VERSION = 1


@dataclass(frozen=True)
class Manifest:
    workload: Workload
    device: str  # the runtime device the target means, e.g. "local-task" or "cuda"
    built: tuple[Built, ...]
    meta: dict = field(default_factory=dict)

    def inputs(self, root: Path) -> tuple[Path, ...]:
        """The benchmark inputs, written where they are measured (they can be far larger than the
        compiled candidates, so they do not travel): seeded random data from the workload."""
        given = self.meta.get("given_inputs")
        return tuple(self.workload.write_inputs(root / "inputs", given=inside(root, given) if given else None))

    def write(self, root: Path) -> Path:
        data = {
            "version": VERSION,
            "workload": self.workload.to_json(),
            "device": self.device,
            "candidates": [b.to_json(root) for b in self.built],
            "meta": self.meta,
        }
        return write_file(root / MANIFEST, json.dumps(data, indent=2))  # never half-written, never through a link

    @classmethod
    def read_existing(cls, root: Path) -> Optional["Manifest"]:
        """The manifest in `root` if there is a readable one (a rerun resumes from it)."""
        try:
            return cls.read(root)
        except InputError:
            return None

    @classmethod
    def read(cls, root: Path) -> "Manifest":
        path = root / MANIFEST
        if not path.is_file():
            raise InputError(f"{root}: no {MANIFEST}; make one with `iree-tuner tune INPUT --compile-only --output {root}`")
        try:
            data = json.loads(path.read_text())
            if data.get("version") != VERSION:
                raise InputError(f"{path}: manifest version {data.get('version')}, this tuner reads {VERSION}")
            try:
                workload = Workload.from_json(data["workload"])
            except InputError as e:
                raise InputError(f"{path}: {e}") from None
            # Rounds and ratios are never taken from a manifest: what ranks is timed here (or held
            # by this run's store); a manifest's rounds could be anyone's (issue 60: forged 9x rounds
            # named a winner that ran 0.81x).
            built = tuple(replace(b, result=b.result.unconfirmed()) for b in
                          (Built.from_json(b, root) for b in data["candidates"]))
            for b in built:  # they go into best_flags.txt, and rebuild compiles with them
                checked_flags((*b.base_flags, *b.spec_flags), root, str(path))
            ids = [b.result.candidate_id for b in built]
            if len(set(ids)) != len(ids):
                raise InputError(f"{path}: candidate ids appear twice ({sorted({i for i in ids if ids.count(i) > 1})}); "
                                 "compile the candidates again")
            # A key names what was compiled: candidates under one key (one config under two
            # summaries) built the same executable; under one key with other executables, one
            # would be given the other's rounds.
            executables: dict[str, set] = {}
            for b in built:
                executables.setdefault(b.result.key, set()).add(b.result.binary_hash)
            clash = sorted(k for k, hashes in executables.items() if len(hashes) > 1)
            if clash:
                raise InputError(f"{path}: candidates of other executables share the key {clash[0]}; "
                                 "a key names what was compiled; compile the candidates again")
            # A compile step marks as reused only a build failure the store held: a result marked
            # so with a status of ok (and times, and no module) was not written by one.
            forged = [b.result.candidate_id for b in built if b.reused and b.result.status not in BUILD_FAILURES]
            if forged:
                raise InputError(f"{path}: candidate {forged[0]} is marked reused with status "
                                 f"{next(b.result.status.value for b in built if b.result.candidate_id == forged[0])}; "
                                 "only build failures are reused from a compile step; compile the candidates again")
            if sum(b.result.is_baseline for b in built) > 1:
                raise InputError(f"{path}: holds {sum(b.result.is_baseline for b in built)} baselines, not one")
            return cls(workload=workload, device=data["device"], built=built, meta=data.get("meta", {}))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: not a readable manifest ({e})") from None
