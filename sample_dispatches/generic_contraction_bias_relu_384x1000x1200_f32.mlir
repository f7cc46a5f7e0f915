// A linalg.generic contraction with an unaligned N (1000) and fused bias + ReLU consumers:
// one dispatch whose root is the generic, f32.
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#row = affine_map<(m, n) -> (m, n)>
#bias = affine_map<(m, n) -> (n)>
func.func @linear_relu(%x: tensor<384x1200xf32>, %w: tensor<1200x1000xf32>, %b: tensor<1000xf32>) -> tensor<384x1000xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<384x1000xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<384x1000xf32>) -> tensor<384x1000xf32>
  %mm = linalg.generic {indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<384x1200xf32>, tensor<1200x1000xf32>) outs(%acc : tensor<384x1000xf32>) {
  ^bb0(%a: f32, %bb: f32, %c: f32):
    %p = arith.mulf %a, %bb : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<384x1000xf32>
  %act = linalg.generic {indexing_maps = [#row, #bias, #row], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<384x1000xf32>, tensor<1000xf32>) outs(%empty : tensor<384x1000xf32>) {
  ^bb0(%v: f32, %bv: f32, %o: f32):
    %s = arith.addf %v, %bv : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<384x1000xf32>
  return %act : tensor<384x1000xf32>
}
