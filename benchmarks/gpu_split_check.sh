#!/bin/bash
# An independent check of split-K winners (BENCHMARKS.md, "Split-K"): plain iree-compile builds of
# the default and of each winner's spec (what best_flags.txt names), timed as whole entry functions
# with nothing of the tuner: CUPTI kernel time per call (every kernel: both of a split op's), and
# iree-benchmark-module wall time per call in 3 rotating rounds.
#
#   # here (compiler), after `benchmarks/gpu_matmul.py compile` and `measure` (RESULTS: the
#   # directory holding each shape's results.json as SHAPE.json, as measure's runs bring them back)
#   bash benchmarks/gpu_split_check.sh prepare RESULTS
#   # there (runtime, torch; PATH has iree-benchmark-module): carry .gpu-split-check
#   bash benchmarks/gpu_split_check.sh measure
set -eu
SHAPES="large_1024x1024x16384:1024:1024:16384 Qwen2-7B_512x3584x18944:512:3584:18944 Phi-3-mini_512x3072x8192:512:3072:8192"
FLAGS="--iree-hal-target-device=cuda --iree-cuda-target=sm_80"
case "$1" in
prepare)
  for s in $SHAPES; do
    d=${s%%:*}; mkdir -p .gpu-split-check/$d
    best=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%04d' % (r['best'] or 0))" "$2/$d.json")
    iree-compile .gpu-split/$d/input.mlir $FLAGS -o .gpu-split-check/$d/default.vmfb
    cp .gpu-split/$d/candidates/$best/spec.mlir .gpu-split-check/$d/best_spec.mlir
    iree-compile .gpu-split/$d/input.mlir $FLAGS --iree-preprocessing-transform-spec-filename=.gpu-split-check/$d/best_spec.mlir \
      -o .gpu-split-check/$d/tuned.vmfb
  done ;;
measure)
  for s in $SHAPES; do
    IFS=: read -r d m n k <<< "$s"
    python3 -c "import numpy as np; r=np.random.default_rng(0); np.save('/tmp/a.npy', r.uniform(-1,1,($m,$k)).astype(np.float16)); np.save('/tmp/b.npy', r.uniform(-1,1,($k,$n)).astype(np.float16))"
    echo "== $d"
    python3 benchmarks/gpu_kernel_times.py $m $n $k default=.gpu-split-check/$d/default.vmfb tuned=.gpu-split-check/$d/tuned.vmfb 2>&1 | tail -3
    for round in 0 1 2; do
      order="default tuned"; [ $round = 1 ] && order="tuned default"
      for v in $order; do
        printf "%s round %s: " $v $round
        iree-benchmark-module --device=cuda --module=.gpu-split-check/$d/$v.vmfb --function=main --input=@/tmp/a.npy \
          --input=@/tmp/b.npy --benchmark_repetitions=5 --benchmark_min_time=0.2s 2>/dev/null | grep real_time_median | awk '{print $2, $3}'
      done
    done
  done ;;
esac
