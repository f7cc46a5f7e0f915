"""Building candidates: compiling them, the dispatch benchmark modules GPUs time, and the manifest handed to the benchmark side."""
