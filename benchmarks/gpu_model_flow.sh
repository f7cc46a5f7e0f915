#!/bin/bash
# The whole-model flow on a GPU machine that holds the compiler (BENCHMARKS.md, "Whole models on
# the H100"). Where the machine has no package index, carry the cp312 wheels of
# iree-base-compiler (in two parts if a transfer is limited), iree-base-runtime and z3-solver into
# WHEELS and they are installed into /tmp/site first; otherwise `pip install -e .` and skip that.
#
#   bash benchmarks/gpu_model_flow.sh profile   # the profile of the BERT-large layer vs CUPTI, and
#                                               # the model-wide choices' builds, kernel times side by side
#   bash benchmarks/gpu_model_flow.sh tune NAME FUNCTION BUDGET LIMIT_S   # tune-model (rerun to resume),
#                                               # then, once done, the independent check
#   bash benchmarks/gpu_model_flow.sh dumped    # IREE's dumped dispatch benchmarks timed alone
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=220
tuner() { python3 -m tuner.cli "$@"; }
[ -d /tmp/models ] || python3 examples/onnx_models.py --out /tmp/models > /dev/null
T="--iree-hal-target-device=cuda --iree-cuda-target=sm_80"
case ${1:-profile} in
profile)
  M=/tmp/models/bert_large_layer_f16_2048.onnx; rm -rf /tmp/prof
  tuner dispatches $M --target cuda:sm_80 --profile --json --output /tmp/prof > $OUT/profile.json
  python3 -c "import numpy as np; np.save('/tmp/x.npy', np.random.default_rng(0).standard_normal((2048,1024)).astype(np.float16))"
  P=/tmp/prof/imported/bert_large_layer_f16_2048.mlir
  python3 -c "from pathlib import Path; from tuner.rewrite import rewrite_program, RAISE_ATTENTION; print(rewrite_program(Path('$P'), RAISE_ATTENTION, Path('/tmp/raised.mlir')))"
  iree-compile /tmp/raised.mlir $T -o /tmp/raised.vmfb &
  iree-compile $P $T --iree-dispatch-creation-enable-aggressive-fusion -o /tmp/aggr.vmfb &
  iree-compile $P $T --iree-opt-level=O3 -o /tmp/o3.vmfb &
  iree-compile /tmp/raised.mlir $T --iree-dispatch-creation-enable-aggressive-fusion -o /tmp/raised_aggr.vmfb &
  iree-compile /tmp/raised.mlir $T --iree-opt-level=O3 -o /tmp/raised_o3.vmfb &
  wait
  python3 benchmarks/gpu_model_kernels.py --function bert_layer --input /tmp/x.npy --rounds 6 --json $OUT/kernels.json \
    default=/tmp/prof/program.vmfb raised=/tmp/raised.vmfb aggr=/tmp/aggr.vmfb o3=/tmp/o3.vmfb \
    raised_aggr=/tmp/raised_aggr.vmfb raised_o3=/tmp/raised_o3.vmfb ;;
tune)
  NAME=${2:-bert_large_layer_f16_2048}; FN=${3:-bert_layer}; BUDGET=${4:-24}; LIMIT=${5:-540}; D=/tmp/tm-$NAME
  timeout $LIMIT python3 -m tuner.cli tune-model /tmp/models/$NAME.onnx \
    --target cuda:sm_80 --budget $BUDGET --min-share 0.05 --output $D > $OUT/tm-$NAME.txt 2>&1
  rc=$?; grep -v "━" $OUT/tm-$NAME.txt | tail -40
  if [ $rc = 0 ]; then
    python3 benchmarks/model_check.py $D --rounds 10
    python3 benchmarks/gpu_model_kernels.py --function $FN --input $D/model-inputs/input0.npy --rounds 8 \
      default=$D/check/default.vmfb tuned=$D/check/tuned.vmfb
  fi ;;
dumped)
  M=/tmp/models/bert_large_layer_f16_2048.onnx; mkdir -p /tmp/dumped; iree-import-onnx $M -o /tmp/dumped/m.mlir
  iree-compile /tmp/dumped/m.mlir $T --iree-hal-dump-executable-benchmarks-to=/tmp/dumped/bench -o /tmp/dumped/m.vmfb
  for f in /tmp/dumped/bench/*.mlir; do
    iree-compile "$f" $T -o /tmp/dumped/b.vmfb || continue
    fn=$(grep -o 'util.func public @[^(]*' "$f" | sed 's/util.func public @//')
    for b in 1 50; do
      echo "$(basename "$f") batch $b: $(iree-benchmark-module --device=cuda --module=/tmp/dumped/b.vmfb --function="$fn" \
        --batch_size=$b --benchmark_min_time=0.1s --benchmark_repetitions=3 2>&1 | grep -o 'items_per_second=[0-9.k]*/s' | head -1)"
    done
  done ;;
esac
