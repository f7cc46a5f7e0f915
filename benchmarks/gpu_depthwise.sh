#!/bin/bash
# Depthwise convolutions on the GPU machine (BENCHMARKS.md, "Real exports beside torch"): for each
# NAME:N:C:S:K, one depthwise convolution as torch exports it (depthwise_conv.py), `tune` of it
# (BUDGET, default 24; the window pipeline; timed in the module's call), then plain iree-compile of
# the default and `rebuild` of the winner timed by CUPTI kernel time in interleaved rounds
# (gpu_model_kernels.py). Wheels as gpu_setup.sh says.
#
#   bash benchmarks/gpu_depthwise.sh convnext1:8:96:56:7 convnext3:8:384:14:7
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=200
for item in "$@"; do
  IFS=: read -r NAME N C S K <<< "$item"
  W=/tmp/dw-$NAME
  rm -rf $W
  python3 benchmarks/depthwise_conv.py $W --batch $N --channels $C --size $S --kernel $K
  python3 -m tuner.cli tune $W/model.onnx --target cuda:sm_80 --device cuda --budget ${BUDGET:-24} --output $W/tune \
    2>&1 | grep -E "^(best|  *[0-9]+ |tuning|search)" | head -12
  python3 -m tuner.cli rebuild $W/tune -o $W/tuned.vmfb | tail -1
  iree-import-onnx $W/model.onnx -o $W/model.mlir
  iree-compile $W/model.mlir --iree-hal-target-device=cuda --iree-cuda-target=sm_80 -o $W/default.vmfb
  python3 benchmarks/gpu_model_kernels.py --function main_graph --input $W/input0.npy --rounds 6 --calls 20 --names \
    --json $OUT/depthwise-$NAME.json default=$W/default.vmfb tuned=$W/tuned.vmfb | grep -v "^    "
done
