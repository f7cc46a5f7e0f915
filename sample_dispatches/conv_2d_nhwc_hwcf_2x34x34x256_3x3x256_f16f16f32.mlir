// A ResNet-style 3x3 convolution, NHWC input, HWCF filter, f16 in and f32 accumulation
// (GPU-sized; on GPUs IREE lowers it as an implicit GEMM).
func.func @main(%input: tensor<2x34x34x256xf16>, %filter: tensor<3x3x256x256xf16>) -> tensor<2x32x32x256xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2x32x32x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<2x32x32x256xf32>) -> tensor<2x32x32x256xf32>
  %out = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%input, %filter : tensor<2x34x34x256xf16>, tensor<3x3x256x256xf16>)
           outs(%acc : tensor<2x32x32x256xf32>) -> tensor<2x32x32x256xf32>
  return %out : tensor<2x32x32x256xf32>
}
