#!/bin/bash
# The mma.sync kernel against TileAndFuse, each tuned (budget 10, timed in the function's own call
# by CUPTI), on ResNet-50's expand 1x1 convolutions as the transposes kept form them (B stored
# K x N; benchmarks/pointwise_kn.py). On the GPU machine, wheels as benchmarks/gpu_setup.sh says:
#
#   bash benchmarks/gpu_pointwise_kn.sh        # SHAPES="25088x256x64 ..." PIPES="..." BUDGET=N to change
set -u
source benchmarks/gpu_setup.sh
mkdir -p /tmp/kn && python3 benchmarks/pointwise_kn.py /tmp/kn
for s in ${SHAPES:-25088x256x64 6272x512x128}; do
  for p in ${PIPES:-llvmgpu_mma_sync llvmgpu_tile_and_fuse}; do
    echo "=== $s $p"
    timeout 280 python3 -m tuner.cli tune /tmp/kn/expand_$s.mlir --target cuda:sm_80 --device cuda --pipeline $p \
      --budget ${BUDGET:-10} --output /tmp/kn/out-$s-$p 2>&1 | grep -v "━" | tail -${TAIL:-16}
    cp /tmp/kn/out-$s-$p/results.json $OUT/results-$s-$p.json 2>/dev/null
  done
done
