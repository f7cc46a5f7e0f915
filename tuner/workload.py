"""How to run the compiled module: its entry function and the tensors it takes (no compiler needed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

# MLIR element types the runner can feed from .npy files.
NUMPY_DTYPES = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
}


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    element_type: str  # MLIR spelling

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """Random data in a range where products and sums stay well inside the type."""
        dtype = NUMPY_DTYPES[self.element_type]
        if np.issubdtype(dtype, np.integer):
            return rng.integers(-4, 5, size=self.shape, dtype=dtype)
        return rng.uniform(-1.0, 1.0, size=self.shape).astype(dtype)


@dataclass(frozen=True)
class Workload:
    """The entry function a benchmark calls and its inputs."""

    entry: str
    inputs: tuple[TensorSpec, ...]

    def write_inputs(self, directory: Path, seed: int = 0) -> list[Path]:
        """Write one .npy file per input (fresh random data from `seed`) and return their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        paths = []
        for i, spec in enumerate(self.inputs):
            path = directory / f"input{i}.npy"
            tmp = directory / f"input{i}.tmp.npy"
            np.save(tmp, spec.random(rng))
            tmp.replace(path)  # a killed run never leaves a truncated input behind
            paths.append(path)
        return paths

    def to_json(self) -> dict:
        return {"entry": self.entry, "inputs": [{"shape": list(s.shape), "element_type": s.element_type} for s in self.inputs]}

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        return cls(data["entry"], tuple(TensorSpec(tuple(i["shape"]), i["element_type"]) for i in data["inputs"]))
