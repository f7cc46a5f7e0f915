#!/bin/bash
# The external Hopper kernels on real exports, untuned, beside the default and torch (issue 58;
# docs/benchmarks/external-kernels.md). For each family of benchmarks/torch_exports.py at its real
# size, on one GPU: the export and torch eager's and torch.compile's kernel time (once, kept in
# /tmp/exports while the machine is warm), then export_vs_torch.py with the default, every
# external rewrite joined, and the same after the rewrites that feed them (the flag stage's two
# joined options, tuner.stages.flag_options.external_together; or $ONLY_FAMILY, e.g.
# ONLY_mobilenet=pointwise-conv-as-matmul+external-depthwise-conv), every output checked against
# torch's, CUPTI kernel time in interleaved rounds.
# Wheels as benchmarks/gpu_setup.sh says; Triton must be importable there.
#
#   bash benchmarks/gpu_external_check.sh FAMILY...      # LIMIT_S=170 a family, ROUNDS=4, TOP=8
#   NCHW=1 bash benchmarks/gpu_external_check.sh resnet  # also the kernels with external-hopper-conv-nchw
#   EXTRA="pad-reductions external-layer-norm" bash benchmarks/gpu_external_check.sh swin  # also the kernels + each
#   EXTRA="pad-reductions pad-reductions@pad-into-consumer" ...  # NAME@FLAG: with a model flag (FLAG_NAMES)
#
# $OUT/ext-FAMILY.json and $OUT/ext.log (the last one's lines for each family).
set -u
source benchmarks/gpu_setup.sh
export TRITON_DEFAULT_FP_FUSION=1 COLUMNS=200
D=/tmp/exports
EXTERNAL=f32-reductions+chain-concats+external-hopper-gemm+external-flash-attention+external-depthwise-conv+external-hopper-conv
FED=f32-reductions+chain-concats+subsample-strided-1x1+pointwise-conv-as-matmul+patchify-as-matmul+${EXTERNAL#f32-reductions+chain-concats+}  # as the flag stage joins them
[ -n "${NCHW:-}" ] && FED=$FED,${EXTERNAL/external-hopper-conv/external-hopper-conv-nchw}  # the experiment beside them
for X in ${EXTRA:-}; do FED=$FED,$EXTERNAL+$X; done  # EXTRA="pad-reductions external-layer-norm": the kernels and each
for F in "$@"; do
  if [ ! -f $D/$F/torch.json ]; then
    python3 benchmarks/torch_exports.py --out $D --size real --family $F --time --rounds ${ROUNDS:-4} \
      --calls 20 2>&1 | grep -E "^$F |FAILED" | cut -c1-300 >> $OUT/ext.log
  fi
  only=ONLY_$F
  timeout ${LIMIT_S:-170} python3 benchmarks/export_vs_torch.py $D/$F --only default,${!only:-$EXTERNAL,$FED} \
    --jobs $(nproc) --rounds ${ROUNDS:-4} --calls 20 --top ${TOP:-8} --json $OUT/ext-$F.json 2>&1 \
    | grep -v -i warning | grep -A80 "torch eager .* torch.compile" >> $OUT/ext.log
done
cat $OUT/ext.log
