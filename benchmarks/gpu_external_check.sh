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
#   GPUS=2 bash benchmarks/gpu_external_check.sh F1 F2   # families dealt over the GPUs, one stream each
#   (exports are made here when missing: started in the background of an earlier call instead,
#   they were gone by the next one on 2026-11-30 and its 600 s were spent waiting)
#   NCHW=1 bash benchmarks/gpu_external_check.sh resnet  # also the kernels with external-hopper-conv-nchw
#   EXTRA="pad-reductions" bash benchmarks/gpu_external_check.sh swin  # also the kernels + each (after them)
#   EXTRA="pad-reductions pad-reductions@pad-into-consumer" ...  # NAME@FLAG: with a model flag (FLAG_NAMES)
#
# $OUT/ext-FAMILY.json, ext-FAMILY.log and ext.log (each family's lines, in the order named).
set -u
source benchmarks/gpu_setup.sh
export TRITON_DEFAULT_FP_FUSION=1 COLUMNS=200
D=/tmp/exports
GPUS=${GPUS:-1}
EXTERNAL=f32-reductions+chain-concats+external-hopper-gemm+external-flash-attention+external-depthwise-conv+external-hopper-conv+external-layer-norm+external-rms-norm  # tuner.rewrite.EXTERNAL, as the flag stage joins them
FED=f32-reductions+chain-concats+subsample-strided-1x1+pointwise-conv-as-matmul+patchify-as-matmul+${EXTERNAL#f32-reductions+chain-concats+}  # as the flag stage joins them
[ -n "${NCHW:-}" ] && FED=$FED,${EXTERNAL/external-hopper-conv/external-hopper-conv-nchw}  # the experiment beside them
for X in ${EXTRA:-}; do FED=$FED,$EXTERNAL+$X; done  # EXTRA="pad-reductions": the kernels and each
check() {  # GPU index, then families: each exported (once), then its builds checked and timed
  local gpu=$1; shift
  for F in "$@"; do
    export CUDA_VISIBLE_DEVICES=$gpu
    if [ ! -f $D/$F/torch.json ]; then
      python3 benchmarks/torch_exports.py --out $D --size real --family $F --time --rounds ${ROUNDS:-4} \
        --calls 20 2>&1 | grep -E "^$F |FAILED" | cut -c1-300 >> $OUT/ext-$F.log
    fi
    local only=ONLY_$F
    timeout ${LIMIT_S:-170} python3 benchmarks/export_vs_torch.py $D/$F --only default,${!only:-$EXTERNAL,$FED} \
      --jobs $(( $(nproc) / GPUS )) --rounds ${ROUNDS:-4} --calls 20 --top ${TOP:-8} --json $OUT/ext-$F.json 2>&1 \
      | grep -v -i warning | grep -A80 "torch eager .* torch.compile" >> $OUT/ext-$F.log
  done
}
families=("$@")
for (( g = 0; g < GPUS; g++ )); do  # families dealt over the GPUs, one stream each
  mine=(); for (( i = g; i < ${#families[@]}; i += GPUS )); do mine+=("${families[$i]}"); done
  [ ${#mine[@]} -gt 0 ] && check $g "${mine[@]}" &
done
wait
for F in "$@"; do cat $OUT/ext-$F.log 2>/dev/null; done >> $OUT/ext.log
cat $OUT/ext.log
