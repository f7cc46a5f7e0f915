# Sourced by the GPU benchmark scripts: where the GPU machine has no package index, the cp312
# wheels of iree-base-compiler (in parts, if a transfer is limited), iree-base-runtime and
# z3-solver carried into $WHEELS (default /tmp/whl) are installed into /tmp/site once per
# machine; the tools and the repository are put on the paths; $OUT is made.
WHEELS=${WHEELS:-/tmp/whl}
if [ -d "$WHEELS" ] && [ ! -f /tmp/site/.done ]; then
  ls "$WHEELS"/part_* >/dev/null 2>&1 && cat "$WHEELS"/part_* > "$WHEELS"/iree_base_compiler-3.13.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl && rm "$WHEELS"/part_*
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
  touch /tmp/site/.done
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:/tmp/site/iree/_runtime_libs:$PATH
chmod +x /tmp/site/iree/_runtime_libs/iree-* /tmp/site/iree/compiler/_mlir_libs/iree-* 2>/dev/null
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
