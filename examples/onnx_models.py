"""Build small real-model-like ONNX files with the `onnx` package (no model files are committed):

    python examples/onnx_models.py --out onnx-models
    iree-tuner dispatches onnx-models/bert_layer.onnx --profile
    iree-tuner tune onnx-models/cnn_b4.onnx --output tuning-cnn

- bert_layer.onnx: one small BERT-like encoder layer, 128 tokens, hidden 256, 4 heads, MLP 1024:
  Q/K/V projections, scaled dot-product attention (MatMul, Softmax, MatMul), the output
  projection, residual + LayerNorm, MLP with GELU (the erf form), residual + LayerNorm.
- bert_base_layer.onnx: the same at BERT-base's size: 384 tokens, hidden 768, 12 heads, MLP 3072.
- bert_base_layer_f16_1024.onnx: BERT-base's layer in f16 over 1024 tokens (for GPUs).
- bert_large_layer_f16_2048.onnx: a BERT-large-sized layer in f16 over 2048 tokens (hidden 1024,
  16 heads, MLP 4096; for GPUs).
- vit_large_layer_f16.onnx: a pre-LayerNorm vision transformer layer at ViT-L/14's size on
  336x336 images (577 tokens, hidden 1024, 16 heads, MLP 4096 with GELU, biases), batch 4, f16.
- llama_block_f16_2048.onnx: a Llama-style decoder block in f16 over 2048 tokens (hidden 2048,
  16 heads of 128, SwiGLU MLP 5632): RMSNorm (in f32), Q/K/V projections, rotary embeddings,
  causal attention with an additive mask (MatMul, Div, Add, Softmax, MatMul), the output
  projection, residual, RMSNorm, gate/up/down MLP with SiLU, residual.
- gqa_block_f16_1024.onnx: a decoder block with grouped-query attention as torch exports it, f16,
  1024 tokens: hidden 1536, 12 query heads and 2 KV heads of 128 (K/V repeated by Unsqueeze + Expand
  + Reshape), biases on Q/K/V, rank-4 heads, rotary, causal mask, RMSNorm in f32, SwiGLU MLP 8960.
- gqa_block_32x8_f16_1024.onnx: the same at hidden 2048, 32 query heads and 8 KV heads of 64, MLP 8192.
- unet_resnet_block_f16.onnx: a Stable-Diffusion-style UNet ResNet block, NCHW, f16: batch 2, 640
  channels, a 64x64 latent; GroupNorm(32) as torch exports it (Reshape -> InstanceNormalization ->
  Reshape -> scale and bias), SiLU, two 3x3 convolutions, a time-embedding projection added, residual.
- unet_attention_block_f16.onnx: a Stable-Diffusion-style UNet attention block (SD 2.x heads of 64),
  NCHW, f16: batch 2, 320 channels, a 64x64 latent (4096 tokens); GroupNorm, 1x1 convolutions in and
  out, self-attention, cross-attention to 77 text tokens of 1024, a GEGLU feed-forward, LayerNorms.
- resnet50_f16_b8.onnx: ResNet-50 as torch exports it in eval mode (batch norms folded), f16, batch
  8, 224x224.
- resnet18_f16_b8.onnx: ResNet-18 (basic blocks: two 3x3 convolutions each), the same way; built
  for held-out checks of what was built on ResNet-50 (the padded-rows rewrite is exact on it:
  bitwise on llvm-cpu at batch 2, 112x112, f32).
- cnn_b1.onnx, cnn_b4.onnx: a small CNN on 64x64 RGB images, batch 1 and 4: three 3x3 Conv + ReLU
  blocks (16, 32, 64 channels; the last two with stride 2), global average pooling, a 10-way Gemm.
- cnn_b4_224.onnx: the same CNN on 224x224 images, batch 4.

Weights are seeded random initializers, so every build gives the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.05, dtype=np.float32):
    from onnx import numpy_helper

    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _rms_norm(x: str, weight: str, out: str, elem: int) -> list:
    """RMSNorm as exports write it, in f32 between casts (the constants `two` and `eps` in the graph)."""
    from onnx import TensorProto, helper

    return [helper.make_node("Cast", [x], [f"{out}_x32"], to=TensorProto.FLOAT),
            helper.make_node("Pow", [f"{out}_x32", "two"], [f"{out}_sq"]),
            helper.make_node("ReduceMean", [f"{out}_sq"], [f"{out}_ms"], axes=[-1], keepdims=1),
            helper.make_node("Add", [f"{out}_ms", "eps"], [f"{out}_mse"]),
            helper.make_node("Sqrt", [f"{out}_mse"], [f"{out}_rms"]),
            helper.make_node("Div", [f"{out}_x32", f"{out}_rms"], [f"{out}_n"]),
            helper.make_node("Mul", [f"{out}_n", weight], [f"{out}_w"]),
            helper.make_node("Cast", [f"{out}_w"], [out], to=elem)]


def _silu(x: str, out: str) -> list:
    """SiLU as exports write it: x * Sigmoid(x)."""
    from onnx import helper

    return [helper.make_node("Sigmoid", [x], [f"{out}_sig"]), helper.make_node("Mul", [x, f"{out}_sig"], [out])]


def _gelu(x: str, out: str) -> list:
    """GELU in its erf form as exports write it: 0.5 * x * (1 + erf(x / sqrt(2))) (the constants
    `inv_sqrt2`, `one` and `half` in the graph)."""
    from onnx import helper

    return [helper.make_node("Mul", [x, "inv_sqrt2"], [f"{out}_s"]),
            helper.make_node("Erf", [f"{out}_s"], [f"{out}_erf"]),
            helper.make_node("Add", [f"{out}_erf", "one"], [f"{out}_erf1"]),
            helper.make_node("Mul", [x, f"{out}_erf1"], [f"{out}_2"]),
            helper.make_node("Mul", [f"{out}_2", "half"], [out])]


def _swiglu_residual(res: str, elem: int) -> list:
    """y = res + Down(SiLU(Gate(n)) * Up(n)), n = RMSNorm(res): a Llama-style MLP (weights wg, wu, wd)."""
    from onnx import helper

    return [*_rms_norm(res, "norm2", "n2", elem),
            helper.make_node("MatMul", ["n2", "wg"], ["gate"]),
            *_silu("gate", "silu"),
            helper.make_node("MatMul", ["n2", "wu"], ["up"]),
            helper.make_node("Mul", ["silu", "up"], ["glu"]),
            helper.make_node("MatMul", ["glu", "wd"], ["down"]),
            helper.make_node("Add", [res, "down"], ["y"])]


def _rotary(name: str) -> list:
    """NAME_r = NAME_h * cos + rotate_half(NAME_h) * sin (rotary embeddings; "half_split" splits the head)."""
    from onnx import helper

    return [helper.make_node("Split", [f"{name}_h", "half_split"], [f"{name}_a", f"{name}_b"], axis=-1),
            helper.make_node("Neg", [f"{name}_b"], [f"{name}_nb"]),
            helper.make_node("Concat", [f"{name}_nb", f"{name}_a"], [f"{name}_rot"], axis=-1),
            helper.make_node("Mul", [f"{name}_h", "cos"], [f"{name}_c"]),
            helper.make_node("Mul", [f"{name}_rot", "sin"], [f"{name}_s"]),
            helper.make_node("Add", [f"{name}_c", f"{name}_s"], [f"{name}_r"])]


def _causal_attention(key: str, value: str, key_perm: list[int], heads_perm: list[int]) -> list:
    """softmax(Q K^T / sqrt(d) + causal) V over rotated Q ("q_r"), its heads merged back
    ("merged_shape"), projected by wo and added to x: "res1"."""
    from onnx import helper

    return [helper.make_node("Transpose", [key], ["k_t"], perm=key_perm),
            helper.make_node("MatMul", ["q_r", "k_t"], ["scores_raw"]),
            helper.make_node("Div", ["scores_raw", "sqrt_d"], ["scores"]),
            helper.make_node("Add", ["scores", "causal"], ["masked"]),
            helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
            helper.make_node("MatMul", ["probs", value], ["ctx_h"]),
            helper.make_node("Transpose", ["ctx_h"], ["ctx_heads"], perm=heads_perm),
            helper.make_node("Reshape", ["ctx_heads", "merged_shape"], ["ctx"]),
            helper.make_node("MatMul", ["ctx", "wo"], ["attn_out"]),
            helper.make_node("Add", ["x", "attn_out"], ["res1"])]


def bert_layer(tokens: int = 128, hidden: int = 256, heads: int = 4, mlp: int = 1024, seed: int = 0,
               dtype=np.float32):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head = hidden // heads
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [_init(rng, n, s, dtype=dtype) for n, s in (
        ("wq", (hidden, hidden)), ("wk", (hidden, hidden)), ("wv", (hidden, hidden)), ("wo", (hidden, hidden)),
        ("w1", (hidden, mlp)), ("w2", (mlp, hidden)))]
    inits += [numpy_helper.from_array((np.ones if "scale" in n else np.zeros)(hidden, dtype), n)
              for n in ("ln1_scale", "ln1_bias", "ln2_scale", "ln2_bias")]
    inits += [helper.make_tensor("heads_shape", TensorProto.INT64, [3], [tokens, heads, head]),
              helper.make_tensor("merged_shape", TensorProto.INT64, [2], [tokens, hidden])]
    inits += [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (
        ("inv_sqrt_d", 1.0 / np.sqrt(head)), ("inv_sqrt2", 1.0 / np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}_flat"]),
                  helper.make_node("Reshape", [f"{name}_flat", "heads_shape"], [f"{name}_3d"]),
                  helper.make_node("Transpose", [f"{name}_3d"], [f"{name}_h"], perm=[1, 0, 2])]
    nodes += [helper.make_node("Transpose", ["k_h"], ["k_t"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["q_h", "k_t"], ["scores_raw"]),
              helper.make_node("Mul", ["scores_raw", "inv_sqrt_d"], ["scores"]),
              helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v_h"], ["ctx_h"]),
              helper.make_node("Transpose", ["ctx_h"], ["ctx_3d"], perm=[1, 0, 2]),
              helper.make_node("Reshape", ["ctx_3d", "merged_shape"], ["ctx"]),
              helper.make_node("MatMul", ["ctx", "wo"], ["attn_out"]),
              helper.make_node("Add", ["x", "attn_out"], ["res1"]),
              helper.make_node("LayerNormalization", ["res1", "ln1_scale", "ln1_bias"], ["h1"], axis=-1),
              helper.make_node("MatMul", ["h1", "w1"], ["up"]),
              *_gelu("up", "gelu"),
              helper.make_node("MatMul", ["gelu", "w2"], ["down"]),
              helper.make_node("Add", ["h1", "down"], ["res2"]),
              helper.make_node("LayerNormalization", ["res2", "ln2_scale", "ln2_bias"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "bert_layer",
                              [helper.make_tensor_value_info("x", elem, [tokens, hidden])],
                              [helper.make_tensor_value_info("y", elem, [tokens, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def vit_layer(batch: int = 4, tokens: int = 577, hidden: int = 1024, heads: int = 16, mlp: int = 4096,
              seed: int = 1, dtype=np.float16):
    """A pre-LN ViT encoder layer: x + Attn(LN(x)), then h + MLP(LN(h)); linear layers with
    biases; attention over [batch, heads, tokens, head] (rank 4)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head = hidden // heads
    rows = batch * tokens
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [_init(rng, n, s, dtype=dtype) for n, s in (
        ("wqkv", (hidden, 3 * hidden)), ("wo", (hidden, hidden)), ("w1", (hidden, mlp)), ("w2", (mlp, hidden)),
        ("bqkv", (3 * hidden,)), ("bo", (hidden,)), ("b1", (mlp,)), ("b2", (hidden,)))]
    inits += [numpy_helper.from_array((np.ones if "scale" in n else np.zeros)(hidden, dtype), n)
              for n in ("ln1_scale", "ln1_bias", "ln2_scale", "ln2_bias")]
    inits += [helper.make_tensor("qkv_shape", TensorProto.INT64, [5], [batch, tokens, 3, heads, head]),
              helper.make_tensor("merged_shape", TensorProto.INT64, [2], [rows, hidden]),
              helper.make_tensor("split3", TensorProto.INT64, [3], [1, 1, 1]),
              helper.make_tensor("axes2", TensorProto.INT64, [1], [2])]
    inits += [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (
        ("inv_sqrt_d", 1.0 / np.sqrt(head)), ("inv_sqrt2", 1.0 / np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("LayerNormalization", ["x", "ln1_scale", "ln1_bias"], ["n1"], axis=-1),
             helper.make_node("MatMul", ["n1", "wqkv"], ["qkv_mm"]),
             helper.make_node("Add", ["qkv_mm", "bqkv"], ["qkv_flat"]),
             helper.make_node("Reshape", ["qkv_flat", "qkv_shape"], ["qkv5"]),
             helper.make_node("Split", ["qkv5", "split3"], ["q5", "k5", "v5"], axis=2)]
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("Squeeze", [f"{name}5", "axes2"], [f"{name}4"]),
                  helper.make_node("Transpose", [f"{name}4"], [f"{name}_h"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Transpose", ["k_h"], ["k_t"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q_h", "k_t"], ["scores_raw"]),
              helper.make_node("Mul", ["scores_raw", "inv_sqrt_d"], ["scores"]),
              helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v_h"], ["ctx_h"]),
              helper.make_node("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "merged_shape"], ["ctx"]),
              helper.make_node("MatMul", ["ctx", "wo"], ["o_mm"]),
              helper.make_node("Add", ["o_mm", "bo"], ["attn_out"]),
              helper.make_node("Add", ["x", "attn_out"], ["res1"]),
              helper.make_node("LayerNormalization", ["res1", "ln2_scale", "ln2_bias"], ["n2"], axis=-1),
              helper.make_node("MatMul", ["n2", "w1"], ["up_mm"]),
              helper.make_node("Add", ["up_mm", "b1"], ["up"]),
              *_gelu("up", "gelu"),
              helper.make_node("MatMul", ["gelu", "w2"], ["down_mm"]),
              helper.make_node("Add", ["down_mm", "b2"], ["down"]),
              helper.make_node("Add", ["res1", "down"], ["y"])]
    graph = helper.make_graph(nodes, "vit_layer", [helper.make_tensor_value_info("x", elem, [rows, hidden])],
                              [helper.make_tensor_value_info("y", elem, [rows, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def llama_block(tokens: int = 2048, hidden: int = 2048, heads: int = 16, mlp: int = 5632, seed: int = 2,
                dtype=np.float16):
    """A Llama-style decoder block: h = x + Attn(RMSNorm(x)) with rotary embeddings and a causal
    mask, y = h + Down(SiLU(Gate(n)) * Up(n)) with n = RMSNorm(h); no biases; the norms in f32."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head = hidden // heads
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [_init(rng, n, s, scale=0.02, dtype=dtype) for n, s in (
        ("wq", (hidden, hidden)), ("wk", (hidden, hidden)), ("wv", (hidden, hidden)), ("wo", (hidden, hidden)),
        ("wg", (hidden, mlp)), ("wu", (hidden, mlp)), ("wd", (mlp, hidden)))]
    inits += [numpy_helper.from_array(np.ones(hidden, np.float32), n) for n in ("norm1", "norm2")]
    angles = np.arange(tokens)[:, None] / 10000.0 ** (np.arange(0, head, 2) / head)[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    inits += [numpy_helper.from_array(np.cos(angles).astype(dtype), "cos"),
              numpy_helper.from_array(np.sin(angles).astype(dtype), "sin"),
              numpy_helper.from_array(np.triu(np.full((tokens, tokens), -65504.0), 1).astype(dtype), "causal"),
              helper.make_tensor("heads_shape", TensorProto.INT64, [3], [tokens, heads, head]),
              helper.make_tensor("merged_shape", TensorProto.INT64, [2], [tokens, hidden]),
              helper.make_tensor("half_split", TensorProto.INT64, [2], [head // 2, head // 2])]
    inits += [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (("sqrt_d", np.sqrt(head)),)]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("eps", 1e-5), ("two", 2.0))]

    nodes = _rms_norm("x", "norm1", "n1", elem)
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["n1", f"w{name}"], [f"{name}_flat"]),
                  helper.make_node("Reshape", [f"{name}_flat", "heads_shape"], [f"{name}_3d"]),
                  helper.make_node("Transpose", [f"{name}_3d"], [f"{name}_h"], perm=[1, 0, 2])]
    nodes += _rotary("q") + _rotary("k")
    nodes += _causal_attention("k_r", "v_h", [0, 2, 1], [1, 0, 2])
    nodes += _swiglu_residual("res1", elem)
    graph = helper.make_graph(nodes, "llama_block", [helper.make_tensor_value_info("x", elem, [tokens, hidden])],
                              [helper.make_tensor_value_info("y", elem, [tokens, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gqa_block(tokens: int = 1024, hidden: int = 1536, heads: int = 12, kv_heads: int = 2, mlp: int = 8960,
              seed: int = 3, dtype=np.float16):
    """A decoder block with grouped-query attention as torch exports it (Qwen2/Llama-3 style):
    activations [1, tokens, hidden]; Q/K/V projections with biases, heads reshaped to rank 4 and
    transposed; rotary embeddings; K and V repeated to the query heads as `repeat_kv` exports
    (Unsqueeze, Expand, Reshape); a causal additive mask; RMSNorm in f32; SwiGLU MLP; residuals."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    head, group = hidden // heads, heads // kv_heads
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [_init(rng, n, s, scale=0.02, dtype=dtype) for n, s in (
        ("wq", (hidden, heads * head)), ("wk", (hidden, kv_heads * head)), ("wv", (hidden, kv_heads * head)),
        ("bq", (heads * head,)), ("bk", (kv_heads * head,)), ("bv", (kv_heads * head,)),
        ("wo", (heads * head, hidden)), ("wg", (hidden, mlp)), ("wu", (hidden, mlp)), ("wd", (mlp, hidden)))]
    inits += [numpy_helper.from_array(np.ones(hidden, np.float32), n) for n in ("norm1", "norm2")]
    angles = np.arange(tokens)[:, None] / 10000.0 ** (np.arange(0, head, 2) / head)[None, :]
    angles = np.concatenate([angles, angles], axis=1)[None, None]
    inits += [numpy_helper.from_array(np.cos(angles).astype(dtype), "cos"),
              numpy_helper.from_array(np.sin(angles).astype(dtype), "sin"),
              numpy_helper.from_array(np.triu(np.full((1, 1, tokens, tokens), -65504.0), 1).astype(dtype), "causal"),
              helper.make_tensor("q_shape", TensorProto.INT64, [4], [1, tokens, heads, head]),
              helper.make_tensor("kv_shape", TensorProto.INT64, [4], [1, tokens, kv_heads, head]),
              helper.make_tensor("expand_shape", TensorProto.INT64, [5], [1, kv_heads, group, tokens, head]),
              helper.make_tensor("repeated_shape", TensorProto.INT64, [4], [1, heads, tokens, head]),
              helper.make_tensor("merged_shape", TensorProto.INT64, [3], [1, tokens, heads * head]),
              helper.make_tensor("half_split", TensorProto.INT64, [2], [head // 2, head // 2]),
              helper.make_tensor("axis2", TensorProto.INT64, [1], [2])]
    inits += [numpy_helper.from_array(np.array(np.sqrt(head), dtype), "sqrt_d")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("eps", 1e-6), ("two", 2.0))]

    nodes = _rms_norm("x", "norm1", "n1", elem)
    for name, shape in (("q", "q_shape"), ("k", "kv_shape"), ("v", "kv_shape")):
        nodes += [helper.make_node("MatMul", ["n1", f"w{name}"], [f"{name}_mm"]),
                  helper.make_node("Add", [f"{name}_mm", f"b{name}"], [f"{name}_flat"]),
                  helper.make_node("Reshape", [f"{name}_flat", shape], [f"{name}_4d"]),
                  helper.make_node("Transpose", [f"{name}_4d"], [f"{name}_h"], perm=[0, 2, 1, 3])]
    nodes += _rotary("q") + _rotary("k")
    for name, x in (("k", "k_r"), ("v", "v_h")):  # repeat_kv
        nodes += [helper.make_node("Unsqueeze", [x, "axis2"], [f"{name}_5d"]),
                  helper.make_node("Expand", [f"{name}_5d", "expand_shape"], [f"{name}_x"]),
                  helper.make_node("Reshape", [f"{name}_x", "repeated_shape"], [f"{name}_rep"])]
    nodes += _causal_attention("k_rep", "v_rep", [0, 1, 3, 2], [0, 2, 1, 3])
    nodes += _swiglu_residual("res1", elem)
    io = [1, tokens, hidden]
    graph = helper.make_graph(nodes, "gqa_block", [helper.make_tensor_value_info("x", elem, io)],
                              [helper.make_tensor_value_info("y", elem, io)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small_cnn(batch: int, size: int = 64, seed: int = 0):
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    channels = [3, 16, 32, 64]
    inits, nodes, x = [], [], "image"
    for i, (cin, cout) in enumerate(zip(channels, channels[1:])):
        inits += [_init(rng, f"conv{i}_w", (cout, cin, 3, 3), 0.1), _init(rng, f"conv{i}_b", (cout,), 0.01)]
        stride = 1 if i == 0 else 2
        nodes += [helper.make_node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1], strides=[stride, stride]),
                  helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"])]
        x = f"relu{i}"
    inits += [_init(rng, "fc_w", (10, channels[-1])), _init(rng, "fc_b", (10,), 0.01)]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"]),
              helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, f"cnn_b{batch}",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _group_norm(x: str, out: str, channels: int, groups: int, batch: int, size: int, prefix: str, rng,
                dtype) -> tuple[list, list]:
    """GroupNorm as torch exports it: Reshape to [batch, groups, rest], InstanceNormalization
    over the groups (unit scale, zero bias), Reshape back, then the per-channel scale and bias."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones(groups, dtype), f"{prefix}_in_scale"),
             numpy_helper.from_array(np.zeros(groups, dtype), f"{prefix}_in_bias"),
             numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal((channels, 1, 1))).astype(dtype), f"{prefix}_gamma"),
             numpy_helper.from_array((0.1 * rng.standard_normal((channels, 1, 1))).astype(dtype), f"{prefix}_beta"),
             helper.make_tensor(f"{prefix}_grouped", TensorProto.INT64, [3], [batch, groups, -1]),
             helper.make_tensor(f"{prefix}_image", TensorProto.INT64, [4], [batch, channels, size, size])]
    nodes = [helper.make_node("Reshape", [x, f"{prefix}_grouped"], [f"{prefix}_g"]),
             helper.make_node("InstanceNormalization", [f"{prefix}_g", f"{prefix}_in_scale", f"{prefix}_in_bias"],
                              [f"{prefix}_gn"], epsilon=1e-5),
             helper.make_node("Reshape", [f"{prefix}_gn", f"{prefix}_image"], [f"{prefix}_n"]),
             helper.make_node("Mul", [f"{prefix}_n", f"{prefix}_gamma"], [f"{prefix}_s"]),
             helper.make_node("Add", [f"{prefix}_s", f"{prefix}_beta"], [out])]
    return nodes, inits


def unet_resnet_block(batch: int = 2, channels: int = 640, size: int = 64, temb: int = 1280, groups: int = 32,
                      seed: int = 5, dtype=np.float16, out_channels: int | None = None):
    """A Stable-Diffusion-style UNet ResNet block as torch exports it, NCHW: GroupNorm, SiLU, a 3x3
    convolution, the time embedding (SiLU, a linear layer) added per channel, GroupNorm, SiLU, a
    3x3 convolution, and the residual. Inputs: the latent [batch, channels, size, size] and the
    time embedding [batch, temb]. With `out_channels` other than `channels` (a block that changes
    the width, as diffusers' first block of a level does) the first convolution widens, and the
    residual goes through a 1x1 convolution (diffusers' conv_shortcut)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    out = out_channels or channels
    inits = [_init(rng, "conv1_w", (out, channels, 3, 3), 1.0 / np.sqrt(channels * 9), dtype),
             _init(rng, "conv1_b", (out,), 0.01, dtype),
             _init(rng, "conv2_w", (out, out, 3, 3), 1.0 / np.sqrt(out * 9), dtype), _init(rng, "conv2_b", (out,), 0.01, dtype),
             _init(rng, "temb_w", (temb, out), 1.0 / np.sqrt(temb), dtype), _init(rng, "temb_b", (out,), 0.01, dtype)]
    inits.append(helper.make_tensor("temb_axes", TensorProto.INT64, [2], [2, 3]))
    nodes = []
    for i, (x, prefix, width) in enumerate((("x", "gn1", channels), ("h1", "gn2", out)), 1):
        gn_nodes, gn_inits = _group_norm(x, f"{prefix}_out", width, groups, batch, size, prefix, rng, dtype)
        nodes += gn_nodes
        inits += gn_inits
        nodes += [*_silu(f"{prefix}_out", f"{prefix}_silu"),
                  helper.make_node("Conv", [f"{prefix}_silu", f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
        if i == 1:
            nodes += [*_silu("temb", "temb_silu"),
                      helper.make_node("MatMul", ["temb_silu", "temb_w"], ["temb_mm"]),
                      helper.make_node("Add", ["temb_mm", "temb_b"], ["temb_proj"]),
                      helper.make_node("Unsqueeze", ["temb_proj", "temb_axes"], ["temb_4d"]),
                      helper.make_node("Add", ["conv1", "temb_4d"], ["h1"])]
    residual = "x"
    if out != channels:
        inits += [_init(rng, "shortcut_w", (out, channels, 1, 1), 1.0 / np.sqrt(channels), dtype),
                  _init(rng, "shortcut_b", (out,), 0.01, dtype)]
        nodes.append(helper.make_node("Conv", ["x", "shortcut_w", "shortcut_b"], ["shortcut"], kernel_shape=[1, 1]))
        residual = "shortcut"
    nodes.append(helper.make_node("Add", [residual, "conv2"], ["y"]))
    graph = helper.make_graph(nodes, "unet_resnet_block",
                              [helper.make_tensor_value_info("x", elem, [batch, channels, size, size]),
                               helper.make_tensor_value_info("temb", elem, [batch, temb])],
                              [helper.make_tensor_value_info("y", elem, [batch, out, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def unet_sampling_block(batch: int = 2, channels: int = 640, size: int = 32, seed: int = 8, dtype=np.float16):
    """A UNet level's resampling as torch exports diffusers' Upsample2D and Downsample2D, NCHW: the
    latent upsampled 2x by nearest neighbour (Resize, asymmetric, floor) and a 3x3 convolution,
    then a 3x3 convolution with stride 2 back to `size`. Input and output [batch, channels, size, size]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [_init(rng, "up_w", (channels, channels, 3, 3), 1.0 / np.sqrt(channels * 9), dtype),
             _init(rng, "up_b", (channels,), 0.01, dtype),
             _init(rng, "down_w", (channels, channels, 3, 3), 1.0 / np.sqrt(channels * 9), dtype),
             _init(rng, "down_b", (channels,), 0.01, dtype),
             numpy_helper.from_array(np.array([1.0, 1.0, 2.0, 2.0], np.float32), "scales")]
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["up", "up_w", "up_b"], ["up_conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["up_conv", "down_w", "down_b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2])]
    image = [batch, channels, size, size]
    graph = helper.make_graph(nodes, "unet_sampling_block", [helper.make_tensor_value_info("x", elem, image)],
                              [helper.make_tensor_value_info("y", elem, image)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attention(prefix: str, x: str, context: str, heads: int, head: int, batch: int, tokens: int,
               kv_tokens: int) -> list:
    """Multi-head attention as diffusers' Attention exports it: Q from X, K and V from CONTEXT (no
    biases), heads to [batch, heads, tokens, head], softmax(Q K^T * scale) V, heads merged, the output
    projection with its bias: PREFIX_out."""
    from onnx import helper

    nodes = []
    for name, src, rows in (("q", x, tokens), ("k", context, kv_tokens), ("v", context, kv_tokens)):
        nodes += [helper.make_node("MatMul", [src, f"{prefix}_w{name}"], [f"{prefix}_{name}"]),
                  helper.make_node("Reshape", [f"{prefix}_{name}", f"{prefix}_{name}_shape"], [f"{prefix}_{name}4"]),
                  helper.make_node("Transpose", [f"{prefix}_{name}4"], [f"{prefix}_{name}_h"], perm=[0, 2, 1, 3])]
    return nodes + [
        helper.make_node("Transpose", [f"{prefix}_k_h"], [f"{prefix}_k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", [f"{prefix}_q_h", f"{prefix}_k_t"], [f"{prefix}_scores_raw"]),
        helper.make_node("Mul", [f"{prefix}_scores_raw", "attn_scale"], [f"{prefix}_scores"]),
        helper.make_node("Softmax", [f"{prefix}_scores"], [f"{prefix}_probs"], axis=-1),
        helper.make_node("MatMul", [f"{prefix}_probs", f"{prefix}_v_h"], [f"{prefix}_ctx_h"]),
        helper.make_node("Transpose", [f"{prefix}_ctx_h"], [f"{prefix}_ctx4"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [f"{prefix}_ctx4", "tokens_shape"], [f"{prefix}_ctx"]),
        helper.make_node("MatMul", [f"{prefix}_ctx", f"{prefix}_wo"], [f"{prefix}_o"]),
        helper.make_node("Add", [f"{prefix}_o", f"{prefix}_bo"], [f"{prefix}_out"])]


def unet_attention_block(batch: int = 2, channels: int = 320, size: int = 64, heads: int = 5, context: int = 77,
                         context_dim: int = 1024, groups: int = 32, seed: int = 6, dtype=np.float16):
    """A Stable-Diffusion-style UNet attention block (diffusers' Transformer2DModel with one
    BasicTransformerBlock, SD 2.x head size 64) as torch exports it, NCHW: GroupNorm, a 1x1
    convolution in, the image as size*size tokens; LayerNorm + self-attention, LayerNorm +
    cross-attention to the text context [batch, context, context_dim], LayerNorm + GEGLU
    feed-forward (4x), each with its residual; back to NCHW, a 1x1 convolution out, the residual.
    Inputs: the latent [batch, channels, size, size] and the text context."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    head, tokens, ff = channels // heads, size * size, 4 * channels
    inits = [_init(rng, n, s, 1.0 / np.sqrt(s[1] if n.startswith("proj") else s[0]), dtype) for n, s in (
        ("proj_in_w", (channels, channels, 1, 1)), ("proj_out_w", (channels, channels, 1, 1)),
        ("self_wq", (channels, channels)), ("self_wk", (channels, channels)), ("self_wv", (channels, channels)),
        ("self_wo", (channels, channels)), ("cross_wq", (channels, channels)), ("cross_wk", (context_dim, channels)),
        ("cross_wv", (context_dim, channels)), ("cross_wo", (channels, channels)),
        ("ff_w1", (channels, 2 * ff)), ("ff_w2", (ff, channels)))]
    inits += [_init(rng, n, (c,), 0.01, dtype) for n, c in (
        ("proj_in_b", channels), ("proj_out_b", channels), ("self_bo", channels), ("cross_bo", channels),
        ("ff_b1", 2 * ff), ("ff_b2", channels))]
    inits += [numpy_helper.from_array((np.ones if "scale" in n else np.zeros)(channels, dtype), f"ln{i}_{n}")
              for i in (1, 2, 3) for n in ("scale", "bias")]
    inits += [helper.make_tensor("tokens_shape", TensorProto.INT64, [3], [batch, tokens, channels]),
              helper.make_tensor("image_nhwc", TensorProto.INT64, [4], [batch, size, size, channels]),
              helper.make_tensor("ff_halves", TensorProto.INT64, [2], [ff, ff])]
    for prefix, kv in (("self", tokens), ("cross", context)):
        inits += [helper.make_tensor(f"{prefix}_{name}_shape", TensorProto.INT64, [4], [batch, rows, heads, head])
                  for name, rows in (("q", tokens), ("k", kv), ("v", kv))]
    inits += [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (
        ("attn_scale", 1.0 / np.sqrt(head)), ("inv_sqrt2", 1.0 / np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes, gn_inits = _group_norm("x", "gn_out", channels, groups, batch, size, "gn", rng, dtype)
    inits += gn_inits
    nodes += [helper.make_node("Conv", ["gn_out", "proj_in_w", "proj_in_b"], ["proj_in"], kernel_shape=[1, 1]),
              helper.make_node("Transpose", ["proj_in"], ["nhwc"], perm=[0, 2, 3, 1]),
              helper.make_node("Reshape", ["nhwc", "tokens_shape"], ["t0"]),
              helper.make_node("LayerNormalization", ["t0", "ln1_scale", "ln1_bias"], ["n1"], axis=-1, epsilon=1e-5)]
    nodes += _attention("self", "n1", "n1", heads, head, batch, tokens, tokens)
    nodes += [helper.make_node("Add", ["self_out", "t0"], ["t1"]),
              helper.make_node("LayerNormalization", ["t1", "ln2_scale", "ln2_bias"], ["n2"], axis=-1, epsilon=1e-5)]
    nodes += _attention("cross", "n2", "context", heads, head, batch, tokens, context)
    nodes += [helper.make_node("Add", ["cross_out", "t1"], ["t2"]),
              helper.make_node("LayerNormalization", ["t2", "ln3_scale", "ln3_bias"], ["n3"], axis=-1, epsilon=1e-5),
              helper.make_node("MatMul", ["n3", "ff_w1"], ["ff_mm"]),
              helper.make_node("Add", ["ff_mm", "ff_b1"], ["ff_proj"]),
              helper.make_node("Split", ["ff_proj", "ff_halves"], ["ff_a", "ff_gate"], axis=-1),
              *_gelu("ff_gate", "gelu"),  # GEGLU: a * GELU(gate)
              helper.make_node("Mul", ["ff_a", "gelu"], ["geglu"]),
              helper.make_node("MatMul", ["geglu", "ff_w2"], ["ff_down"]),
              helper.make_node("Add", ["ff_down", "ff_b2"], ["ff_out"]),
              helper.make_node("Add", ["ff_out", "t2"], ["t3"]),
              helper.make_node("Reshape", ["t3", "image_nhwc"], ["back_nhwc"]),
              helper.make_node("Transpose", ["back_nhwc"], ["back"], perm=[0, 3, 1, 2]),
              helper.make_node("Conv", ["back", "proj_out_w", "proj_out_b"], ["proj_out"], kernel_shape=[1, 1]),
              helper.make_node("Add", ["proj_out", "x"], ["y"])]
    image = [batch, channels, size, size]
    graph = helper.make_graph(nodes, "unet_attention_block",
                              [helper.make_tensor_value_info("x", elem, image),
                               helper.make_tensor_value_info("context", elem, [batch, context, context_dim])],
                              [helper.make_tensor_value_info("y", elem, image)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resnet50(batch: int = 8, size: int = 224, classes: int = 1000, seed: int = 7, dtype=np.float16):
    """ResNet-50 (torchvision's v1.5: the stride on the 3x3 convolution) as torch exports it in
    eval mode: batch norms folded into the convolutions' weights and biases, NCHW. The 7x7 stem,
    a 3x3 max pool, bottleneck stages of 3, 4, 6 and 3 blocks (widths 64 to 512, expansion 4, a
    projection shortcut on each stage's first block), global average pooling, a 1000-way Gemm.
    He-scaled weights, each block's last convolution scaled down so activations stay within f16."""
    return _resnet("resnet50", (3, 4, 6, 3), True, batch, size, classes, seed, dtype)


def resnet_basic(blocks=(2, 2, 2, 2), batch: int = 8, size: int = 224, classes: int = 1000, seed: int = 18,
                 dtype=np.float16, name: str = "resnet18"):
    """ResNet-18 (blocks 2, 2, 2, 2) or ResNet-34 (3, 4, 6, 3), torchvision's basic blocks as torch
    exports them in eval mode: two 3x3 convolutions per block (batch norms folded), a 1x1
    projection with stride 2 on each later stage's first block, the 7x7 stem and max pool, global
    average pooling and a Gemm. Not used to fit anything: an instance for held-out checks."""
    return _resnet(name, blocks, False, batch, size, classes, seed, dtype)


def _resnet(name: str, blocks, bottleneck: bool, batch: int, size: int, classes: int, seed: int, dtype):
    """A ResNet of `blocks` per stage, bottleneck (1x1, 3x3, 1x1 expanded 4x) or basic (3x3, 3x3)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits, nodes = [], []

    def conv(x: str, name: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True, gain: float = 1.0):
        inits.extend([_init(rng, f"{name}_w", (cout, cin, k, k), gain * np.sqrt(2.0 / (cin * k * k)), dtype),
                      _init(rng, f"{name}_b", (cout,), 0.01, dtype)])
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c" if relu else name],
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [f"{name}_c"], [name]))
        return name

    x = conv("image", "stem", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", 64
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512)), 1):
        out = 4 * width if bottleneck else width
        for block in range(count):
            block_name, stride = f"s{stage}b{block}", 2 if block == 0 and stage > 1 else 1
            if bottleneck:
                h = conv(x, f"{block_name}_1", cin, width, 1)
                h = conv(h, f"{block_name}_2", width, width, 3, stride)
                h = conv(h, f"{block_name}_3", width, out, 1, relu=False, gain=0.2)
            else:
                h = conv(x, f"{block_name}_1", cin, width, 3, stride)
                h = conv(h, f"{block_name}_2", width, out, 3, relu=False, gain=0.2)
            shortcut = (conv(x, f"{block_name}_down", cin, out, 1, stride, relu=False) if cin != out or stride > 1
                        else x)
            nodes += [helper.make_node("Add", [h, shortcut], [f"{block_name}_sum"]),
                      helper.make_node("Relu", [f"{block_name}_sum"], [f"{block_name}_out"])]
            x, cin = f"{block_name}_out", out
    inits += [_init(rng, "fc_w", (classes, cin), 1.0 / np.sqrt(cin), dtype), _init(rng, "fc_b", (classes,), 0.01, dtype)]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pooled"]),
              helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("image", elem, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("logits", elem, [batch, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def write_models(out: Path, large: bool = True, only: tuple[str, ...] = ()) -> list[Path]:
    """Every model above into OUT (`only`: those named); LARGE=False leaves out ResNet-50 (51 MB
    of weights)."""
    import onnx

    heavy = (("resnet50_f16_b8", resnet50), ("resnet18_f16_b8", resnet_basic)) if large else ()

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in (("bert_layer", lambda: bert_layer()), ("bert_base_layer", lambda: bert_layer(384, 768, 12, 3072)),
                        ("cnn_b1", lambda: small_cnn(1)), ("cnn_b4", lambda: small_cnn(4)), ("cnn_b4_224", lambda: small_cnn(4, 224)),
                        ("bert_base_layer_f16_1024", lambda: bert_layer(1024, 768, 12, 3072, dtype=np.float16)),
                        ("bert_large_layer_f16_2048", lambda: bert_layer(2048, 1024, 16, 4096, dtype=np.float16)),
                        ("vit_large_layer_f16", lambda: vit_layer()), ("llama_block_f16_2048", lambda: llama_block()),
                        ("gqa_block_f16_1024", lambda: gqa_block()),
                        ("gqa_block_32x8_f16_1024", lambda: gqa_block(1024, 2048, 32, 8, 8192, seed=4)),
                        ("unet_resnet_block_f16", lambda: unet_resnet_block()),
                        ("unet_attention_block_f16", lambda: unet_attention_block()),
                        # Held out (not run on a GPU when the tuner's choices were made): SD 1.x's
                        # 8 heads of 40 and CLIP-L's 768-wide text context; a block that widens
                        # 320 -> 640 channels through a 1x1 shortcut, as a UNet level's first does.
                        ("unet_attention_block_sd15_f16", lambda: unet_attention_block(heads=8, context_dim=768)),
                        ("unet_resnet_block_widen_f16", lambda: unet_resnet_block(channels=320, out_channels=640, size=32)),
                        # SDXL's 640-channel attention at 32x32 (10 heads of 64, a 2048-wide
                        # context) and a 1280-channel block at 16x16, batch 1 (a UNet's deepest level).
                        ("unet_attention_block_sdxl_f16", lambda: unet_attention_block(channels=640, size=32, heads=10, context_dim=2048)),
                        ("unet_resnet_block_1280_b1_f16", lambda: unet_resnet_block(batch=1, channels=1280, size=16)),
                        ("unet_sampling_block_f16", lambda: unet_sampling_block())
                        ) + heavy:
        if only and name not in only:
            continue
        model = make()
        onnx.checker.check_model(model)
        path = out / f"{name}.onnx"
        onnx.save(model, path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("onnx-models"))
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="write only this model (repeat for more; e.g. bert_base_layer); default: all (about 600 MB)")
    args = parser.parse_args()
    paths = write_models(args.out, only=tuple(args.only))
    if args.only and len(paths) < len(set(args.only)):
        parser.error(f"unknown model name among {', '.join(args.only)}")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
