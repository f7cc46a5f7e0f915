"""How to run the compiled module: its entry function, what it takes and what it returns (no
compiler needed). Inputs are generated from the entry's signature: tensors as .npy files (bf16 and
the f8 types as raw bits in a .bin file, since numpy has no such dtype), scalars as literals,
integers in a small range so that indices (token ids into a gather) stay valid. Results of those
types come back as raw bits too and are widened to f32 to be compared."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from tuner.discovery.raw_types import RAW_TYPES, f32_to_raw
from tuner.core.running import input_flag  # noqa: F401 (its home before; clients' stages import it here)
from tuner.errors import InputError
from tuner.run_dir import real_directory, write_file

# MLIR element types the runner can feed from .npy files.
NUMPY_DTYPES = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "i1": np.bool_,
}
SCALAR_TYPES = ("f32", "f16", "f64", "i64", "i32", "i16", "i8", "i1", "index")


# The most elements one generated input may hold (16 Gi: 64 GiB of f32), so that a huge shape in a
# manifest is one error line rather than numpy's MemoryError.
MAX_ELEMENTS = 2 ** 34


# The size given to a dynamic dimension of an entry's argument when neither the program's own
# hints (util.assume.int) nor the user (--dynamic-size, or their own --input files) say more: a
# sequence of 128 tokens, say. Clipped into the hint's range and rounded to its divisor.
DEFAULT_DYNAMIC_SIZE = 128


@dataclass(frozen=True)
class DimHint:
    """What the program assumes of a dynamic dimension (util.assume.int): its range and a
    divisor of it; a dimension with no hint is 1..2^31-1, any multiple of 1."""

    dim: int
    umin: int = 1
    umax: int = 2 ** 31 - 1
    udiv: int = 1

    def size(self, wanted: int) -> int:
        """`wanted`, clipped into the range and rounded to a multiple of the divisor (up, or
        down where up leaves the range)."""
        n = min(max(wanted, self.umin, 1), self.umax)
        up = -(-n // self.udiv) * self.udiv
        return up if up <= self.umax else max(self.udiv, n // self.udiv * self.udiv)

    def allows(self, size: int) -> bool:
        return self.umin <= size <= self.umax and size % self.udiv == 0

    def source(self) -> str:
        """Where the range comes from, as said to the user."""
        bounds = [f"{self.umin}..{self.umax}" if (self.umin, self.umax) != (1, 2 ** 31 - 1) else "",
                  f"a multiple of {self.udiv}" if self.udiv > 1 else ""]
        said = ", ".join(b for b in bounds if b)
        return f"util.assume.int: {said}" if said else "no hint in the program"

    def describe(self, size: int) -> str:
        return f"{size} ({self.source()})"


CHUNK = 1 << 24  # elements drawn at a time: what an input costs beyond itself in memory


def _chunked(shape, dtype, draw) -> np.ndarray:
    """An array of `shape` and `dtype` filled by `draw(n)` n elements at a time, in order: the
    same values as one draw of the whole (the generator's stream is consumed alike), without a
    float64 copy of the whole (a 65536x65536 f32 input was 32 GiB of float64 first)."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        flat[start:start + CHUNK] = draw(min(CHUNK, flat.size - start))
    return out


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument or result (or, with `scalar`, a scalar of `element_type`)."""

    shape: tuple[int, ...]
    element_type: str  # MLIR spelling
    scalar: bool = False
    value: Optional[str] = None  # a scalar's fixed value (a dispatch benchmark's count), else random
    # The dimensions the program leaves dynamic, with what it assumes of each: `shape` holds the
    # size chosen for them (`sized`), -1 until one is.
    dynamic: tuple[DimHint, ...] = ()
    # An argument the function never reads (dead in the compiled program: no import, no use), so
    # its type is unknown there and never checked: a one-element placeholder is generated, and a
    # given --input of any shape and type is passed as it is.
    unread: bool = False

    def sized(self, wanted: int) -> "TensorSpec":
        """This argument with each dynamic dimension given `wanted`, as its hint allows."""
        if not self.dynamic:
            return self
        shape = list(self.shape)
        for hint in self.dynamic:
            shape[hint.dim] = hint.size(wanted)
        return replace(self, shape=tuple(shape))

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether a given array's shape is one this argument takes (where dynamic, any size its
        hint allows)."""
        if self.unread:
            return True
        hints = {h.dim: h for h in self.dynamic}
        return len(shape) == len(self.shape) and all(
            hints[i].allows(n) if i in hints else n == d for i, (n, d) in enumerate(zip(shape, self.shape)))

    @property
    def mlir(self) -> str:
        """The type as the program spells it (`?` where dynamic)."""
        if self.unread:
            return "never read (any array)"
        free = {h.dim for h in self.dynamic}
        dims = ["?" if d < 0 or i in free else str(d) for i, d in enumerate(self.shape)]
        return self.element_type if self.scalar else "x".join([*dims, self.element_type])

    @property
    def run_type(self) -> str:
        """The type of the value a run passes (`SHAPExTYPE`, the sizes chosen)."""
        return "x".join([*map(str, self.shape), self.element_type])

    def unrunnable(self) -> Optional[str]:
        """Why inputs of this type cannot be generated, or None."""
        if self.element_type == "f64":
            return (f"{self.mlir}: f64 cannot run as given (IREE demotes f64 to f32 while the inputs stay f64); "
                    "convert the model to f32")
        if any(d < 0 for d in self.shape):
            return f"{self.mlir}: a dynamic shape no size was chosen for"
        elements = math.prod(self.shape)
        if elements > MAX_ELEMENTS:
            return (f"{'x'.join(map(str, self.shape))}x{self.element_type}: {elements} elements, more than the "
                    f"{MAX_ELEMENTS} an input may have here" + ("; give a smaller --dynamic-size" if self.dynamic else ""))
        known = SCALAR_TYPES if self.scalar else (*NUMPY_DTYPES, *RAW_TYPES)
        if self.element_type not in known:
            return f"{self.mlir}: element type {self.element_type} is not supported for benchmark inputs yet"
        return None

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """Random data in a range where products and sums stay well inside the type, and where
        integers are valid indices into anything of 5 or more elements."""
        if self.element_type in RAW_TYPES:
            return _chunked(self.shape, np.uint8 if self.element_type != "bf16" else np.uint16,
                            lambda n: f32_to_raw(rng.uniform(-1.0, 1.0, size=n), self.element_type))
        dtype = NUMPY_DTYPES[self.element_type]
        if dtype is np.bool_:
            return _chunked(self.shape, np.bool_, lambda n: rng.integers(0, 2, size=n).astype(np.bool_))
        if np.issubdtype(dtype, np.integer):
            return _chunked(self.shape, dtype, lambda n: rng.integers(0, 5, size=n, dtype=dtype))
        return _chunked(self.shape, dtype, lambda n: rng.uniform(-1.0, 1.0, size=n))

    def literal(self, rng: np.random.Generator) -> str:
        """The scalar as iree-run-module reads it: its fixed value, else a random one."""
        if self.value is not None:
            return self.value
        if self.element_type.startswith("f"):
            return f"{rng.uniform(0.5, 1.0):.6f}"
        if self.element_type == "i1":
            return str(int(rng.integers(0, 2)))
        return str(int(rng.integers(1, 5)))

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "element_type": self.element_type, "scalar": self.scalar,
                **({"value": self.value} if self.value is not None else {}),
                **({"dynamic": [h.__dict__ for h in self.dynamic]} if self.dynamic else {}),
                **({"unread": True} if self.unread else {})}


@dataclass(frozen=True)
class Workload:
    """The entry function a benchmark calls, its inputs and its results."""

    entry: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...] = field(default=(TensorSpec((), "f32"),))
    # An IREE dispatch benchmark function: its argument is a dispatch count, and it is timed as
    # the dispatch alone (in batches), whatever the target.
    dispatch_benchmark: bool = False
    # The model's external parameters, as the runtime tools read them: `SCOPE=/absolute/FILE`
    # each (tuner.input.parameters).
    parameters: tuple[str, ...] = ()

    def sized(self, wanted: int = DEFAULT_DYNAMIC_SIZE) -> "Workload":
        """This function with each dynamic dimension of its arguments given `wanted`, as the
        program's hints allow (results keep theirs dynamic: they come back as they are)."""
        return replace(self, inputs=tuple(s.sized(wanted) for s in self.inputs))

    def dynamic_sizes(self) -> list[str]:
        """What was chosen for each dynamic dimension of the arguments, and from what."""
        return [f"argument {i} ({s.element_type}) dimension {h.dim}: {h.describe(s.shape[h.dim])}"
                for i, s in enumerate(self.inputs) for h in s.dynamic]

    def unrunnable(self) -> Optional[str]:
        """Why this function cannot be run with generated inputs, or None."""
        for spec in self.inputs:
            problem = spec.unrunnable()
            if problem:
                return f"argument {problem}"
        for spec in self.outputs:  # a result is memory too (a dynamic one: as large as it comes)
            elements = math.prod(max(d, 1) for d in spec.shape)
            if elements > MAX_ELEMENTS:
                return (f"result {'x'.join(map(str, spec.shape))}x{spec.element_type}: {elements} elements, more than "
                        f"the {MAX_ELEMENTS} a result may have here")
        return None

    @property
    def checked_output(self) -> Optional[int]:
        """The result whose values the numerics check compares: the first tensor result."""
        return next((i for i, o in enumerate(self.outputs) if not o.scalar), None)

    def given_inputs(self, files: list[Path], directory: Path) -> "Workload":
        """Check the user's own input files (.npy, one per argument, in order) against this
        function's arguments and write them into `directory` as `write_inputs` would name them;
        the workload they make (their sizes for the dynamic dimensions). One clear line for a
        missing file, a wrong count, shape or type."""
        if len(files) != len(self.inputs):
            raise InputError(f"@{self.entry} takes {len(self.inputs)} arguments "
                             f"({', '.join(s.mlir for s in self.inputs) or 'none'}); {len(files)} --input files given")
        real_directory(directory)
        specs = []
        for i, (path, spec) in enumerate(zip(files, self.inputs)):
            try:
                with open(path, "rb") as f:
                    if f.read(6) != b"\x93NUMPY":  # numpy would call anything else pickled data
                        raise InputError(f"--input {path}: not a .npy file (it does not start as one does); "
                                         "save the array with numpy.save")
                array = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise InputError(f"--input {path}: not a readable .npy file ({e})") from None
            if spec.unread:  # never read by the function: passed as it is
                known = next((t for t, d in NUMPY_DTYPES.items() if np.dtype(d) == array.dtype), None)
                if known is None:
                    raise InputError(f"--input {path}: {array.dtype}, a type the IREE tools do not take")
                spec = replace(spec, shape=tuple(array.shape), element_type=known)
                write_file(directory / f"input{i}.npy", lambda f: np.save(f, array))
                specs.append(spec)
                continue
            want = (np.dtype(RAW_TYPES[spec.element_type]) if spec.element_type in RAW_TYPES
                    else np.dtype(NUMPY_DTYPES.get(spec.element_type, np.float32)))
            if spec.element_type in RAW_TYPES and array.dtype == np.float32:
                array = f32_to_raw(array, spec.element_type)  # f32 values for a type numpy lacks
            if not spec.fits(tuple(array.shape)) or array.dtype != want:
                allowed = "".join(f"; dimension {h.dim}: {h.source()}" for h in spec.dynamic)
                raw = " raw bits, or float32 values" if spec.element_type in RAW_TYPES else ""
                raise InputError(f"--input {path}: {array.dtype} {tuple(array.shape)}, but argument {i} of "
                                 f"@{self.entry} is {spec.mlir} ({want}{raw}{allowed})")
            spec = replace(spec, shape=tuple(array.shape))
            if spec.scalar:
                write_file(directory / f"input{i}.{spec.element_type}.scalar", str(array.item()))
            elif spec.element_type in RAW_TYPES:
                write_file(directory / f"input{i}.{spec.run_type}.bin", np.ascontiguousarray(array).tobytes())
            else:
                write_file(directory / f"input{i}.npy", lambda f: np.save(f, array))
            specs.append(spec)
        return replace(self, inputs=tuple(specs))

    def write_inputs(self, directory: Path, seed: int = 0, given: Optional[Path] = None) -> list[Path]:
        """Write one file per input (fresh random data from `seed`, or the files in `given`, a
        directory `given_inputs` wrote) and return their paths; see tuner.core.running.input_flag for how each is
        passed to the IREE tools."""
        if given is not None:
            files = input_files(given)
            if len(files) != len(self.inputs):
                raise InputError(f"{given}: {len(files)} input files for the {len(self.inputs)} arguments of @{self.entry}")
            real_directory(directory)
            for f in files:
                write_file(directory / f.name, f.read_bytes())
            return [directory / f.name for f in files]
        problem = self.unrunnable()
        if problem:
            raise InputError(f"@{self.entry}: {problem}")
        real_directory(directory)
        rng = np.random.default_rng(seed)
        paths = []
        for i, spec in enumerate(self.inputs):
            if spec.scalar:
                path = directory / f"input{i}.{spec.element_type}.scalar"
                content: object = spec.literal(rng)
            elif spec.element_type in RAW_TYPES:
                path = directory / f"input{i}.{spec.run_type}.bin"
                content = spec.random(rng)
            else:
                path = directory / f"input{i}.npy"
                content = spec.random(rng)
            # Atomic (a killed run never leaves a truncated input behind), never through a link.
            write_file(path, content if isinstance(content, str) else
                       np.ascontiguousarray(content).tobytes() if path.suffix == ".bin"
                       else lambda f, array=content: np.save(f, array))
            paths.append(path)
        return paths

    def to_json(self) -> dict:
        return {"entry": self.entry, "inputs": [s.to_json() for s in self.inputs],
                "outputs": [s.to_json() for s in self.outputs], "dispatch_benchmark": self.dispatch_benchmark,
                **({"parameters": list(self.parameters)} if self.parameters else {})}

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        """The workload a manifest describes; a value the runner cannot use is an InputError."""
        entry, inputs = data["entry"], data["inputs"]
        if not isinstance(entry, str) or not entry or not isinstance(inputs, list):
            raise InputError(f"workload: entry must be a function name and inputs a list (got {entry!r}, {inputs!r})")

        def spec(i: int, item: dict, what: str) -> TensorSpec:
            shape, element_type, scalar = item["shape"], item["element_type"], bool(item.get("scalar", False))
            if element_type not in (*NUMPY_DTYPES, *RAW_TYPES, *SCALAR_TYPES):
                raise InputError(f"workload {what} {i}: unknown element type {element_type!r}; "
                                 f"known: {', '.join([*NUMPY_DTYPES, *RAW_TYPES])}")
            low = -1 if what == "output" else 0  # a dynamic result's size is what the run returns
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and low <= d < 2 ** 31
                                                      for d in shape):
                raise InputError(f"workload {what} {i}: shape {shape!r} is not a list of non-negative dimensions")
            elements = math.prod(shape)
            if elements > MAX_ELEMENTS:
                raise InputError(f"workload {what} {i}: shape {shape!r} holds {elements} elements, more than "
                                 f"{MAX_ELEMENTS} an input may have here")
            dynamic = item.get("dynamic", [])
            try:
                hints = tuple(DimHint(**h) for h in dynamic)
            except TypeError:
                raise InputError(f"workload {what} {i}: dynamic {dynamic!r} is not a list of dimension hints") from None
            value = item.get("value")
            if value is not None and not (scalar and isinstance(value, str)):
                raise InputError(f"workload {what} {i}: a fixed value belongs to a scalar and is a string (got {value!r})")
            unread = item.get("unread", False)
            if not isinstance(unread, bool):
                raise InputError(f"workload {what} {i}: unread is {unread!r}, not true or false")
            return TensorSpec(tuple(shape), element_type, scalar, value, hints, unread)

        outputs = data.get("outputs", [{"shape": [], "element_type": "f32"}])
        parameters = data.get("parameters", [])
        if not isinstance(parameters, list) or not all(isinstance(p, str) and "=" in p for p in parameters):
            raise InputError(f"workload parameters: {parameters!r} is not a list of SCOPE=FILE")
        return cls(entry, tuple(spec(i, s, "input") for i, s in enumerate(inputs)),
                   tuple(spec(i, s, "output") for i, s in enumerate(outputs)), bool(data.get("dispatch_benchmark", False)),
                   tuple(parameters))


def input_files(directory: Path) -> list[Path]:
    """The input files `Workload.write_inputs` wrote in `directory` (input0..., input1...), in
    argument order."""
    numbered = [p for p in directory.glob("input*") if p.name[len("input"):].split(".")[0].isdigit()]
    return sorted(numbered, key=lambda p: int(p.name[len("input"):].split(".")[0]))

