// C = A * B^T (B stored N x K, a linear layer's weight), f16 in, f32 accumulation (GPU-sized).
func.func @matmul_transpose_b(%lhs: tensor<2048x1024xf16>, %rhs: tensor<4096x1024xf16>) -> tensor<2048x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2048x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<2048x4096xf32>) -> tensor<2048x4096xf32>
  %out = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%lhs, %rhs : tensor<2048x1024xf16>, tensor<4096x1024xf16>)
      outs(%acc : tensor<2048x4096xf32>) -> tensor<2048x4096xf32>
  return %out : tensor<2048x4096xf32>
}
