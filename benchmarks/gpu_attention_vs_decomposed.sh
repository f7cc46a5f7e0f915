#!/bin/bash
# The raised attention op, tuned, against the decomposed form the exporter writes (two batch matmuls
# and a softmax, the compiler's default configs), on the GPU machine (BENCHMARKS.md, "Real exports
# beside torch"). For each NAME:B:H:S:D, the exporter's SDPA form at that shape
# (sdpa_export_form.py), `tune` of its raised attention (BUDGET, default 16; timed in the module's
# call), then the decomposed form, the raised one with the compiler's config and the tuned one, timed
# by CUPTI kernel time in interleaved rounds (gpu_model_kernels.py). Wheels as gpu_setup.sh says.
#
#   bash benchmarks/gpu_attention_vs_decomposed.sh vit:8:12:197:64 whisper:1:8:1500:64
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=200
for item in "$@"; do
  IFS=: read -r NAME B H S D <<< "$item"
  W=/tmp/att-$NAME
  rm -rf $W
  python3 benchmarks/sdpa_export_form.py $W --batch $B --heads $H --seq $S --head-dim $D
  python3 -m tuner.cli tune $W/raised.mlir --target cuda:sm_80 --device cuda --budget ${BUDGET:-16} --output $W/tune \
    2>&1 | grep -E "^(best|  *[0-9]+ |tuning|search|candidate .* failed)" | head -40
  python3 -m tuner.cli rebuild $W/tune -o $W/tuned.vmfb | tail -1
  for form in decomposed raised; do
    iree-compile $W/$form.mlir --iree-hal-target-device=cuda --iree-cuda-target=sm_80 -o $W/$form.vmfb
  done
  python3 benchmarks/gpu_model_kernels.py --function main_graph --input $W/input0.npy --input $W/input1.npy \
    --input $W/input2.npy --rounds 6 --calls 20 --names --json $OUT/attention-$NAME.json \
    decomposed=$W/decomposed.vmfb raised-default=$W/raised.vmfb raised-tuned=$W/tuned.vmfb
done
