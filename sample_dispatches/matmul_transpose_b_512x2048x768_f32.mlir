// C = A * B^T (B stored N x K, as in a linear layer's weight), f32.
func.func @matmul_transpose_b(%lhs: tensor<512x768xf32>, %rhs: tensor<2048x768xf32>) -> tensor<512x2048xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x2048xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x2048xf32>) -> tensor<512x2048xf32>
  %out = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%lhs, %rhs : tensor<512x768xf32>, tensor<2048x768xf32>)
      outs(%acc : tensor<512x2048xf32>) -> tensor<512x2048xf32>
  return %out : tensor<512x2048xf32>
}
