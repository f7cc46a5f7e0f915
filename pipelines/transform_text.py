"""Pieces of transform-dialect text the codegen strategies write (pipelines.llvmgpu_mma_sync_strategy
and its padded phases, pipelines.llvmgpu_mma_sync_padded)."""

ANY = "(!transform.any_op)"


def apply_patterns(target: str, *patterns: str) -> str:
    """One `transform.apply_patterns` of `patterns` (names after `transform.apply_patterns.`)."""
    body = "\n".join(f"      transform.apply_patterns.{p}" for p in patterns)
    return f"    transform.apply_patterns to {target} {{\n{body}\n    }} : !transform.any_op\n"


def match_func(name: str) -> str:
    """`name` bound to the function under `%root`."""
    return f'    {name} = transform.structured.match ops{{["func.func"]}} in %root : {ANY} -> !transform.any_op\n'
