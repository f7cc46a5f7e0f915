// A skinny matmul (few rows, as in small-batch inference): 32x2048 times 2048x4096, f32.
func.func @matmul_skinny(%lhs: tensor<32x2048xf32>, %rhs: tensor<2048x4096xf32>) -> tensor<32x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<32x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<32x4096xf32>) -> tensor<32x4096xf32>
  %out = linalg.matmul ins(%lhs, %rhs : tensor<32x2048xf32>, tensor<2048x4096xf32>)
                       outs(%acc : tensor<32x4096xf32>) -> tensor<32x4096xf32>
  return %out : tensor<32x4096xf32>
}
