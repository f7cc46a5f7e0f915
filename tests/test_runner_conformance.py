"""Every registered runner (tuner.evaluation.runners.RUNNERS), made as `--runner` makes it, holds
the ModuleRunner protocol the measurer calls: the same members, methods with the protocol's
parameters, and a device identity that keys stored timings."""

import inspect

import pytest

from tuner.evaluation.measure import ModuleRunner
from tuner.evaluation.runners import RUNNERS, runner_named
from tuner.store import ResultStore


def _argument(name: str, tmp_path) -> str:
    """What follows the runner's name on the command line, for a runner that can be made here."""
    if name == "replay":
        path = tmp_path / "results.sqlite"
        ResultStore(path, "compiler", "runtime").close()
        return str(path)
    return ""


PROTOCOL = {name: member for name, member in vars(ModuleRunner).items() if not name.startswith("_")}


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_each_registered_runner_holds_the_module_runner_protocol(name, tmp_path):
    argument = _argument(name, tmp_path)
    runner = runner_named(f"{name}:{argument}" if argument else name)
    assert isinstance(runner.local, bool)
    for member, declared in PROTOCOL.items():
        if not callable(declared):
            continue
        own = getattr(runner, member)
        assert callable(own), member
        assert list(inspect.signature(own).parameters) == list(inspect.signature(declared).parameters)[1:], member
    identity = runner.identity("local-task")
    assert isinstance(identity, str) and identity
    assert isinstance(runner.timing_identity("local-task", False, 1), str)
