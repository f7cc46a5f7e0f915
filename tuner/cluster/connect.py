"""Which Ray cluster a run uses, and what its nodes declare.

A run connects to the cluster at `--ray-address` (or $RAY_ADDRESS); with neither, it starts a
local one for itself (this machine's CPUs, `compile_workers` compile slots) and stops it when the
process ends, what Ray leaves of it after a SIGKILL too (tuner.cluster.reaper). The IREE tools override ($IREE_TUNER_TOOLS) travels to every worker.

A node takes compile tasks only if it declares the custom resource `iree_compile`, as many as it
runs compiles at once (`ray start ... --resources='{"iree_compile": 8}'`); it needs
iree-base-compiler and this package installed. Every node of a CPU-only cluster, and every GPU of
a GPU cluster, gets one benchmark worker (needs iree-base-runtime and this package).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import threading
from typing import Callable, Optional

from tuner.cluster.reaper import note_head, reap_after_exit, reap_now
from tuner.errors import InputError
from tuner.tools import TOOLS_ENV

COMPILE_RESOURCE = "iree_compile"
ADDRESS_ENV = "RAY_ADDRESS"

_lock = threading.Lock()
_started_here = False


def import_ray():
    """The ray module, or one error line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--strategy ray needs Ray: pip install -e '.[ray]'") from None
    return ray


class NoTokenNotice(logging.Filter):
    """Ray 2.5x says on every `ray.init` that token authentication is on (its secure default): a
    notice of Ray's, not of this tuner's run, so it is kept out of the tuner's output. The warning
    that authentication is off stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def connect(address: Optional[str] = None, compile_workers: int = 1):
    """Connect this process to a cluster once (later calls reuse the connection): `address`, else
    $RAY_ADDRESS, else a local cluster started here and stopped when the process exits."""
    global _started_here
    ray = import_ray()
    with _lock:
        if ray.is_initialized():
            return ray
        address = address or os.environ.get(ADDRESS_ENV) or None
        env = {k: os.environ[k] for k in (TOOLS_ENV,) if os.environ.get(k)}
        common = dict(runtime_env={"env_vars": env} if env else None, log_to_driver=False,
                      include_dashboard=False, configure_logging=False)
        if address:
            _reachable(address)
        # ray.init installs its own SIGTERM handler in the driver (it exits 15 with a stack dump):
        # the tuner's handlers (one line, tools killed, exit 143) are put back after it.
        handlers = _signal_handlers()
        notices = logging.getLogger("ray._private.authentication.authentication_token_setup")
        quiet = NoTokenNotice()
        notices.addFilter(quiet)
        try:
            if address:
                ray.init(address=address, **common)
            else:
                reap_after_exit()
                # "local": a new cluster even where one runs on this machine already (without
                # it Ray joins that one and refuses the CPU count: "When connecting to an
                # existing cluster, num_cpus and num_gpus must not be provided").
                ray.init(address="local", num_cpus=os.cpu_count(),
                         resources={COMPILE_RESOURCE: max(1, compile_workers)}, **common)
                note_head(ray)
                _started_here = True
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise InputError(f"cannot connect to the Ray cluster at {address or 'a new local one'}: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        finally:
            _restore(handlers)
            notices.removeFilter(quiet)
        atexit.register(shutdown)
        return ray


_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _signal_handlers() -> dict:
    """This process's handlers of the signals that end a run (where they can be set: the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in _SIGNALS}


def _restore(handlers: dict) -> None:
    for signum, handler in handlers.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


def _reachable(address: str) -> None:
    """A `host:port` address must answer before Ray is asked to connect (Ray retries for minutes
    and prints warnings meanwhile); other forms ("auto", "ray://...") are left to Ray."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in host:
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise InputError(f"no Ray cluster answers at {address} ({e.strerror or type(e).__name__}): start one with "
                         f"`ray start --head --resources='{{\"{COMPILE_RESOURCE}\": N}}'` or give its address") from None


_before_shutdown: list[Callable[[], None]] = []  # what must stop before the connection goes


def before_shutdown(stop: Callable[[], None]) -> None:
    """Have `shutdown` call `stop` first (the benchmark workers register their own stop)."""
    if stop not in _before_shutdown:
        _before_shutdown.append(stop)


def shutdown() -> None:
    """Disconnect (and stop the local cluster if this process started it), after stopping what
    registered with `before_shutdown`."""
    global _started_here
    for stop in _before_shutdown:
        stop()
    ray = import_ray()
    with _lock:
        if ray.is_initialized():
            ray.shutdown()
        _started_here = False
    reap_now()


def compile_slots(ray) -> int:
    """How many compiles the cluster runs at once (its nodes' `iree_compile`), or an error line."""
    slots = int(ray.cluster_resources().get(COMPILE_RESOURCE, 0))
    if slots < 1:
        raise InputError(f"no node of the Ray cluster can compile: start the ones with iree-base-compiler with "
                         f"`ray start ... --resources='{{\"{COMPILE_RESOURCE}\": N}}'`")
    return slots
