// A ResNet-50 stage-1 3x3 convolution on 4 images: NHWC input, HWCF filter, f32 (CPU-sized).
func.func @main(%input: tensor<4x58x58x64xf32>, %filter: tensor<3x3x64x64xf32>) -> tensor<4x56x56x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x56x56x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x56x56x64xf32>) -> tensor<4x56x56x64xf32>
  %out = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%input, %filter : tensor<4x58x58x64xf32>, tensor<3x3x64x64xf32>)
           outs(%acc : tensor<4x56x56x64xf32>) -> tensor<4x56x56x64xf32>
  return %out : tensor<4x56x56x64xf32>
}
