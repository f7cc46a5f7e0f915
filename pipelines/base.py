"""The seam every codegen pipeline implements: build a problem, turn a solution into a config.

A pipeline's problem (`build_problem`, `features`) is IREE-free: it reads only the plain
description in `pipelines.dispatch`, so another compiler can build and enumerate it without
installing IREE. Only its lowering (`to_config`: typed IREE attributes) imports the compiler, and
only when called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Union

from constraints import Problem
from pipelines.dispatch import Dispatch

if TYPE_CHECKING:
    from iree.compiler import ir

KnobValue = Union[int, bool]


@dataclass(frozen=True)
class Config:
    """What a candidate changes: a compilation_info for the root op (or none, to keep the
    compiler's own), and extra iree-compile flags."""

    knobs: Mapping[str, KnobValue]
    compilation_info: str | None  # the attribute's text, as printed by the bindings
    flags: tuple[str, ...] = ()
    summary: str = ""  # a short human label, e.g. "wg 64x256 vec 8x32 k1"
    # What to read back from the configured dispatch to prove the config took effect.
    expect_root_op: str | None = None
    expect_lowering_config: str | None = None
    expect_translation_info: str | None = None
    # Attributes other than the compilation_info the spec sets on the root op, by name (each an
    # attribute's text), and reads back like it: attention's decomposition_config (the lowering
    # configs of its QK and PV matmuls) is one.
    root_attributes: tuple[tuple[str, str], ...] = ()
    # Split-K: the root op's reduction is split this many ways before the compilation_info goes
    # on the split op (a GPU preprocessing spec does both); a second dispatch adds the parts.
    split_reduction: int = 1
    # The loop extents the configured root op must have (the split op's, for split-K).
    expect_loop_bounds: tuple[int, ...] | None = None
    # Reduction kinds on GPUs: the lowering_config of each of the dispatch's other configured
    # ops (Dispatch.fused, in its order), annotated with the root's compilation_info.
    fused_lowering_configs: tuple[str, ...] = ()
    # The config goes in at the codegen stage (a @__kernel_config entry, where the dispatch's
    # ops are those the compiler configures) even on targets whose specs are preprocessing specs.
    codegen_spec: bool = False
    # Transform named sequences the spec must hold beside its entry: a transform-dialect codegen
    # strategy that the compilation_info's translation_info names (`codegen_spec = @name`).
    codegen_sequences: str = ""
    # The dispatch whose root op the config goes on, where it is not the tuned dispatch's own:
    # a contraction's data-tiled linalg.mmt4d (Dispatch.data_tiled), which exists under `flags`.
    applies_to: Optional[Dispatch] = None
    # llvm-cpu: the microkernels the compiled executable's target must name (a flag candidate's
    # `--iree-llvmcpu-enable-ukernels=...` read back), or None: not checked.
    expect_ukernels: Optional[str] = None


def tiled_config(knobs: Mapping[str, KnobValue], lowering: ir.Attribute, translation: ir.Attribute,
                 summary: str, expect_root_op: str | None = None) -> Config:
    """A Config that sets the root op's compilation_info from typed attributes, expecting both
    halves to be read back unchanged from the compiled dispatch."""
    from iree.compiler.dialects import iree_codegen

    with lowering.context:
        info = iree_codegen.CompilationInfoAttr.get(lowering, translation)
    return Config(knobs=dict(knobs), compilation_info=str(info), summary=summary, expect_root_op=expect_root_op,
                  expect_lowering_config=str(lowering), expect_translation_info=str(translation))


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


class NotInCompilerKnobs(ValueError):
    """Raised by a pipeline's `compiler_knobs` for a config the compiler's emitted knobs cannot
    say (e.g. split-K: the emitted constraints describe the op unsplit)."""


class Pipeline:
    """One IREE codegen pipeline: every hook the tuner calls, each with its default. A pipeline
    subclasses this and defines at least `name`, `supports`, `build_problem` and `to_config`;
    register it in `pipelines.registry`. The constraint sources of tuner.problem.sources
    subclass it too, wrapping a pipeline (`native` is then the one they wrap)."""

    name: str = ""
    # Flag sets that change every dispatch of a model rather than one (e.g. data tiling): a
    # model's tuning decides them for the whole model, with and without each.
    model_flags: tuple[tuple[str, ...], ...] = ()
    # Those of `model_flags` that form dispatches taking configs of their own (llvm-cpu: data
    # tiling materialized early, the mmt4d): tune-model judges them with the largest tuned first.
    tuned_model_flags: tuple[tuple[str, ...], ...] = ()
    # Knobs whose value sets such a flag: tune-model leaves those configs out (it decides the flag).
    flag_knobs: tuple[str, ...] = ()

    def model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """The model-wide flag sets a model holding this dispatch is tried with (`model_flags`,
        and any that only a dispatch like this one calls for)."""
        return self.model_flags

    def tuned_model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """Those of `model_flags_for(dispatch)` judged with the dispatches they form tuned first."""
        return self.tuned_model_flags

    def flags_to_take(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """Model-wide flag sets under which the compiler would form this dispatch, which the
        pipeline declines as it is formed now, into one the pipeline takes (the mma.sync kernel:
        B stored N x K, which the compiler then stores K x N). Where this pipeline tunes a whole
        model, the flag stage tries them on a choice whose dispatches call for them, judged with
        the contractions they form tuned. Each is one of `taking_flags`."""
        return ()
    # Every flag set `flags_to_take` may give (what a reused flag decision may hold).
    taking_flags: tuple[tuple[str, ...], ...] = ()
    # Flags under which the compiler turns the dispatch into another op whose configs this
    # pipeline's problem also offers (llvm-cpu contractions: the data-tiled linalg.mmt4d);
    # `tune` has discovery find that op under them (Dispatch.data_tiled). () where none.
    data_tiling_flags: tuple[str, ...] = ()
    # Knobs a config the user gives may leave out, with the value that means "not used" (the
    # data-tiled part of a CPU contraction's space, which older config files do not name).
    optional_knobs: Mapping[str, KnobValue] = {}
    # Other names `--pipeline` picks it by.
    aliases: tuple[str, ...] = ()
    # The pipeline IREE 3.13 emits constraints under ("iree_gpu.TileAndFuse"); None: it emits none.
    compiler_pipeline: str | None = None
    # Where its valid configs come from: "native" (build_problem), "compiler" or "both".
    constraints: str = "native"
    # Whether `admits` rejects some of the configs its space holds (--constraints both).
    filters_configs: bool = False
    # Whether its configs' spec matchers also require the ops between the root and the store
    # (configs carrying a codegen strategy: tuner.specs.fused.match_stored_through), so that a
    # model's same-shaped roots with other ops after them are tuned apart, not by one config.
    matches_ops_after: bool = False

    def supports(self, dispatch: Dispatch) -> bool:
        """Whether this pipeline can tune the dispatch (kind, target, the compiler's choice)."""
        raise NotImplementedError

    def declines(self, dispatch: Dispatch) -> str | None:
        """Why this pipeline, which tunes dispatches of this kind on this target, cannot tune this
        one (a limit of the compiler, say), or None: what `dispatches` and `tune` say of it."""
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        """The Z3 problem whose solutions are this pipeline's valid configs for the dispatch."""
        raise NotImplementedError

    def to_config(self, dispatch: Dispatch, solution: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        """The typed attributes (and flags) a solution stands for."""
        raise NotImplementedError

    def features(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> dict[str, float]:
        """A config's derived quantities the learned search models, beyond its knobs (none)."""
        return {}

    def space_points(self, dispatch: Dispatch) -> tuple[list[dict], bool] | None:
        """A space of its own (the configs and whether they are all of them) instead of
        `build_problem`'s; None: it has none (the compiler's constraints have one)."""
        return None

    def admits(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> bool:
        """Whether a config of its space is taken (see `filters_configs`)."""
        return True

    def maps_to_compiler(self, dispatch: Dispatch) -> bool:
        """Whether `compiler_knobs` can say this dispatch's configs in the compiler's knobs."""
        return False

    def compiler_knobs(self, dispatch: Dispatch, solution: Mapping[str, KnobValue]) -> dict[str, object]:
        """A config in the knobs of the compiler's emitted constraints."""
        raise NotInCompilerKnobs(f"{self.name}: the compiler emits no constraints for it")

    @property
    def native(self) -> "Pipeline":
        """The pipeline itself (a constraint source: the one it wraps)."""
        return self


def default_pipeline_is(dispatch: Dispatch, pipeline_id: str) -> bool:
    """Whether the compiler's own config for the dispatch uses this pipeline ("iree_gpu.TileAndFuse",
    "iree_cpu.DoubleTilingExpert"): the typed pipeline attribute as discovery read it."""
    return dispatch.default.pipeline_id == pipeline_id


def check_config(config: Config, configured: ConfiguredDispatch) -> list[str]:
    """Differences between what a config asked for and what the compiler did (empty: it took)."""
    problems = []
    if config.expect_root_op and configured.op_name != config.expect_root_op:
        problems.append(f"root op is {configured.op_name}, expected {config.expect_root_op}")
    if config.expect_lowering_config and configured.lowering_config != config.expect_lowering_config:
        problems.append(
            f"lowering_config is {configured.lowering_config}, expected {config.expect_lowering_config}"
        )
    if config.expect_loop_bounds and configured.loop_bounds != tuple(config.expect_loop_bounds):
        problems.append(f"loops are {list(configured.loop_bounds)}, expected {list(config.expect_loop_bounds)}")
    carried = dict(configured.attributes)
    for name, text in config.root_attributes:
        if carried.get(name) != text:
            problems.append(f"{name} is {carried.get(name) or 'unset'}, expected {text}")
    if config.fused_lowering_configs and configured.fused_lowering_configs != config.fused_lowering_configs:
        problems.append(f"the dispatch's other ops carry {list(configured.fused_lowering_configs)}, "
                        f"expected {list(config.fused_lowering_configs)}")
    if config.expect_ukernels is not None and configured.ukernels != config.expect_ukernels:
        problems.append(f"the executable's ukernels are {configured.ukernels or 'unset (the default)'}, "
                        f"expected {config.expect_ukernels}")
    if config.expect_translation_info and configured.translation_info != config.expect_translation_info:
        problems.append(
            f"translation_info is {configured.translation_info}, expected {config.expect_translation_info}"
        )
    return problems
