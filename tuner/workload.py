"""How to run the compiled module: its entry function and the tensors it takes (no compiler needed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuner.errors import InputError

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
        """The workload a manifest describes; a value the runner cannot use is an InputError."""
        entry, inputs = data["entry"], data["inputs"]
        if not isinstance(entry, str) or not entry or not isinstance(inputs, list):
            raise InputError(f"workload: entry must be a function name and inputs a list (got {entry!r}, {inputs!r})")
        specs = []
        for i, spec in enumerate(inputs):
            shape, element_type = spec["shape"], spec["element_type"]
            if element_type not in NUMPY_DTYPES:
                raise InputError(f"workload input {i}: unknown element type {element_type!r}; "
                                 f"known: {', '.join(NUMPY_DTYPES)}")
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2 ** 31
                                                      for d in shape):
                raise InputError(f"workload input {i}: shape {shape!r} is not a list of non-negative dimensions")
            specs.append(TensorSpec(tuple(shape), element_type))
        return cls(entry, tuple(specs))
