#!/bin/bash
# What IREE 3.13 offers for convolutions beyond configs, on ResNet-50 (f16, batch 8) for cuda: the
# subsample-rewritten program built channels-last alone and with Winograd or one of the two im2col
# passes after it, each checked against llvm-cpu (rewrite_check.py) and the builds that run timed by
# CUPTI kernel time against channels-last alone (BENCHMARKS.md, issue 35). On the GPU machine:
#   bash benchmarks/gpu_conv_lowerings.sh
source benchmarks/gpu_setup.sh
M=/tmp/models; mkdir -p $M
[ -f $M/resnet50_f16_b8.onnx ] || python3 examples/onnx_models.py --out $M > /dev/null
pipeline() { echo "--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last$1))"; }
W=/tmp/conv-lowerings
python3 benchmarks/rewrite_check.py $M/resnet50_f16_b8.onnx --rewrite subsample-strided-1x1 --work $W \
  --variant "cl=$(pipeline)" \
  --variant "wino=$(pipeline ',iree-linalg-ext-convert-conv2d-to-winograd{replace-all-convs=true}')" \
  --variant "img2col=$(pipeline ',iree-global-opt-convert-conv2d-to-img2col')" \
  --variant "im2col=$(pipeline ',iree-linalg-ext-convert-conv-to-im2col-op')" 2>&1 | grep -E "relative error|did not"
BUILT=(); for v in wino img2col im2col; do [ -f $W/$v-cuda.npy ] && BUILT+=($v=$W/$v-cuda.vmfb); done
python3 benchmarks/gpu_model_kernels.py --function resnet50 --input $W/input0.npy --rounds 6 \
  cl=$W/cl-cuda.vmfb "${BUILT[@]}" 2>&1 | grep -v "^    "
