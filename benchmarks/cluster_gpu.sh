#!/bin/bash
# Time one compiled cuda manifest four ways on a machine with two GPUs and no package index:
# 1 GPU, 2 GPUs (this machine's device pool), Ray with 1 and 2 benchmark workers.
# Prepare where the compiler is (BENCHMARKS.md, "On a Ray cluster"): .gpu-ray/whl (iree-base-runtime,
# msgpack, jsonschema and its needs, for Python 3.12), .gpu-ray/ray312.tar.xz (the ray 2.60.0 wheel unpacked
# without jars, dashboard build, rllib, data, tune, train, serve, llm: 28 MB), .gpu-ray/mm4096 from
# `iree-tuner tune sample_dispatches/matmul_4096x4096x4096_f16f16f32.mlir --target cuda:sm_80 --compile-only
# --budget 48 --search random --output .gpu-ray/mm4096`; carry .gpu-ray and run `bash benchmarks/cluster_gpu.sh`.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu-ray/whl/*.whl || exit 1
tar -xJf .gpu-ray/ray312.tar.xz -C /tmp/site || exit 1
chmod +x /tmp/site/iree/_runtime_libs/iree-* 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
nvidia-smi -L
python3 -c "import ray, sys; print('ray', ray.__version__, sys.version)" || exit 1
tuner() { python3 -m tuner.cli "$@"; }
for mode in local1 local2 ray2 ray1; do
  rm -rf /tmp/$mode; cp -r .gpu-ray/mm4096 /tmp/$mode; rm -f /tmp/$mode/results.sqlite
  start=$(date +%s.%N)
  case $mode in
    local1) tuner benchmark /tmp/$mode --device cuda://0 --confirm-rounds 0 > $OUT/$mode.txt 2>&1 ;;
    local2) tuner benchmark /tmp/$mode --device cuda://0 --device cuda://1 --confirm-rounds 0 > $OUT/$mode.txt 2>&1 ;;
    ray2) tuner benchmark /tmp/$mode --strategy ray --confirm-rounds 0 > $OUT/$mode.txt 2>&1 ;;
    ray1) CUDA_VISIBLE_DEVICES=0 tuner benchmark /tmp/$mode --strategy ray --confirm-rounds 0 > $OUT/$mode.txt 2>&1 ;;
  esac
  echo "$mode rc=$? wall=$(python3 -c "import time; print(round(time.time()-$start,1))")"
  tail -4 $OUT/$mode.txt
  cp /tmp/$mode/results.json $OUT/$mode.json 2>/dev/null
done
