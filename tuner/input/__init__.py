"""What the user brings, turned into what the tuner reads: model files (ONNX, MLIR), IREE's dumped dispatch benchmarks, lists of configs."""
