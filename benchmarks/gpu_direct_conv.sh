#!/bin/bash
# Direct convolutions on the GPU (BENCHMARKS.md, "Direct convolutions, O3 on top"). On the GPU
# machine, wheels as benchmarks/gpu_setup.sh says:
#
#   bash benchmarks/gpu_direct_conv.sh choices NAME FUNCTION   # the model-wide choices alone:
#       # the subsample-rewritten program (and with pad-conv-columns) built channels-last, with
#       # --iree-codegen-llvmgpu-use-direct-convolution, and with O3 too; each checked against
#       # llvm-cpu (rewrite_check.py), then CUPTI kernel time, 8 interleaved rounds
#   bash benchmarks/gpu_direct_conv.sh split NAME FUNCTION     # split-K on the 3x3 convolutions:
#       # iree_linalg_ext.split_reduction set on them after preprocessing (conv_split_reduction.py),
#       # with and without direct convolutions and O3, against none, CUPTI 6 rounds
#   bash benchmarks/gpu_direct_conv.sh padfuse NAME FUNCTION   # pads fused into their consumer
#       # convolutions (--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops) instead
#       # of their producer contractions, which then stay tiled on padded image rows: with channels-last,
#       # and with direct convolutions and O3 too; checked against llvm-cpu, CUPTI kernel time 8 rounds
#   bash benchmarks/gpu_direct_conv.sh widen NAME FUNCTION     # the batch-to-width experiment
#       # (tuner/rewrite/batch_to_width.py: the 7-wide stage's images side by side) on top of the
#       # subsample rewrite, channels-last, direct convolutions and O3, against the same without it;
#       # checked against llvm-cpu, CUPTI kernel time 8 rounds
#   bash benchmarks/gpu_direct_conv.sh baseline NAME FUNCTION  # a finished tune-model run
#       # (/tmp/tm-NAME, with its check builds) against the subsample + channels-last build with
#       # the compiler's configs (the right baseline where the default build is wrong), CUPTI
#
# NAME: resnet50_f16_b8 (FUNCTION resnet50), resnet18_f16_b8 (resnet18) or unet_resnet_block_f16
# (unet_resnet_block; no strided 1x1 to subsample, no row to pad: the variants are its own program's),
# from examples/onnx_models.py.
set -u
source benchmarks/gpu_setup.sh >/dev/null 2>&1
step=$1; NAME=$2; FN=$3
M=/tmp/models; mkdir -p $M
[ -f $M/$NAME.onnx ] || python3 examples/onnx_models.py --out $M > /dev/null
CL='--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))'
DC='--iree-codegen-llvmgpu-use-direct-convolution'
T=(--iree-hal-target-device=cuda --iree-cuda-target=sm_80)
kernels() { python3 benchmarks/gpu_model_kernels.py --function $FN "$@" 2>&1 | grep -v "^    \|Warn\|warn"; }
case $step in
choices)
  B=/tmp/rc-base-$NAME; P=/tmp/rc-pad-$NAME
  python3 benchmarks/rewrite_check.py $M/$NAME.onnx --rewrite subsample-strided-1x1 --work $B --variant "cl=$CL" \
    --variant "cld=$CL;$DC" --variant "cldo3=$CL;$DC;--iree-opt-level=O3" 2>&1 | grep -E "relative error|did not" &
  python3 benchmarks/rewrite_check.py $M/$NAME.onnx --rewrite subsample-strided-1x1+pad-conv-columns --work $P \
    --variant "cl=$CL" --variant "cld=$CL;$DC" 2>&1 | grep -E "relative error|did not" | sed 's/^/pad /' &
  wait
  kernels $(for f in $(ls $B/input*.npy | sort -V); do echo --input $f; done) --rounds 8 cl=$B/cl-cuda.vmfb cld=$B/cld-cuda.vmfb cldo3=$B/cldo3-cuda.vmfb \
    padcl=$P/cl-cuda.vmfb padcld=$P/cld-cuda.vmfb ;;
split)
  W=/tmp/split-$NAME; mkdir -p $W
  iree-import-onnx $M/$NAME.onnx -o $W/orig.mlir
  python3 -c "
from pathlib import Path
from tuner.rewrite import REWRITES, combined, rewrite_program
k = {r.name: r for rs in REWRITES.values() for r in rs}
rewrite_program(Path('$W/orig.mlir'), combined([k['subsample-strided-1x1']]), Path('$W/sub.mlir'))"
  iree-compile $W/sub.mlir "${T[@]}" "$CL" --compile-to=preprocessing -o $W/pre.mlir
  python3 -c "import numpy as np; np.save('$W/x.npy', np.random.default_rng(0).uniform(-1, 1, (8, 3, 224, 224)).astype(np.float16))"
  cp $W/pre.mlir $W/p_none.mlir
  for r in 7:4,14:2 7:8,14:4 7:4,14:2,28:2 7:2,14:2; do
    python3 benchmarks/conv_split_reduction.py $W/pre.mlir $W/p_${r//[:,]/_}.mlir $r; done
  build() { iree-compile $1 --compile-from=preprocessing "${T[@]}" ${@:3} -o $2.vmfb &&
    iree-run-module --module=$2.vmfb --function=$FN --device=cuda --input=@$W/x.npy --output=@$2.npy > /dev/null; }
  for p in $W/p_*.mlir; do b=${p%.mlir}; build $p $b & build $p ${b}_do3 $DC --iree-opt-level=O3 & done; wait
  python3 -c "
import glob, numpy as np
ref = np.load('$W/p_none.npy').astype(np.float32); s = np.abs(ref).max()
for f in sorted(glob.glob('$W/p_*.npy')): print(f, 'relative difference to none', float(np.abs(np.load(f).astype(np.float32) - ref).max() / s))"
  ARGS=(); for v in $W/p_*.vmfb; do b=$(basename $v .vmfb); ARGS+=(${b#p_}=$v); done
  python3 benchmarks/gpu_model_kernels.py --function $FN --input $W/x.npy --rounds 6 "${ARGS[@]}" 2>&1 \
    | grep -E "ms of kernels|/ none:|/ none_do3:" ;;
padfuse)
  B=/tmp/rc-padfuse-$NAME; PF=--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops
  python3 benchmarks/rewrite_check.py $M/$NAME.onnx --rewrite subsample-strided-1x1 --work $B --variant "cl=$CL" \
    --variant "clpf=$CL;$PF" --variant "cldo3=$CL;$DC;--iree-opt-level=O3" \
    --variant "cldo3pf=$CL;$DC;--iree-opt-level=O3;$PF" 2>&1 | grep -E "relative error|did not" | sed "s/^/$NAME /"
  kernels $(for f in $(ls $B/input*.npy | sort -V); do echo --input $f; done) --rounds 8 cl=$B/cl-cuda.vmfb \
    clpf=$B/clpf-cuda.vmfb cldo3=$B/cldo3-cuda.vmfb cldo3pf=$B/cldo3pf-cuda.vmfb ;;
widen)
  B=/tmp/rc-base-$NAME; W=/tmp/rc-wide-$NAME
  python3 benchmarks/rewrite_check.py $M/$NAME.onnx --rewrite subsample-strided-1x1 --work $B \
    --variant "cldo3=$CL;$DC;--iree-opt-level=O3" 2>&1 | grep -E "relative error|did not" &
  python3 benchmarks/rewrite_check.py $M/$NAME.onnx --rewrite subsample-strided-1x1+batch-to-width --work $W \
    --variant "cldo3=$CL;$DC;--iree-opt-level=O3" 2>&1 | grep -E "relative error|did not" | sed 's/^/wide /' &
  wait
  kernels $(for f in $(ls $B/input*.npy | sort -V); do echo --input $f; done) --rounds 8 cldo3=$B/cldo3-cuda.vmfb \
    wide=$W/cldo3-cuda.vmfb ;;
baseline)
  D=/tmp/tm-$NAME
  iree-compile $D/imported/$NAME.subsample-strided-1x1.mlir "${T[@]}" "$CL" -o /tmp/right-$NAME.vmfb
  kernels $(for f in $(ls $D/model-inputs/input*.npy | sort -V); do echo --input $f; done) --rounds 8 \
    subsample_cl=/tmp/right-$NAME.vmfb choices=$D/check/choices-alone.vmfb tuned=$D/check/tuned.vmfb ;;
esac
