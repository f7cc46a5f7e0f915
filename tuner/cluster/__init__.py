"""Compiling and timing on a Ray cluster (`--strategy ray`): compile tasks on the nodes that say
they can compile, one benchmark worker per device, modules moved through Ray's object store, and
every result stored by the driver the moment it arrives.

- `connect`: which cluster (an address, $RAY_ADDRESS, or a local one started for the run) and the
  resource a node declares to take compiles (`iree_compile`).
- `worker`: the benchmark worker (a Ray actor): runs modules on its one device. Runtime-only.
- `compile_task`: the compile task: builds and verifies one candidate where it runs.
- `evaluator`: `RayEvaluator` (the Evaluator protocol) and `RayRunner` (how the driver's Measurer
  reaches the workers).

Ray is an optional extra (`pip install -e '.[ray]'`); nothing here is imported without it.
"""
