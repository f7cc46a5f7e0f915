// C = A * B, 4096^3, f16 inputs accumulating in f32: the issue's headline GPU shape.
func.func @matmul(%lhs: tensor<4096x4096xf16>, %rhs: tensor<4096x4096xf16>) -> tensor<4096x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4096x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %out = linalg.matmul ins(%lhs, %rhs : tensor<4096x4096xf16>, tensor<4096x4096xf16>)
                       outs(%acc : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %out : tensor<4096x4096xf32>
}
