#!/bin/bash
# Transformer layers as exporters write them, on a GPU machine that holds the compiler (BENCHMARKS.md,
# "Models as exporters write them"). Wheels as benchmarks/gpu_setup.sh says. The shared builder of
# the torch-layout BERT layer is taken from $BERT_TORCH_LAYOUT (default .gpu/bert_torch_layout.py).
#
#   bash benchmarks/gpu_exported_models.sh profile NAME...   # the profile (in the model, CUPTI), its wall
#                      # time, each dispatch against torch.profiler's CUPTI on the same module; a fixture
#   bash benchmarks/gpu_exported_models.sh fallback NAME...  # the profile with --gpu-timing alone
#   bash benchmarks/gpu_exported_models.sh dumped NAME       # the dumped benchmarks' cause (filled buffers)
#   bash benchmarks/gpu_exported_models.sh overhead NAME     # a call's cost to the in-process timing
#   bash benchmarks/gpu_exported_models.sh tune NAME [BUDGET] [LIMIT_S]   # tune-model, then the checks
#                      # (LIMIT_S, default 530: the device's 600 s per call less a fresh machine's
#                      # install and model building; 575 was cut at 590 s on 2026-11-26)
#                      # (CHECKS=0: not; a run near the device's per-call limit leaves them to:)
#   bash benchmarks/gpu_exported_models.sh check NAME        # the checks of a finished tune run alone
#   TAG=-X: the run's directory is /tmp/tm-NAMEX and its outputs tm-NAMEX*, so that two runs of one model
#   (TUNE_ARGS="--pipeline llvmgpu_mma_sync" and without) sit side by side
#   A tune run longer than one machine's lease: each tune step leaves what a rerun resumes from
#   (run.json, the flag decision, the result store, each finished dispatch's results.json; no
#   builds) in $OUT/resume-tm-NAME.tgz; carried to a fresh machine as RESUME=FILE, it seeds /tmp/tm-NAME.
#
# NAME: bert_torch_layout (BERT-large-sized, 2048 tokens), bert_torch_layout_base (BERT-base-sized,
# 1024 tokens), gqa_block_f16_1024, gqa_block_32x8_f16_1024, vit_large_layer_f16, unet_resnet_block_f16,
# unet_attention_block_f16, resnet50_f16_b8 (issue 35), resnet18_f16_b8, unet_attention_block_sd15_f16
# (8 heads of 40), unet_resnet_block_widen_f16 (320 -> 640 with a 1x1 shortcut), unet_attention_block_sdxl_f16,
# unet_resnet_block_1280_b1_f16 (held out).
#   bash benchmarks/gpu_exported_models.sh cut NAME P1,P2,... # where the CUDA result goes off llvm-cpu's:
#                      # the graph cut after each tensor named, both built and run (cut_compare.py)
#   bash benchmarks/gpu_exported_models.sh torch NAME...     # torch eager (cuDNN, cuBLAS) on the same graph,
#                      # NCHW and channels-last, CUPTI kernel time and wall time (onnx_torch_eager.py)
set -u
source benchmarks/gpu_setup.sh
export COLUMNS=220
tuner() { python3 -m tuner.cli "$@"; }
M=/tmp/models
BUILDER=${BERT_TORCH_LAYOUT:-.gpu/bert_torch_layout.py}
if [ ! -f $M/.done ]; then
  python3 examples/onnx_models.py --out $M > /dev/null
  python3 $BUILDER $M/bert_torch_layout.onnx
  python3 $BUILDER $M/bert_torch_layout_base.onnx --tokens 1024 --hidden 768 --heads 12 --mlp 3072
  touch $M/.done
fi
entry() { case $1 in bert_*) echo bert_layer;; gqa*) echo gqa_block;; vit*) echo vit_layer;; llama*) echo llama_block;;
  unet_resnet*) echo unet_resnet_block;; conv*) echo conv;; unet_attention*) echo unet_attention_block;; resnet50*) echo resnet50;; resnet18*) echo resnet18;;
  *) echo "$1";; esac; }
inputs() { for f in $(ls $1/input*.npy | sort -V); do echo --input $f; done; }  # every input, in order
# The independent checks of a finished tune-model run in /tmp/tm-NAME: plain iree-compile of its
# result against the default, wall time (model_check.py), then CUPTI kernel time of the same modules.
checks() {
  local D=/tmp/tm-$1${TAG:-} FN=$(entry $1)
  python3 benchmarks/model_check.py $D --rounds 8 ${CHECK_ARGS:-}  # CHECK_ARGS=--choices-alone: a third build
  local CHOICES=(); [ -f $D/check/choices-alone.vmfb ] && CHOICES=(choices=$D/check/choices-alone.vmfb)
  python3 benchmarks/gpu_model_kernels.py --function $FN $(inputs $D/model-inputs) --rounds 8 \
    default=$D/check/default.vmfb "${CHOICES[@]}" tuned=$D/check/tuned.vmfb
}
step=$1; shift
case $step in
profile)
  for NAME in "$@"; do
    P=/tmp/prof-$NAME; rm -rf $P; start=$(date +%s.%N)
    tuner dispatches $M/$NAME.onnx --target cuda:sm_80 --profile --json --output $P > $OUT/profile-$NAME.json
    echo "$NAME: profile in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s (import and compile included)"
    python3 benchmarks/gpu_model_kernels.py --function $(entry $NAME) $(inputs $P/inputs/$(entry $NAME)) \
      --rounds 3 --json $OUT/kernels-$NAME.json default=$P/program.vmfb > /dev/null
    python3 benchmarks/profile_vs_cupti.py $OUT/profile-$NAME.json $OUT/kernels-$NAME.json
    [ $NAME = bert_torch_layout ] && python3 benchmarks/record_kernels.py $P/program.vmfb bert_layer \
      $P/inputs/bert_layer/input0.npy --runs $OUT/profile-$NAME.json --torch $OUT/kernels-$NAME.json \
      --out $OUT/bert_torch_layout_h100.json
  done ;;
fallback)
  for NAME in "$@"; do
    P=/tmp/fallback-$NAME; rm -rf $P; start=$(date +%s.%N)
    tuner dispatches $M/$NAME.onnx --target cuda:sm_80 --profile --gpu-timing alone --json --output $P > $OUT/fallback-$NAME.json
    echo "$NAME: fallback profile in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
    python3 -c "
import json; d = json.load(open('$OUT/fallback-$NAME.json')); print(d['method'])
for r in d['dispatches']: print(' ', r['name'][:70], r['ms'], r['untimed'][:150])"
  done ;;
cut)
  python3 benchmarks/cut_compare.py $M/$1.onnx --points $2 --work /tmp/cut-$1 ;;
torch)
  for NAME in "$@"; do
    python3 benchmarks/onnx_torch_eager.py $M/$NAME.onnx --json $OUT/torch-$NAME.json
    python3 benchmarks/onnx_torch_eager.py $M/$NAME.onnx --channels-last --json $OUT/torch-cl-$NAME.json
  done ;;
overhead)
  NAME=$1; P=/tmp/prof-$NAME
  [ -f $P/program.vmfb ] || tuner dispatches $M/$NAME.onnx --target cuda:sm_80 --profile --json --output $P > /dev/null
  python3 benchmarks/in_model_overhead.py $P/program.vmfb $(entry $NAME) $(ls $P/inputs/$(entry $NAME)/input*.npy | sort -V) ;;
dumped)
  NAME=$1; P=/tmp/dumped-$NAME; mkdir -p $P; iree-import-onnx $M/$NAME.onnx -o $P/m.mlir
  iree-compile $P/m.mlir --iree-hal-target-device=cuda --iree-cuda-target=sm_80 --iree-hal-dump-executable-benchmarks-to=$P/bench -o $P/m.vmfb
  python3 benchmarks/dumped_benchmark_cause.py $(ls $P/bench/*.mlir | grep -E "dispatch_(0|12|15|16|10)_") ;;
tune)
  NAME=$1; BUDGET=${2:-16}; LIMIT=${3:-530}; RUN=$NAME${TAG:-}; D=/tmp/tm-$RUN; FN=$(entry $NAME); start=$(date +%s)
  if [ ! -d $D ] && [ -f "${RESUME:-}" ]; then mkdir -p $D && tar xzf "$RESUME" -C $D && echo "resuming from $RESUME"; fi
  # PROFILE=1: the run under cProfile (its main thread: where it waits), the stats in $OUT/tm-NAME.prof
  PROF=(); [ "${PROFILE:-0}" = 1 ] && PROF=(-m cProfile -o $OUT/tm-$RUN.prof)
  timeout -s TERM $LIMIT python3 "${PROF[@]}" -m tuner.cli tune-model \
    $M/$NAME.onnx --target cuda:sm_80 --device cuda --budget $BUDGET --output $D ${TUNE_ARGS:-} > $OUT/tm-$RUN.txt 2>&1
  rc=$?; echo "tune-model $RUN: exit $rc after $(( $(date +%s) - start )) s"; grep -v "━" $OUT/tm-$RUN.txt | grep -v "nanobind\|leaked" | tail -45
  cp $D/results.json $OUT/tm-$RUN-results.json 2>/dev/null
  (cd $D && find . \( -path ./candidates -o -path ./variants -o -path ./profile -o -path ./check \) -prune -o \
     \( -name run.json -o -name flag-decision.json -o -name results.sqlite -o -name profile.json -o -name profile-flags.json \
        -o -path "*dispatches/*results.json" \) \
     -print | tar czf $OUT/resume-tm-$RUN.tgz -T -)
  # each dispatch's tuning (its stats say where the time went)
  for r in $D/dispatches/*/results.json $D/flag-dispatches/*/*/results.json; do
    [ -f "$r" ] && mkdir -p $OUT/tm-$RUN && cp "$r" "$OUT/tm-$RUN/$(basename $(dirname "$r") | tr '$' _).json"
  done
  [ $rc = 0 ] && [ "${CHECKS:-1}" = 1 ] && checks $NAME ;;  # CHECKS=0: leave them to `check NAME`
check)
  checks $1 ;;
esac
