// A ResNet-style 3x3 convolution, NHWC input, HWCF filter, f16 in and f32 accumulation
// (larger: 8 images of 64x64; on GPUs IREE lowers it as an implicit GEMM).
func.func @main(%input: tensor<8x66x66x256xf16>, %filter: tensor<3x3x256x256xf16>) -> tensor<8x64x64x256xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x64x64x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x64x64x256xf32>) -> tensor<8x64x64x256xf32>
  %out = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%input, %filter : tensor<8x66x66x256xf16>, tensor<3x3x256x256xf16>)
           outs(%acc : tensor<8x64x64x256xf32>) -> tensor<8x64x64x256xf32>
  return %out : tensor<8x64x64x256xf32>
}
