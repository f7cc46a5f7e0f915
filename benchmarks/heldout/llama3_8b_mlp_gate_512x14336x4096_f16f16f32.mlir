// Llama-3-8B's MLP gate projection over 512 tokens (hidden 4096, intermediate 14336). Held out: no preference, default or heuristic of the tuner was fitted on this shape.
// C = A * B^T (B stored N x K, the layer's weight), f16 in, f32 out.
func.func @linear(%lhs: tensor<512x4096xf16>, %rhs: tensor<14336x4096xf16>) -> tensor<512x14336xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x14336xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x14336xf32>) -> tensor<512x14336xf32>
  %out = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%lhs, %rhs : tensor<512x4096xf16>, tensor<14336x4096xf16>)
      outs(%acc : tensor<512x14336xf32>) -> tensor<512x14336xf32>
  return %out : tensor<512x14336xf32>
}
