"""A root op as the compiler configured it: what a config is checked against (read back from
executable-configurations by tuner.discovery.read_back). Plain data, IREE-free."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfiguredDispatch:
    """A root op as the compiler configured it, read back from executable-configurations."""

    op_name: str
    lowering_config: str
    translation_info: str
    # The root op's attributes by name, as the compiler left them (what Config.root_attributes
    # are read back from).
    attributes: tuple[tuple[str, str], ...] = ()
    loop_bounds: tuple[int, ...] = ()  # static loop extents, where the reader knows them
    # Reduction roots: the lowering_configs of the dispatch's other configured ops, in program order.
    fused_lowering_configs: tuple[str, ...] = ()
    ukernels: str = ""  # llvm-cpu: the executable target's `ukernels` ("" where it names none)
