// Batched C[b] = A[b] * B[b]: 8 batches of 256x384 times 384x512, f32 (attention-like shapes).
func.func @batch_matmul(%lhs: tensor<8x256x384xf32>, %rhs: tensor<8x384x512xf32>) -> tensor<8x256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x256x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x256x512xf32>) -> tensor<8x256x512xf32>
  %out = linalg.batch_matmul ins(%lhs, %rhs : tensor<8x256x384xf32>, tensor<8x384x512xf32>)
                             outs(%acc : tensor<8x256x512xf32>) -> tensor<8x256x512xf32>
  return %out : tensor<8x256x512xf32>
}
