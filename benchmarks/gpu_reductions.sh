#!/bin/bash
# The reduction kinds (softmax, normalizations, row sums) of a model tuned on a GPU machine that
# holds the compiler (BENCHMARKS.md, "Reductions"). Wheels: benchmarks/gpu_setup.sh.
#
#   [KINDS=softmax,normalization,reduction,transpose,elementwise] bash benchmarks/gpu_reductions.sh dispatches MODEL FUNCTION [BUDGET]
#       `tune` each dispatch of those kinds of /tmp/models/MODEL.onnx, then
#       the model built with plain iree-compile and each winner's best_flags.txt, against the
#       default, kernel times per dispatch inside the model (CUPTI), interleaved
#   bash benchmarks/gpu_reductions.sh model MODEL FUNCTION [BUDGET] [LIMIT_S]
#       tune-model with every kind, then with contractions and attention only (the same result
#       store: the second run reuses the first's dispatch tunings), then the two models and the
#       default built with plain iree-compile, kernel times side by side (rerun to resume);
#       EXTRA="--no-model-flags" keeps the model as written (no attention raising: BENCHMARKS.md)
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=200
tuner() { python3 -m tuner.cli "$@"; }
[ -d /tmp/models ] || python3 examples/onnx_models.py --out /tmp/models > /dev/null
MODEL=${2:-bert_large_layer_f16_2048}; FN=${3:-bert_layer}; BUDGET=${4:-12}
M=/tmp/models/$MODEL.onnx
# The model's input: seeded normal values of its (first) input's shape and type.
python3 -c "
import numpy as np, onnx
t = onnx.load('$M', load_external_data=False).graph.input[0].type.tensor_type
dtype = np.float16 if t.elem_type == onnx.TensorProto.FLOAT16 else np.float32
np.save('/tmp/x-$MODEL.npy', np.random.default_rng(0).standard_normal([d.dim_value for d in t.shape.dim]).astype(dtype))"
case ${1:-dispatches} in
dispatches)
  R=/tmp/red-$MODEL; mkdir -p $R
  tuner dispatches $M --target cuda:sm_80 --json > $R/dispatches.json
  python3 -c "
import json; d = json.load(open('$R/dispatches.json'))['dispatches']
kinds = '${KINDS:-softmax,normalization,reduction,transpose,elementwise}'.split(',')
print('\n'.join(e['name'] for e in d if e['kind'] in kinds and e['pipeline']))" > $R/names
  i=0; modules="default=$R/default.vmfb"
  while read -r name; do
    i=$((i + 1)); D=$R/d$i
    [ -f $D/results.json ] || tuner tune $M --target cuda:sm_80 --dispatch "$name" --num-candidates $BUDGET \
      --output $D > $OUT/$MODEL-d$i.txt 2>&1
    grep -v "━" $OUT/$MODEL-d$i.txt | grep -E "^best|^tuning|default kept|^warning" | cut -c1-300
    src=$(python3 -c "import json; print(json.load(open('$D/results.json'))['input'])")
    [ -f $D/model.vmfb ] || iree-compile "$src" @$D/best_flags.txt -o $D/model.vmfb
    modules="$modules d$i=$D/model.vmfb"
    echo "d$i = $name"
  done < $R/names
  src=$(python3 -c "import json; print(json.load(open('$R/d1/results.json'))['input'])")
  [ -f $R/default.vmfb ] || iree-compile "$src" --iree-hal-target-device=cuda --iree-cuda-target=sm_80 -o $R/default.vmfb
  timeout 240 python3 benchmarks/gpu_model_kernels.py --function $FN --input /tmp/x-$MODEL.npy --rounds 8 --calls 20 \
    --json $OUT/kernels-red-$MODEL.json $modules 2>&1 | grep -v -i warn ;;
model)
  LIMIT=${5:-560}; S=/tmp/store-$MODEL.sqlite; A=/tmp/tm-$MODEL-all; B=/tmp/tm-$MODEL-mm
  s=$(date +%s)
  for pair in "$A:" "$B:contraction,attention"; do
    D=${pair%%:*}; K=${pair#*:}; left=$(( LIMIT - ($(date +%s) - s) ))
    [ -f $D/model_spec.mlir ] && continue
    [ $left -gt 30 ] || { echo "out of time before $D"; exit 0; }
    timeout $left python3 -m tuner.cli tune-model $M --target cuda:sm_80 \
      --budget $BUDGET --min-share 0.02 ${K:+--kinds $K} ${EXTRA:-} --store $S --output $D > $OUT/tm-$(basename $D).txt 2>&1
    echo "$D rc=$? after $(( $(date +%s) - s )) s"; grep -v "━" $OUT/tm-$(basename $D).txt | grep -v "^skipped" | tail -30 | cut -c1-220
  done
  for D in $A $B; do [ -f $D/model_spec.mlir ] || exit 0; done
  prog=$(python3 -c "import json; print(json.load(open('$A/results.json'))['input'])")
  [ -f /tmp/def-$MODEL.vmfb ] || iree-compile "$prog" --iree-hal-target-device=cuda --iree-cuda-target=sm_80 -o /tmp/def-$MODEL.vmfb
  for D in $A $B; do
    p=$(python3 -c "import json; print(json.load(open('$D/results.json'))['input'])")
    [ -f $D/plain.vmfb ] || iree-compile "$p" @$D/model_flags.txt -o $D/plain.vmfb || exit 1
  done
  cp $A/model_spec.mlir $OUT/spec-$MODEL-all.mlir; cp $B/model_spec.mlir $OUT/spec-$MODEL-mm.mlir
  timeout 240 python3 benchmarks/gpu_model_kernels.py --function $FN --input /tmp/x-$MODEL.npy --rounds 10 --calls 20 \
    --json $OUT/kernels-tm-$MODEL.json default=/tmp/def-$MODEL.vmfb all_kinds=$A/plain.vmfb matmuls_only=$B/plain.vmfb \
    2>&1 | grep -v -i warn ;;
esac
