"""What a timing depends on besides the config: which device ran it (the GPU's name as the runtime
reports it; the CPU's model, ISA level and core count) and what was timed. Both are part of the
result store's key, so a time taken on one machine is never reused on another. Runtime-only."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path


@functools.lru_cache(maxsize=None)
def cpu_identity() -> str:
    """The host CPU: model name, the widest vector ISA it has, and its core count. The model name
    alone can be generic ("Intel(R) Xeon(R) Processor") on machines with different ISAs."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    isa = next((name for name, flag in (("avx512", "avx512f"), ("avx2", "avx2"), ("sve", "sve"), ("neon", "asimd"))
                if flag in flags), "")
    return f"cpu: {model}{' ' + isa if isa else ''}, {os.cpu_count()} cores"


def _found(driver: str) -> list | Exception:
    """The devices the runtime's `driver` lists on this host, or the exception asking raised."""
    try:
        import iree.runtime as rt

        return list(rt.get_driver(driver).query_available_devices())
    except Exception as e:
        return e


@functools.lru_cache(maxsize=None)
def device_identity(device: str) -> str:
    """The identity of a runtime device (`local-task`, `cuda`, `cuda://1`, `hip://0`, ...): the CPU
    for the local drivers, else the name of the device the runtime's driver reports there."""
    driver, _, which = device.partition("://")
    driver = driver.split(":")[0]
    if driver.startswith("local"):
        return cpu_identity()
    found = _found(driver)
    if isinstance(found, Exception):  # no such driver or no device: the run will fail on it with the tool's error
        return f"{driver}: unknown device ({type(found).__name__})"
    if not found:
        return f"{driver}: no device"
    chosen = found[0]
    if which.isdigit() and int(which) < len(found):
        chosen = found[int(which)]
    return f"{driver}: {chosen.get('name', 'unknown')}"


def host_devices(device: str) -> tuple[str, ...]:
    """Every device of a GPU driver named without an index (`cuda`, `hip`) that the runtime finds
    on this host, by index (`cuda://0`, `cuda://1`, ...), where it finds more than one; else
    (`device` names one, a local driver, one device or none, no such driver) `(device,)`. The
    runtime sees only those CUDA_VISIBLE_DEVICES leaves."""
    driver, sep, _ = device.partition("://")
    if sep or ":" in driver or driver.startswith("local"):
        return (device,)
    found = _found(driver)  # none (no such driver): the run fails on it with the tool's error
    return tuple(f"{driver}://{i}" for i in range(len(found))) if isinstance(found, list) and len(found) > 1 else (device,)


def device_available(device: str) -> bool:
    """Whether the runtime finds `device` on this host (a local driver always; a GPU driver's
    device by its index, or any where none is given)."""
    driver, _, which = device.partition("://")
    driver = driver.split(":")[0]
    if driver.startswith("local"):
        return True
    found = _found(driver)  # an exception: no such driver here, or it cannot be started
    return isinstance(found, list) and bool(found) and (not which.isdigit() or int(which) < len(found))


def timing_identity(device: str, dispatch_only: bool, batch: int, cores: tuple[int, ...] = ()) -> str:
    """What a time is a time of, as far as it changes the figure: the whole entry function or the
    dispatch alone (how many dispatches per timed batch), and the runtime's thread count (`cores`:
    the CPUs a cluster's benchmark worker times on, tuner.cluster). The number of repetitions is
    left out: it changes the noise, not what is measured."""
    what = f"dispatch alone, {batch} per batch" if dispatch_only else "entry function"
    driver = device.partition("://")[0].split(":")[0]
    task = (f"{len(cores)} threads pinned to cores {','.join(map(str, cores))}" if cores
            else f"{os.cpu_count()} threads (runtime default)")
    threads = {"local-sync": "1 thread", "local-task": task}.get(driver, "")
    return f"{driver}: {what}" + (f", {threads}" if threads else "")
