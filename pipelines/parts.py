"""What a config asks of the compiler beyond its root op's compilation_info, each held by the
pipelines that need it rather than by every config: `Config.parts`, each part a typed record of
its own with its own read-back check (`problems`). The spec builder (tuner.specs.transform), the
build (tuner.build) and the check (pipelines.base.check_config) ask a config for a part by its
type (`Config.part(SplitReduction)`); a config without one is unaffected.

Plain data, IREE-free, like pipelines.dispatch: another compiler can read them."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.configured import ConfiguredDispatch
from pipelines.dispatch import Dispatch


class ConfigPart:
    """One thing a config asks for beyond the root op's compilation_info."""

    def problems(self, configured: ConfiguredDispatch) -> list[str]:
        """Differences between what this part asked for and what the compiler did (none: it took)."""
        return []


@dataclass(frozen=True)
class SplitReduction(ConfigPart):
    """Split-K (llvmgpu_split_k): the root op's reduction is split `ways` ways before the
    compilation_info goes on the split op (a GPU preprocessing spec does both); a second dispatch
    adds the parts. `loop_bounds`: the split op's loop extents, read back."""

    ways: int
    loop_bounds: tuple[int, ...]

    def problems(self, configured: ConfiguredDispatch) -> list[str]:
        if configured.loop_bounds != tuple(self.loop_bounds):
            return [f"loops are {list(configured.loop_bounds)}, expected {list(self.loop_bounds)}"]
        return []


@dataclass(frozen=True)
class FusedOps(ConfigPart):
    """Reduction kinds (softmax, normalizations): the lowering_config of each of the dispatch's
    other configured ops (Dispatch.fused, in its order), set with the root's compilation_info by a
    matcher of the dispatch's structure."""

    lowering_configs: tuple[str, ...]

    def problems(self, configured: ConfiguredDispatch) -> list[str]:
        if configured.fused_lowering_configs != self.lowering_configs:
            return [f"the dispatch's other ops carry {list(configured.fused_lowering_configs)}, "
                    f"expected {list(self.lowering_configs)}"]
        return []


@dataclass(frozen=True)
class TransformSequences(ConfigPart):
    """The named sequences of a transform-dialect kernel (llvmgpu_mma_sync's) that the spec must
    hold beside its entry, which the compilation_info's translation_info names
    (`codegen_spec = @name`). The dumped dispatch benchmark's compile needs them too."""

    sequences: str


@dataclass(frozen=True)
class StoredThrough(ConfigPart):
    """The spec's matcher also requires the `ops` elementwise ops between the root and the store
    (tuner.specs.fused.match_stored_through), so that a same-shaped root with other ops after it
    is not matched. Set on every config of a pipeline with `Pipeline.matches_ops_after`
    (tuner.specs.candidates), the one home of that rule, which also groups a model's dispatches."""

    ops: int


@dataclass(frozen=True)
class DataTiled(ConfigPart):
    """llvm-cpu data tiling: the config goes on `dispatch`, the contraction's data-tiled
    linalg.mmt4d (Dispatch.data_tiled), which exists under the config's flags."""

    dispatch: Dispatch


@dataclass(frozen=True)
class Microkernels(ConfigPart):
    """llvm-cpu: the microkernels the compiled executable's target must name (a flag candidate's
    `--iree-llvmcpu-enable-ukernels=...`, read back)."""

    expected: str

    def problems(self, configured: ConfiguredDispatch) -> list[str]:
        if configured.ukernels != self.expected:
            return [f"the executable's ukernels are {configured.ukernels or 'unset (the default)'}, "
                    f"expected {self.expected}"]
        return []
