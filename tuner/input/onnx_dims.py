"""An ONNX model's symbolic dimensions fixed at one size before import.

Exporters write a model's batch (and a transformer's sequence length) as a symbolic dimension
(`dim_param`, torch.onnx.export's dynamic_axes). IREE then compiles each dispatch for any size,
and a dispatch with dynamic shapes takes no config of this tuner. Given a size (`--dynamic-size`),
a copy of the model with each symbolic dimension of its inputs fixed at it is imported instead:
every dispatch is then static and tunable, and the tuned program takes only that size (said).
The copy's intermediate shapes are inferred again from the fixed inputs; its external data, if
any, is still read from beside the original (the importer's --data-dir)."""

from __future__ import annotations

from pathlib import Path

from tuner.run_dir import write_file


def symbolic_inputs(model) -> list[tuple[str, int, str]]:
    """(input name, axis, dim_param or "?") of each dimension of the graph's inputs that is not a
    number; initializers listed as inputs (older exporters) are not inputs."""
    weights = {t.name for t in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in weights or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                found.append((value.name, axis, dim.dim_param or "?"))
    return found


def fix_symbolic_dims(path: Path, size: int, out: Path) -> list[str]:
    """Write `path` with every symbolic dimension of its inputs fixed at `size` to `out`, the
    shapes between inferred again; return what was fixed ("x[0]: N -> 2"), empty (and nothing
    written) where every input dimension is a number."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    found = symbolic_inputs(model)
    if not found:
        return []
    inputs = {v.name: v for v in model.graph.input}
    for name, axis, _ in found:
        inputs[name].type.tensor_type.shape.dim[axis].dim_value = size
    del model.graph.value_info[:]  # shapes derived from the symbolic ones: inferred again below
    for value in model.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - the importer infers shapes again itself
        pass
    write_file(out, model.SerializeToString())
    return [f"{name}[{axis}]: {param} -> {size}" for name, axis, param in found]
