// Attention (iree_linalg_ext.attention): 32 heads, 4096 queries and keys (GPU-sized), head dim 64, f16.
func.func @main(%q: tensor<32x4096x64xf16>, %k: tensor<32x4096x64xf16>, %v: tensor<32x4096x64xf16>) -> tensor<32x4096x64xf16> {
  %scale = arith.constant 0.125 : f16
  %empty = tensor.empty() : tensor<32x4096x64xf16>
  %out = iree_linalg_ext.attention <{indexing_maps = [
             affine_map<(b, m, n, k1, k2) -> (b, m, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, k1)>,
             affine_map<(b, m, n, k1, k2) -> (b, k2, n)>, affine_map<(b, m, n, k1, k2) -> ()>,
             affine_map<(b, m, n, k1, k2) -> (b, m, n)>]}>
           ins(%q, %k, %v, %scale : tensor<32x4096x64xf16>, tensor<32x4096x64xf16>, tensor<32x4096x64xf16>, f16)
           outs(%empty : tensor<32x4096x64xf16>) {
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  } -> tensor<32x4096x64xf16>
  return %out : tensor<32x4096x64xf16>
}
