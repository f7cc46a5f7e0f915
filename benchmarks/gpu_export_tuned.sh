#!/bin/bash
# Real exports tuned as a user would, then checked independently beside torch (issue 58; BENCHMARKS.md,
# "Real exports beside torch"). For each family of benchmarks/torch_exports.py at its real size, on
# one GPU: the export and torch eager's and torch.compile's kernel time (once), then
# `tune-model model.onnx --target cuda:sm_80 --device cuda --budget $BUDGET` (resumed by the next
# call where the device's per-call limit stopped it: its directory /tmp/tm-FAMILY lives while the
# machine is warm), then export_vs_torch.py with --tuned: plain iree-compile of the default, of each
# rewrite named in $ONLY_FAMILY (e.g. ONLY_convnext=nd-linear-as-matmul) and of the tuned result
# (@model_flags.txt), every output checked against torch's, CUPTI kernel time in interleaved rounds.
# Wheels as benchmarks/gpu_setup.sh says.
#
#   GPUS=2 bash benchmarks/gpu_export_tuned.sh FAMILY...   # families dealt over the GPUs, one stream each
#   LIMIT_S=480: each stream stops there; a rerun goes on where it stopped
#   TUNE_ARGS="--top 4": more tune-model options
#
# $OUT/tuned-FAMILY.log (the tune-model run's last lines and the check), tuned-FAMILY.json.
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=200
D=/tmp/exports
GPUS=${GPUS:-1}
stream() {  # GPU index, then families
  local gpu=$1; shift
  for F in "$@"; do
    export CUDA_VISIBLE_DEVICES=$gpu
    local T=/tmp/tm-$F LOG=$OUT/tuned-$F.log
    if [ ! -f $D/$F/torch.json ]; then
      python3 benchmarks/torch_exports.py --out $D --size real --family $F --time --rounds ${ROUNDS:-6} \
        --calls ${CALLS:-20} 2>&1 | grep -E "^$F |FAILED" >> $LOG
    fi
    if [ ! -f $T.done ]; then
      start=$(date +%s)
      python3 -m tuner.cli tune-model $D/$F/model.onnx --target cuda:sm_80 --device cuda --budget ${BUDGET:-8} \
        --output $T ${TUNE_ARGS:-} >> $T.txt 2>&1 && touch $T.done
      echo "$F tune-model: $( [ -f $T.done ] && echo finished || echo stopped) after $(( $(date +%s) - start )) s" >> $LOG
    fi
    [ -f $T.done ] || { cat $LOG; continue; }
    if [ ! -f $OUT/tuned-$F.json ]; then
      grep -E "^stage [a-z-]+: [0-9]+ s|^model entry|^  gemm_|^  conv_|^external kernel tiles" $T.txt >> $LOG  # where the run's time went (every call of it)
      grep -v "━" $T.txt | grep -v "nanobind\|leaked" | tail -40 >> $LOG
      local only=ONLY_$F
      python3 benchmarks/export_vs_torch.py $D/$F --only default${!only:+,${!only}},tuned --tuned $T \
        --jobs $(( $(nproc) / GPUS )) --rounds ${ROUNDS:-6} --calls ${CALLS:-20} --top ${TOP:-8} \
        --json $OUT/tuned-$F.json 2>&1 | grep -v -i warning >> $LOG
      cp $T/results.json $OUT/tuned-$F-results.json 2>/dev/null
    fi
    cat $LOG
  done
}
families=("$@")
for (( g = 0; g < GPUS; g++ )); do
  mine=(); for (( i = g; i < ${#families[@]}; i += GPUS )); do mine+=("${families[$i]}"); done
  [ ${#mine[@]} -gt 0 ] || continue
  timeout -s TERM ${LIMIT_S:-480} bash -c "$(declare -f stream); D=$D GPUS=$GPUS OUT=$OUT; stream $g ${mine[*]}" &
done
wait
cd $OUT && tar czf tuned.tgz tuned-* 2>/dev/null && rm -f tuned-*
