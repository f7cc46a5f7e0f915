#!/bin/bash
# Real exports on the GPU machine, IREE beside torch (issue 58; BENCHMARKS.md, "Real exports beside
# torch"): each family of benchmarks/torch_exports.py built at its real size, exported by
# torch.onnx.export (dynamo, defaults), timed by torch eager and torch.compile, then built by IREE as
# imported and with each model rewrite that applies (export_vs_torch.py), every build checked against
# torch's output and timed by CUPTI kernel time, interleaved. Wheels as benchmarks/gpu_setup.sh says.
#
#   bash benchmarks/gpu_export_bench.sh FAMILY...          # one GPU, the families in turn
#   GPUS=2 bash benchmarks/gpu_export_bench.sh FAMILY...   # the families dealt over two GPUs, one stream each
#   LIMIT_S=480: each stream stops there (the device's 600 s per call); what finished is in $OUT
#
# $OUT/bench-FAMILY.json and $OUT/bench-FAMILY.log for each family that finished.
set -u
source benchmarks/gpu_setup.sh
D=/tmp/exports
GPUS=${GPUS:-1}
stream() {  # GPU index, then families
  local gpu=$1; shift
  for F in "$@"; do
    CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/torch_exports.py --out $D --size real --family $F --time \
      --rounds ${ROUNDS:-6} --calls ${CALLS:-20} 2>&1 | grep -E "^$F |FAILED" > $OUT/bench-$F.log
    CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/export_vs_torch.py $D/$F --jobs $(( $(nproc) / GPUS )) \
      --rounds ${ROUNDS:-6} --calls ${CALLS:-20} --json $OUT/bench-$F.json 2>&1 | grep -v -i warning >> $OUT/bench-$F.log
    cat $OUT/bench-$F.log
  done
}
families=("$@")
for (( g = 0; g < GPUS; g++ )); do
  mine=(); for (( i = g; i < ${#families[@]}; i += GPUS )); do mine+=("${families[$i]}"); done
  timeout ${LIMIT_S:-480} bash -c "$(declare -f stream); D=$D GPUS=$GPUS OUT=$OUT; stream $g ${mine[*]}" &
done
wait
cd $OUT && tar czf bench.tgz bench-* 2>/dev/null && rm -f bench-*
