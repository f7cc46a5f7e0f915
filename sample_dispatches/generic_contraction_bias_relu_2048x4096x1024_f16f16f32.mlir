// A linalg.generic contraction of f16 operands accumulating in f32, with fused bias + ReLU
// consumers (GPU-sized): one dispatch whose root is the generic.
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#row = affine_map<(m, n) -> (m, n)>
#bias = affine_map<(m, n) -> (n)>
func.func @linear_relu(%x: tensor<2048x1024xf16>, %w: tensor<1024x4096xf16>, %b: tensor<4096xf32>) -> tensor<2048x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<2048x4096xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<2048x4096xf32>) -> tensor<2048x4096xf32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<2048x1024xf16>, tensor<1024x4096xf16>) outs(%acc : tensor<2048x4096xf32>) {
  ^bb0(%a: f16, %bb: f16, %c: f32):
    %ae = arith.extf %a : f16 to f32
    %be = arith.extf %bb : f16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<2048x4096xf32>
  %act = linalg.generic {indexing_maps = [#row, #bias, #row], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<2048x4096xf32>, tensor<4096xf32>) outs(%empty : tensor<2048x4096xf32>) {
  ^bb0(%v: f32, %bv: f32, %o: f32):
    %s = arith.addf %v, %bv : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<2048x4096xf32>
  return %act : tensor<2048x4096xf32>
}
