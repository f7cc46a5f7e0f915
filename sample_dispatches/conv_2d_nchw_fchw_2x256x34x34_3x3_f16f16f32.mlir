// The same 3x3 convolution channels first: NCHW input, FCHW filter, f16 in, f32 accumulation.
func.func @main(%input: tensor<2x256x34x34xf16>, %filter: tensor<256x256x3x3xf16>) -> tensor<2x256x32x32xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2x256x32x32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<2x256x32x32xf32>) -> tensor<2x256x32x32xf32>
  %out = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%input, %filter : tensor<2x256x34x34xf16>, tensor<256x256x3x3xf16>)
           outs(%acc : tensor<2x256x32x32xf32>) -> tensor<2x256x32x32xf32>
  return %out : tensor<2x256x32x32xf32>
}
