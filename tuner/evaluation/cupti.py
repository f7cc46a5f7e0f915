"""CUDA kernel records from NVIDIA's CUPTI activity API, through ctypes: which kernels ran in
this process, on which device, from when to when (device clock, ns); a memset and a copy from
device memory to device memory are recorded as kernels of their own ("Memset (Device)",
"Memcpy DtoD (Device)", as torch.profiler names them), being device work of the calls too. No
torch, no CUDA toolkit headers: the library alone, from the CUDA toolkit or the
`nvidia-cuda-cupti` wheel (the `cuda` extra). The IREE runtime runs in this process, and CUPTI sees the kernels its CUDA HAL launches,
named after their dispatch (tuner.evaluation.kernel_times reads them).

Only the first, stable part of a record is read (kind, start, end, device, stream; a kernel's
name, a copy's kind); every CUDA 11-13 version of each record begins with the same fields, and
`cuptiActivityGetNextRecord` steps over the rest. A record that does not look like one (end
before start, a kernel without a name) stops the trace with an error rather than giving a wrong
time."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

# CUpti_ActivityKind: CONCURRENT_KERNEL records kernels without serializing them.
_MEMCPY, _MEMSET, _CONCURRENT_KERNEL = 1, 2, 10
_KINDS = (_CONCURRENT_KERNEL, _MEMSET, _MEMCPY)
_DTOD = 8  # CUpti_ActivityMemcpyKind: device memory to device memory (host copies are the harness's)
_FLUSH_FORCED = 1
_BUFFER_BYTES = 8 << 20
_ALIGN = 8
# Offsets in CUpti_ActivityKernel (every version): kind u32 @0, start u64 @16, end u64 @24,
# deviceId u32 @40, contextId u32 @44, streamId u32 @48, correlationId u32 @92, name char* @104.
_KIND, _START, _END, _DEVICE, _STREAM, _CORRELATION, _NAME = 0, 16, 24, 40, 48, 92, 104
# In CUpti_ActivityMemset and CUpti_ActivityMemcpy (every version): kind u32 @0, a memcpy's
# copyKind u8 @4, start u64 @16, end u64 @24, deviceId u32 @32, streamId u32 @40.
_COPY_KIND, _SET_DEVICE, _SET_STREAM = 4, 32, 40
MEMSET, MEMCPY_DTOD = "Memset (Device)", "Memcpy DtoD (Device)"

# Where libcupti may be, first match wins: the user's choice, the driver's toolkit, the wheel.
ENV = "IREE_TUNER_CUPTI"


@dataclass(frozen=True)
class KernelRecord:
    """One kernel run on the device, as CUPTI recorded it (or a memset or device-to-device copy,
    named MEMSET or MEMCPY_DTOD)."""

    name: str
    start_ns: int
    end_ns: int
    device: int = 0
    stream: int = 0

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_json(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict) -> "KernelRecord":
        return cls(**data)


class CuptiUnavailable(Exception):
    """CUPTI cannot be loaded or used here (the message says why): timing falls back."""


_REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                            ctypes.POINTER(ctypes.c_size_t))
_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_size_t)


def library_candidates() -> list[str]:
    """Paths (or sonames) to try for libcupti, in order."""
    found = [os.environ[ENV]] if os.environ.get(ENV) else []
    for root in ("/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)):
        found += sorted(glob.glob(f"{root}/extras/CUPTI/lib64/libcupti.so*"))
        found += sorted(glob.glob(f"{root}/targets/*/lib/libcupti.so*"))
    for entry in sys.path:  # the nvidia-cuda-cupti wheel (nvidia/cu13/lib, nvidia/cuda_cupti/lib)
        found += sorted(glob.glob(f"{entry}/nvidia/*/lib/libcupti.so*"))
    found += ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
    return list(dict.fromkeys(found))


class Tracer:
    """Collects kernel records while `trace()` is open. One per process (CUPTI's callbacks are
    process-wide); `tracer()` gives it. Traces of several devices may be open at once, but a run
    timing on several GPUs calls each in a process of its own (tuner.evaluation.device_worker:
    two devices' threads in one process can deadlock between CUPTI's callbacks and IREE's module
    loads), so a tuning opens one device's traces a process."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib = lib
        self.path = path
        self._buffers: dict[int, ctypes.Array] = {}
        self._open: list[_Open] = []  # the traces open now, at most one a device
        self._problem: Optional[str] = None
        self._lock = threading.Lock()
        # Traces wait on it for their device: records are process-wide, so a trace of one device
        # opens beside those of others (each GPU of the host timing at once, issue 62), and one of
        # every device (None) alone.
        self._turn = threading.Condition()
        self._request = _REQUEST(self._on_request)  # kept alive: CUPTI calls them later
        self._complete = _COMPLETE(self._on_complete)
        lib.cuptiActivityGetNextRecord.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self._check(lib.cuptiActivityRegisterCallbacks(self._request, self._complete), "registering buffers")

    def _check(self, code: int, doing: str) -> None:
        if code != 0:
            text = ctypes.c_char_p()
            self.lib.cuptiGetResultString(code, ctypes.byref(text))
            raise CuptiUnavailable(f"CUPTI ({self.path}) failed {doing}: "
                                   f"{(text.value or b'').decode(errors='replace') or code}")

    def _on_request(self, buffer, size, max_records) -> None:
        raw = ctypes.create_string_buffer(_BUFFER_BYTES + _ALIGN)
        address = ctypes.addressof(raw)
        aligned = address + (-address % _ALIGN)
        with self._lock:
            self._buffers[aligned] = raw
        buffer[0] = aligned
        size[0] = _BUFFER_BYTES
        max_records[0] = 0

    def _on_complete(self, _context, _stream, buffer, _size, valid) -> None:
        record = ctypes.c_void_p()
        found: list[KernelRecord] = []
        problem = None
        try:
            while valid and self.lib.cuptiActivityGetNextRecord(buffer, valid, ctypes.byref(record)) == 0:
                parsed = read_record(record.value)
                if isinstance(parsed, str):
                    problem = parsed
                    break
                if parsed is not None:
                    found.append(parsed)
        finally:
            with self._lock:
                self._buffers.pop(buffer, None)
                deliver(found, self._open)
                self._problem = self._problem or problem

    def _now(self) -> int:
        """CUPTI's clock (the records' own), ns."""
        stamp = ctypes.c_uint64(0)
        self._check(self.lib.cuptiGetTimestamp(ctypes.byref(stamp)), "reading its clock")
        return stamp.value

    @contextmanager
    def trace(self, device: Optional[int] = None) -> Iterator[list[KernelRecord]]:
        """Records every kernel that runs on `device` (a CUDA ordinal; None: on every device)
        while open; the list it yields is filled when it closes (the device must have finished:
        synchronize before leaving). Traces of other devices may be open at the same time."""
        with self._turn:
            self._turn.wait_for(lambda: not any(o.device in (device, None) or device is None for o in self._open))
            with self._lock:
                if not self._open:
                    self._problem = None
                    for kind in _KINDS:
                        self._check(self.lib.cuptiActivityEnable(kind), "enabling kernel, memset and copy records")
                mine = _Open(device, self._now())
                self._open.append(mine)
        out: list[KernelRecord] = []
        try:
            yield out
        finally:
            self.lib.cuptiActivityFlushAll(_FLUSH_FORCED)  # every buffer delivered, this trace's among them
            with self._turn:
                with self._lock:
                    self._open.remove(mine)
                    last = not self._open
                    problem = self._problem
                if last:
                    for kind in _KINDS:
                        self.lib.cuptiActivityDisable(kind)
                    self.lib.cuptiActivityFlushAll(_FLUSH_FORCED)
                self._turn.notify_all()
            out += mine.within()
        if problem:
            raise CuptiUnavailable(f"CUPTI ({self.path}): {problem}")


@dataclass
class _Open:
    """A trace while it is open: its device (None: every one), since when (CUPTI's clock), and
    the records delivered to it."""

    device: Optional[int]
    start_ns: int
    records: list = field(default_factory=list)

    def within(self) -> list[KernelRecord]:
        """Its records of kernels that started once it was open: a buffer flushed now may hold
        the device's kernels from before, recorded while another device's trace was open (the
        calls on a device wait for their kernels, so none runs across the opening)."""
        return [r for r in self.records if r.start_ns >= self.start_ns]


def deliver(records: list[KernelRecord], open_traces: list[_Open]) -> None:
    """Each record to the open traces of its device (and to one of every device)."""
    for trace in open_traces:
        trace.records += [r for r in records if trace.device is None or r.device == trace.device]


def read_record(address: int):
    """The kernel, memset or device-to-device copy record at `address` as a KernelRecord (None
    for another kind of record, or a copy to or from the host; a string saying why for one that
    does not read as its kind's record)."""
    kind = ctypes.c_uint32.from_address(address).value
    if kind not in _KINDS:
        return None
    if kind == _MEMCPY and ctypes.c_uint8.from_address(address + _COPY_KIND).value != _DTOD:
        return None
    start = ctypes.c_uint64.from_address(address + _START).value
    end = ctypes.c_uint64.from_address(address + _END).value
    if end < start:
        return "an activity record does not have the expected layout (it ends before it starts)"
    if kind != _CONCURRENT_KERNEL:
        return KernelRecord(MEMSET if kind == _MEMSET else MEMCPY_DTOD, start, end,
                            ctypes.c_uint32.from_address(address + _SET_DEVICE).value,
                            ctypes.c_uint32.from_address(address + _SET_STREAM).value)
    name_ptr = ctypes.c_void_p.from_address(address + _NAME).value
    if not name_ptr:
        return "a kernel record does not have the expected layout (no name)"
    return KernelRecord(ctypes.string_at(name_ptr).decode(errors="replace"), start, end,
                        ctypes.c_uint32.from_address(address + _DEVICE).value,
                        ctypes.c_uint32.from_address(address + _STREAM).value)


_TRACER: Optional[Tracer] = None
_WHY_NOT: Optional[str] = None
_LOADING = threading.Lock()


def tracer() -> Tracer:
    """This process's tracer; CuptiUnavailable (saying what was tried) where none loads."""
    global _TRACER, _WHY_NOT
    with _LOADING:
        if _TRACER is not None:
            return _TRACER
        if _WHY_NOT is not None:
            raise CuptiUnavailable(_WHY_NOT)
        tried = []
        for path in library_candidates():
            if "/" in path and not Path(path).exists():
                continue
            try:
                _TRACER = Tracer(ctypes.CDLL(path), path)
                return _TRACER
            except (OSError, AttributeError, CuptiUnavailable) as e:
                tried.append(f"{path}: {e}")
        _WHY_NOT = ("CUPTI could not be loaded (install the cuda extra, `pip install -e '.[cuda]'`, or set "
                    f"{ENV} to libcupti.so): " + ("; ".join(tried[-3:]) or "no libcupti found"))
        raise CuptiUnavailable(_WHY_NOT)


def available() -> Optional[str]:
    """None where CUPTI loads here, else why not."""
    try:
        tracer()
        return None
    except CuptiUnavailable as e:
        return str(e)


def no_cuda_device() -> Optional[str]:
    """None where the CUDA driver sees a device, else why not (CUPTI can load without one)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no CUDA driver ({e})"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the CUDA driver finds no device"
    return None
