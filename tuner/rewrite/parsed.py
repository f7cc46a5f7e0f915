"""A program parsed once, each rewrite applied to a copy of it.

What a rewrite would change is found without printing anything; a rewritten program is printed
and written only when something is to be built from it. A real export's program is mostly its
weights (a Mistral-7B layer's import is 870 MB of text): parsing, printing and writing it took 5-6 s
a rewrite on the H200's host, 93 s of a flag stage of 143 s, for 17 rewrites of which one was
built (the joined kernels; the others were left for a budget they did not get). A rewrite that
makes external kernels may have them compiled side by side first (`prebuild`). A rewrite that
raises changes nothing, and a combination is applied without the part that raised (`failures`
says which and why)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.extern_call import prebuild as build_kernels, recording
from tuner.run_dir import real_directory, write_file


class _Copy:
    """A copy of the parsed module, as a rewrite reads one (an ir.Module's `operation` and `body`)."""

    def __init__(self, operation: ir.Operation):
        self.operation = operation
        self.body = operation.regions[0].blocks[0]

    def __str__(self) -> str:
        return str(self.operation)


class RewriteFailed(Exception):
    """A part of a combined rewrite raised (tuner.rewrite.combined): `rewrite` names it."""

    def __init__(self, rewrite: str, error: Exception):
        super().__init__(f"{rewrite}: {type(error).__name__}: {error}")
        self.rewrite = rewrite


class ParsedProgram:
    """The program in the file `source`, parsed on first use, in a context of its own kept while
    this object lives (the weights' resources are shared by every copy: a copy costs next to
    nothing)."""

    def __init__(self, source: Path):
        self.source = source
        self._context: Optional[ir.Context] = None
        self._module: Optional[ir.Module] = None
        # Rewrites that raised on this program, and what they raised: such a rewrite changes
        # nothing, and a combination is applied without it (a fault in one rewrite on a model
        # it was not written against is a declined rewrite, not a failed run).
        self.failures: dict[str, str] = {}

    def changes(self, rewrite, prebuild: bool = False) -> list[str]:
        """What `rewrite` (a tuner.rewrite.Rewrite) changes in the program; nothing is written.
        `prebuild`: the external kernels it makes are first compiled side by side (a first pass
        only asks for them; tuner.rewrite.extern_call.prebuild)."""
        return self._apply(rewrite, None, prebuild)

    def write(self, rewrite, out: Path, prebuild: bool = False) -> list[str]:
        """Write the program rewritten by `rewrite` to `out` and return what changed; nothing is
        written when nothing changed."""
        return self._apply(rewrite, out, prebuild)

    def _apply(self, rewrite, out: Optional[Path], prebuild: bool = False) -> list[str]:
        if self._module is None:
            self._context = ir.Context()
            with self._context:
                self._module = ir.Module.parse(self.source.read_text())
        if prebuild:
            with recording() as requests:
                self._apply(rewrite, None)
            build_kernels(requests)
        with self._context:
            copy = self._module.operation.clone()
            try:
                changed = rewrite.apply(_Copy(copy))
            except Exception as error:  # a fault of the rewrite's: the copy, maybe half rewritten, is dropped
                failed = error.rewrite if isinstance(error, RewriteFailed) else rewrite.name
                cause = error.__cause__ if isinstance(error, RewriteFailed) else error
                self.failures[failed] = f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
                changed = None
            else:
                if changed and out is not None:  # (a write that fails is the run's error, not the rewrite's)
                    real_directory(out.parent)
                    write_file(out, str(copy))
            finally:
                copy.erase()
        if changed is None:  # applied again without the part that raised (nothing where none is left)
            rest = rewrite.without(failed)
            return self._apply(rest, out) if rest is not None else []
        return changed
