// C = A * B, 1024^3, f32: the issue's headline CPU shape.
func.func @matmul(%lhs: tensor<1024x1024xf32>, %rhs: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1024x1024xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %out = linalg.matmul ins(%lhs, %rhs : tensor<1024x1024xf32>, tensor<1024x1024xf32>)
                       outs(%acc : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %out : tensor<1024x1024xf32>
}
