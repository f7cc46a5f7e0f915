#!/bin/bash
# How long tune-model takes on real exports, on one GPU and on several GPUs of one host (issue 62;
# BENCHMARKS.md, "tune-model in minutes"). Each run is what a user types, `tune-model model.onnx
# --target cuda:sm_80 --device cuda --budget $BUDGET` with no time budget, given its GPUs by
# CUDA_VISIBLE_DEVICES and the host's cores in proportion by taskset (16 a GPU on the H200
# machines); tune-model then times on every GPU it sees (before 2026-11-30's fix, `--device cuda`
# meant one GPU: the first runs of this script timed on one whatever they were given). A run the call's limit stops is resumed by
# the next call with the same PLAN (its directory lives in /tmp while the machine is warm); its
# wall time is summed over the calls. Then CHECK rebuilds every run's result of a family with plain
# iree-compile (@model_flags.txt) and times them with the default in one set of interleaved CUPTI
# rounds, every output checked against torch eager's (export_vs_torch.py --tuned NAME=DIR ...).
# Wheels as benchmarks/gpu_setup.sh says.
#
#   PLAN="llama:0 convnext:1 bert:2 qwen2:3" bash benchmarks/gpu_tune_minutes.sh   # one GPU each, at once
#   PLAN="llama:0,1 convnext:2,3" bash benchmarks/gpu_tune_minutes.sh               # two GPUs each
#   CHECK="llama convnext" bash benchmarks/gpu_tune_minutes.sh                      # one family a GPU
#   LIMIT_S=540: each run stops there; BUDGET=8; TUNE_ARGS: more tune-model options
#   PROFILE=1: each call under cProfile (its main thread: what the stage lines leave uncounted),
#   minutes-FAMILY-gGPUS-TIME.prof
#
# $OUT/minutes-FAMILY-gGPUS.log (wall time, the run's stage lines, its table), -results.json;
# $OUT/minutes-check-FAMILY.log and .json; all in $OUT/minutes-of-TIME.tgz.
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=200
D=/tmp/exports
GPUS_ON_HOST=$(nvidia-smi -L | wc -l)
PER_GPU=$(( $(nproc) / GPUS_ON_HOST ))

cores_of() {  # "0,1" -> the cores of those GPUs' shares: "0-15,16-31"
  local out=() g
  for g in ${1//,/ }; do out+=("$(( g * PER_GPU ))-$(( (g + 1) * PER_GPU - 1 ))"); done
  local IFS=,; echo "${out[*]}"
}

export_family() {  # the export, its inputs and torch's output (once a machine)
  local F=$1 gpu=$2
  [ -f $D/$F/torch_output0.npy ] && return
  CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/torch_exports.py --out $D --size real --family $F --time \
    --rounds 3 --calls 20 2>&1 | grep -E "^$F |FAILED" >> $OUT/minutes-$F-export.log
}

tune() {  # family, GPUs ("0" or "0,1")
  local F=$1 gpus=$2 tag=g${2//,/-}
  local T=/tmp/tm62-$F-$tag LOG=$OUT/minutes-$F-$tag.log
  export_family $F ${gpus%%,*}
  [ -f $T.done ] && { cat $LOG; return; }
  local start=$(date +%s) from=$(cat $T.txt 2>/dev/null | wc -l)
  CUDA_VISIBLE_DEVICES=$gpus timeout -s TERM ${LIMIT_S:-540} taskset -c $(cores_of $gpus) \
    python3 ${PROFILE:+-m cProfile -o $OUT/minutes-$F-$tag-$(date +%s).prof} -m tuner.cli tune-model $D/$F/model.onnx --target cuda:sm_80 --device cuda \
    --budget ${BUDGET:-8} --output $T ${TUNE_ARGS:-} >> $T.txt 2>&1 && touch $T.done
  local spent=$(( $(date +%s) - start ))
  echo $spent >> $T.calls
  echo "$F on GPUs $gpus ($(cores_of $gpus)): $( [ -f $T.done ] && echo finished || echo stopped) after $spent s;" \
    "calls $(paste -sd+ $T.calls) = $(( $(paste -sd+ $T.calls) )) s" >> $LOG
  # This call's lines: where its time went (a stopped call's too), how each dispatch's tuning went
  tail -n +$(( from + 1 )) $T.txt | grep -E "^stage [a-z-]+: [0-9]+ s|^timing on|at a time|^dispatch [0-9]|^  .*, [0-9]+ s" >> $LOG
  if [ -f $T.done ]; then
    grep -v "━" $T.txt | grep -v "nanobind\|leaked" | tail -30 >> $LOG
    cp $T/results.json $OUT/minutes-$F-$tag-results.json
  fi
  cat $LOG
}

check() {  # family, GPU: every finished run of the family beside the default
  local F=$1 tuned=() T
  for T in /tmp/tm62-$F-g*.done; do
    [ -e "$T" ] || continue
    T=${T%.done}; tuned+=(--tuned "${T#/tmp/tm62-$F-}=$T")
  done
  [ ${#tuned[@]} -gt 0 ] || { echo "$F: no finished run to check"; return; }
  CUDA_VISIBLE_DEVICES=$2 python3 benchmarks/export_vs_torch.py $D/$F --only default "${tuned[@]}" \
    --jobs $PER_GPU --rounds ${ROUNDS:-6} --calls ${CALLS:-20} --json $OUT/minutes-check-$F.json 2>&1 \
    | grep -v -i warning > $OUT/minutes-check-$F.log
  cat $OUT/minutes-check-$F.log
}

for item in ${PLAN:-}; do
  tune ${item%%:*} ${item#*:} &
done
wait
gpu=0
for F in ${CHECK:-}; do
  check $F $gpu &
  gpu=$(( (gpu + 1) % GPUS_ON_HOST ))
done
wait
# an archive a call of the script: a PLAN and a CHECK in one device call keep both
cd $OUT && files=$(ls minutes-* 2>/dev/null | grep -v '\.tgz$') && tar czf minutes-of-$(date +%s).tgz $files && rm -f $files
