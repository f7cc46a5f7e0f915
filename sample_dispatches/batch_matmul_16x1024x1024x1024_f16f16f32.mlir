// A batch of 16 f16 matmuls accumulating in f32 (GPU-sized): linalg.batch_matmul, the batch dim
// one workgroup tile each.
func.func @main(%lhs: tensor<16x1024x1024xf16>, %rhs: tensor<16x1024x1024xf16>) -> tensor<16x1024x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<16x1024x1024xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<16x1024x1024xf32>) -> tensor<16x1024x1024xf32>
  %out = linalg.batch_matmul ins(%lhs, %rhs : tensor<16x1024x1024xf16>, tensor<16x1024x1024xf16>)
                             outs(%acc : tensor<16x1024x1024xf32>) -> tensor<16x1024x1024xf32>
  return %out : tensor<16x1024x1024xf32>
}
