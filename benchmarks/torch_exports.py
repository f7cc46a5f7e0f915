"""Real exports: modules from transformers, torchvision and timm (random weights) exported by
`torch.onnx.export(model, args, path, dynamo=True)` with the exporter's defaults, and the same
module timed by torch eager and torch.compile on the same GPU (issue 58). Runs where torch and
those libraries are installed (the GPU machine); the tuner never imports this.

    python benchmarks/torch_exports.py --out DIR [--size tiny|real] [--family NAME ...] [--time]
        [--rounds 6] [--calls 20] [--dtype f16|f32]

For each family it writes DIR/NAME/model.onnx (external data beside it where the exporter puts
it there), DIR/NAME/input0.npy ... (the arguments, in order), DIR/NAME/torch_output0.npy (eager's
first output, for checking IREE's; where that output hardly depends on the input, the batch norms
are first given the statistics of random inputs, and torch.json records how much it depends:
`input_sensitivity`), and with --time DIR/NAME/torch.json: the kernel time per
call (the sum of CUDA kernel durations in one call, read by CUPTI through torch.profiler) and the
wall time per call of torch eager and of torch.compile, interleaved round by round.

`tiny` builds each family with a few channels and tokens (the same ops, the exporter's same
graph structure): test fixtures that compile in seconds on a CPU. `real` builds the sizes the
issue names (a Llama decoder layer at 1024 tokens, ConvNeXt-T and Swin-T at batch 8, ...).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np


def _llama(size: str, qwen: bool = False):
    from transformers import LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model

    if size == "tiny":
        dims = dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                    vocab_size=128)
        tokens = 16
    elif qwen:  # Qwen2-0.5B's block widths
        dims = dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                    vocab_size=32000)
        tokens = 512
    else:  # TinyLlama-1.1B's block widths (the Llama layer)
        dims = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                    vocab_size=32000)
        tokens = 1024
    config = (Qwen2Config if qwen else LlamaConfig)(num_hidden_layers=1, max_position_embeddings=4096, use_cache=False,
                                                    **dims)
    model = (Qwen2Model if qwen else LlamaModel)(config)
    import torch
    ids = torch.randint(0, dims["vocab_size"], (1, tokens))
    return model, (ids,)


def _bert(size: str):
    import torch
    from transformers import BertConfig, BertModel

    if size == "tiny":
        config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            vocab_size=128)
        tokens = 16
    else:
        config = BertConfig(num_hidden_layers=2)
        tokens = 512
    model = BertModel(config, add_pooling_layer=False)
    ids = torch.randint(0, config.vocab_size, (1, tokens))
    return model, (ids,)


def _deberta(size: str):
    """DeBERTa-v3's disentangled attention (relative positions in 256 log buckets, content-to-position
    and position-to-content terms added to the scores, heads flattened into the batch): two layers
    of deberta-v3-base's widths at 512 tokens, or tiny ones."""
    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    v3 = dict(relative_attention=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
              position_biased_input=False)
    if size == "tiny":
        config = DebertaV2Config(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                                 vocab_size=128, position_buckets=8, max_relative_positions=16, **v3)
        tokens = 16
    else:
        config = DebertaV2Config(hidden_size=768, num_hidden_layers=2, num_attention_heads=12, intermediate_size=3072,
                                 vocab_size=1024, position_buckets=256, max_relative_positions=512, **v3)
        tokens = 512
    return DebertaV2Model(config), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _vit(size: str):
    import torch
    from transformers import ViTConfig, ViTModel

    if size == "tiny":
        config, batch = ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                                  image_size=32, patch_size=8), 2
    else:
        config, batch = ViTConfig(num_hidden_layers=4), 8
    model = ViTModel(config, add_pooling_layer=False)
    return model, (torch.randn(batch, 3, config.image_size, config.image_size),)


def _convnext(size: str):
    import torch
    from torchvision.models import convnext_tiny
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    if size == "tiny":
        model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)
        return model, (torch.randn(2, 3, 32, 32),)
    return convnext_tiny(), (torch.randn(8, 3, 224, 224),)


def _swin(size: str):
    import torch
    from torchvision.models import swin_t
    from torchvision.models.swin_transformer import SwinTransformer

    if size == "tiny":
        model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=[4, 4],
                                num_classes=10)
        return model, (torch.randn(2, 3, 32, 32),)
    return swin_t(), (torch.randn(8, 3, 224, 224),)


def _resnet(size: str):
    import torch
    from torchvision.models import resnet50
    from torchvision.models.resnet import BasicBlock, ResNet

    if size == "tiny":
        return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10), (torch.randn(2, 3, 32, 32),)
    return resnet50(), (torch.randn(8, 3, 224, 224),)


def _mobilenet(size: str):
    import timm
    import torch

    if size == "tiny":
        return timm.create_model("mobilenetv3_small_050", num_classes=10), (torch.randn(2, 3, 32, 32),)
    return timm.create_model("mobilenetv3_large_100"), (torch.randn(8, 3, 224, 224),)


def _whisper(size: str):
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    if size == "tiny":
        config = WhisperConfig(d_model=64, encoder_layers=1, encoder_attention_heads=4, encoder_ffn_dim=128,
                               num_mel_bins=16, max_source_positions=16)
    else:  # whisper-base's encoder widths, two layers
        config = WhisperConfig(d_model=512, encoder_layers=2, encoder_attention_heads=8, encoder_ffn_dim=2048,
                               num_mel_bins=80, max_source_positions=1500)
    model = WhisperEncoder(config)
    return model, (torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions),)


def _gpt2(size: str):
    import torch
    from transformers import GPT2Config, GPT2Model

    if size == "tiny":
        config, tokens = GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=128, n_positions=64), 16
    else:  # GPT-2 small's widths, two layers
        config, tokens = GPT2Config(n_layer=2), 1024
    return GPT2Model(config), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _efficientnet(size: str):
    import timm
    import torch

    if size == "tiny":
        return timm.create_model("efficientnet_b0", num_classes=10), (torch.randn(2, 3, 32, 32),)  # its full widths
    return timm.create_model("efficientnet_b0"), (torch.randn(8, 3, 224, 224),)


def _wav2vec2(size: str):
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    if size == "tiny":
        config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                                conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
        samples = 1600
    else:  # wav2vec2-base's widths, two layers, one second of 16 kHz audio
        config, samples = Wav2Vec2Config(num_hidden_layers=2), 16000
    return Wav2Vec2Model(config), (torch.randn(1, samples),)


def _densenet(size: str):
    import torch
    from torchvision.models import DenseNet, densenet121

    if size == "tiny":
        return DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10), \
            (torch.randn(2, 3, 32, 32),)
    return densenet121(), (torch.randn(8, 3, 224, 224),)


def _regnet(size: str):
    import torch
    from torchvision.models import regnet_y_400mf, regnet_y_800mf

    if size == "tiny":
        return regnet_y_400mf(num_classes=10), (torch.randn(2, 3, 32, 32),)  # its full widths
    return regnet_y_800mf(), (torch.randn(8, 3, 224, 224),)


def _mixer(size: str):
    import timm
    import torch

    # no classifier: timm initializes Mixer's head to zeros, which made every build's output (and
    # its check against torch) zeros; the pooled features are checked instead
    if size == "tiny":
        return timm.create_model("mixer_s32_224", num_classes=0, img_size=64), (torch.randn(2, 3, 64, 64),)
    return timm.create_model("mixer_b16_224", num_classes=0), (torch.randn(8, 3, 224, 224),)


def _googlenet(size: str):
    import torch
    from torchvision.models import GoogLeNet

    # aux_logits off (eval mode drops them anyway); transform_input off (a preprocessing affine)
    model = GoogLeNet(num_classes=10 if size == "tiny" else 1000, aux_logits=False, transform_input=False,
                      init_weights=True)
    return model, (torch.randn(2 if size == "tiny" else 8, 3, 64 if size == "tiny" else 224,
                               64 if size == "tiny" else 224),)


def _shufflenet(size: str):
    import torch
    from torchvision.models import shufflenet_v2_x0_5, shufflenet_v2_x1_0

    if size == "tiny":
        return shufflenet_v2_x0_5(num_classes=10), (torch.randn(2, 3, 32, 32),)
    return shufflenet_v2_x1_0(), (torch.randn(8, 3, 224, 224),)


def _resnext(size: str):
    import torch
    from torchvision.models import resnext50_32x4d
    from torchvision.models.resnet import Bottleneck, ResNet

    if size == "tiny":
        return ResNet(Bottleneck, [1, 1, 1, 1], groups=8, width_per_group=4, num_classes=10), \
            (torch.randn(2, 3, 32, 32),)
    return resnext50_32x4d(), (torch.randn(8, 3, 224, 224),)


def _swinv2(size: str):
    import torch
    from torchvision.models import swin_v2_t
    from torchvision.models.swin_transformer import SwinTransformer, SwinTransformerBlockV2, PatchMergingV2

    if size == "tiny":
        model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=[4, 4],
                                num_classes=10, block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)
        return model, (torch.randn(2, 3, 32, 32),)
    return swin_v2_t(), (torch.randn(8, 3, 256, 256),)


def _distilbert(size: str):
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    if size == "tiny":
        config, tokens = DistilBertConfig(dim=64, n_layers=1, n_heads=4, hidden_dim=128, vocab_size=128), 16
    else:  # distilbert-base's widths, its six layers, 512 tokens
        config, tokens = DistilBertConfig(), 512
    return DistilBertModel(config), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _mistral(size: str):
    import torch
    from transformers import MistralConfig, MistralModel

    if size == "tiny":
        config, tokens = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=128), 16
    else:  # Mistral-7B's widths (4096, 32/8 heads, MLP 14336), one layer, 512 tokens
        config, tokens = MistralConfig(num_hidden_layers=1, vocab_size=1024), 512
    return MistralModel(config), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _phi(size: str):
    import torch
    from transformers import PhiConfig, PhiModel

    if size == "tiny":
        config, tokens = PhiConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                   vocab_size=128), 16
    else:  # Phi-2's widths (2560, 32 heads, MLP 10240, rotary on 32 of 80 head dims), one layer, 512 tokens
        config, tokens = PhiConfig(hidden_size=2560, intermediate_size=10240, num_hidden_layers=1,
                                   num_attention_heads=32, partial_rotary_factor=0.4, vocab_size=1024), 512
    return PhiModel(config), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _decoder(kind: str, size: str, tiny: dict, real: dict, tokens: int = 512):
    """One layer of a transformers decoder (`kind`: its config and model class, "Falcon" for
    FalconConfig and FalconModel), `tiny` or `real` widths, vocabulary 1024 at the real size."""
    import torch
    import transformers

    config = getattr(transformers, f"{kind}Config")(**(tiny if size == "tiny" else {**real, "vocab_size": 1024}))
    n = 16 if size == "tiny" else tokens
    return getattr(transformers, f"{kind}Model")(config), (torch.randint(0, config.vocab_size, (1, n)),)


def _vision(kind: str, size: str, tiny: dict, image: int):
    """A transformers vision model (`kind`: "Dinov2" for Dinov2Config and Dinov2Model) with
    `tiny` widths, or its default (base) config at batch 8 of `image` pixels."""
    import torch
    import transformers

    config = getattr(transformers, f"{kind}Config")(**(tiny if size == "tiny" else {}))
    batch, pixels = (2, 32) if size == "tiny" else (8, image)
    return getattr(transformers, f"{kind}Model")(config), (torch.randn(batch, 3, pixels, pixels),)


def _timm(name: str, size: str, image: int):
    import timm
    import torch

    batch, pixels = (2, 64) if size == "tiny" else (8, image)
    return timm.create_model(name, pretrained=False), (torch.randn(batch, 3, pixels, pixels),)


_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, vocab_size=128)


FAMILIES: dict[str, Callable] = {
    "llama": _llama,
    "qwen2": lambda size: _llama(size, qwen=True),
    "bert": _bert,
    "vit": _vit,
    "convnext": _convnext,
    "swin": _swin,
    "resnet": _resnet,
    "mobilenet": _mobilenet,
    "whisper": _whisper,
    # GPT-2's Conv1D linears are onnx.Gemm, EfficientNet is depthwise and squeeze-excitation,
    # wav2vec2 has 1-D and grouped convolutions.
    "gpt2": _gpt2,
    "efficientnet": _efficientnet,
    "wav2vec2": _wav2vec2,
    # Added 2026-11-29 (twenty-second session) as held-out checks of the external kernels and the
    # rewrites that feed them: DenseNet's concatenations and 1x1 bottlenecks, RegNetY's grouped
    # convolutions and squeeze-excitation, MLP-Mixer's token-mixing linears (on transposed activations).
    "densenet": _densenet,
    "regnet": _regnet,
    "mixer": _mixer,
    # Added 2026-11-29 (twenty-fifth session), held out from every rule and kernel written before:
    # GoogLeNet's Inception concatenations of four branches, ShuffleNetV2's channel shuffle and
    # split, ResNeXt's grouped 3x3 convolutions, Swin-V2's cosine attention and log-spaced position
    # bias, DistilBERT, a Mistral layer (grouped-query attention 32/8, MLP 14336), a Phi-2 layer
    # (rotary on part of each head, attention and MLP side by side). (T5's encoder did not export:
    # torch 2.13's decomposition refused a view of its relative position bias.)
    "googlenet": _googlenet,
    "shufflenet": _shufflenet,
    "resnext": _resnext,
    "swinv2": _swinv2,
    "distilbert": _distilbert,
    "mistral": _mistral,
    "phi": _phi,
    # Added 2026-11-30 (twenty-seventh session): families whose tiny exports were swept on the CPU
    # (benchmarks/rewrite_sweep.py: OPT's layer norms of two ranks, Falcon's multi-query attention,
    # GPT-J's f32 scores were faults or gaps found so) and never timed or tuned: one decoder
    # layer each at 512 tokens (OPT-1.3B's, Falcon-7B's, GPT-J-6B's, Gemma-2B's widths; Qwen3-0.6B's
    # with its per-head RMS norms), DINOv2-base and ConvNeXt-V2 (base widths) at batch 8, timm's
    # MobileNetV4-conv-small at batch 8.
    "opt": lambda size: _decoder("OPT", size, dict(_SMALL, ffn_dim=128, word_embed_proj_dim=64),
                                 dict(hidden_size=2048, ffn_dim=8192, num_hidden_layers=1, num_attention_heads=32,
                                      word_embed_proj_dim=2048)),
    "falcon": lambda size: _decoder("Falcon", size, dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                                         vocab_size=128),
                                    dict(hidden_size=4544, num_hidden_layers=1, num_attention_heads=71)),
    "gptj": lambda size: _decoder("GPTJ", size, dict(n_embd=64, n_layer=1, n_head=4, vocab_size=128, rotary_dim=8),
                                  dict(n_embd=4096, n_layer=1, n_head=16, rotary_dim=64)),
    "gemma": lambda size: _decoder("Gemma", size, dict(_SMALL, num_key_value_heads=1, head_dim=16),
                                   dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=1,
                                        num_attention_heads=8, num_key_value_heads=1, head_dim=256)),
    "qwen3": lambda size: _decoder("Qwen3", size, dict(_SMALL, num_key_value_heads=2, head_dim=16),
                                   dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=1,
                                        num_attention_heads=16, num_key_value_heads=8, head_dim=128)),
    "dinov2": lambda size: _vision("Dinov2", size, dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                                        image_size=32, patch_size=8, mlp_ratio=2), 224),
    "convnextv2": lambda size: _vision("ConvNextV2", size, dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
                                       224),
    "mobilenetv4": lambda size: _timm("mobilenetv4_conv_small", size, 224),
    # Added 2026-11-30 (twenty-eighth session): BLOOM's ALiBi attention (scores over flattened
    # heads, the bias added there, then the causal mask per head), raised since; BLOOM-1b1's
    # widths at the real size (16 heads of 96).
    "bloom": lambda size: _decoder("Bloom", size, dict(hidden_size=64, n_layer=1, n_head=4, vocab_size=128),
                                   dict(hidden_size=1536, n_layer=1, n_head=16)),
    # Added 2026-11-30 (twenty-ninth session): DeBERTa-v3's disentangled attention, its scores over
    # heads flattened into the batch with the relative-position terms added there.
    "deberta": _deberta,
}


class _FirstOutput:
    """The module's first tensor output, so that export and timing see one tensor (transformers
    modules return a ModelOutput)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(*args)
                if isinstance(out, torch.Tensor):
                    return out
                return out[0]

        return Wrapped()


def _kernel_and_wall(torch, fn, args, calls: int) -> tuple[float, float]:
    """One round: the summed CUDA kernel time per call (CUPTI, torch.profiler) and the wall time
    per call (synchronized), in ms."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) * 1e3 / calls
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    kernel = sum(e.device_time_total for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / calls
    return kernel, wall


# Below this, the output hardly depends on the input (max change over max value, another input of
# the same kind): a build that ignores its input would pass the check against torch's result.
# GoogLeNet with torchvision's init (truncated-normal weights of std 0.01) computes its fc bias
# alone (1.8e-12), ShuffleNetV2 1.5e-4: their activations vanish through batch norms whose
# statistics are those of no data.
SENSITIVE = 1e-2


def _another(torch, x):
    """Another input of x's kind: normal floats, or integers drawn from x's own range (token ids
    over the ids it holds); a boolean or constant input (a mask of ones) as it is."""
    if x.is_floating_point():
        return torch.randn_like(x)
    if x.dtype == torch.bool or x.numel() < 2 or int(x.min()) == int(x.max()):
        return x
    return torch.randint_like(x, int(x.min()), int(x.max()) + 1)


def _sensitivity(torch, model, inputs) -> float:
    """How much the output moves under another input of the same kind (relative to its largest value)."""
    other = tuple(_another(torch, x) for x in inputs)
    with torch.inference_mode():
        a, b = model(*inputs).float(), model(*other).float()
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))


def _calibrate_batch_norms(torch, model, inputs, passes: int = 8) -> bool:
    """Give the batch norms the statistics of the activations they see (random inputs of the
    model's kind, `passes` batches averaged), as training would: False where it has none."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return False
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the passes
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(*(torch.randn_like(x) if x.is_floating_point() else x for x in inputs))
    model.eval()
    return True


def _time(torch, model, args, rounds: int, calls: int) -> dict:
    compiled = torch.compile(model)
    runners = {"eager": model, "compile": compiled}
    with torch.inference_mode():
        for fn in runners.values():  # warm-up, and torch.compile's compilation
            for _ in range(3):
                fn(*args)
        samples = {name: [] for name in runners}
        for r in range(rounds):  # interleaved, the order rotated each round
            for name in (list(runners) if r % 2 == 0 else list(runners)[::-1]):
                samples[name].append(_kernel_and_wall(torch, runners[name], args, calls))
    return {name: {"kernel_ms": statistics.median(k for k, _ in s), "wall_ms": statistics.median(w for _, w in s),
                   "kernel_rounds": [k for k, _ in s]} for name, s in samples.items()}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "real"), default="real")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: every family")
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16")
    parser.add_argument("--time", action="store_true", help="time torch eager and torch.compile (needs a GPU)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if args.dtype == "f16" else torch.float32
    torch.manual_seed(0)
    for name in args.family or sorted(FAMILIES):
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            module, inputs = FAMILIES[name](args.size)
            model = _FirstOutput(module).eval().to(device=device, dtype=dtype)
            inputs = tuple(x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in inputs)
            sensitivity = _sensitivity(torch, model, inputs)
            calibrated = sensitivity < SENSITIVE and _calibrate_batch_norms(torch, model, inputs)
            if calibrated:
                sensitivity = _sensitivity(torch, model, inputs)
            if sensitivity < SENSITIVE:
                print(f"{name}: its output hardly depends on its input ({sensitivity:.1e}): a check against "
                      "it shows little", file=sys.stderr, flush=True)
            with torch.inference_mode():
                reference = model(*inputs)
            for i, x in enumerate(inputs):
                np.save(folder / f"input{i}.npy", x.cpu().numpy())
            np.save(folder / "torch_output0.npy", reference.float().cpu().numpy())
            start = time.perf_counter()
            program = torch.onnx.export(model, inputs, dynamo=True)
            program.save(str(folder / "model.onnx"))
            record = {"family": name, "size": args.size, "dtype": args.dtype, "torch": torch.__version__,
                      "export_s": round(time.perf_counter() - start, 1),
                      "inputs": [list(x.shape) for x in inputs], "output": list(reference.shape),
                      "input_sensitivity": float(f"{sensitivity:.2e}"), "batch_norms_calibrated": calibrated}
            if args.time and device == "cuda":
                record["device"] = torch.cuda.get_device_name()
                record.update(_time(torch, model, inputs, args.rounds, args.calls))
            (folder / "torch.json").write_text(json.dumps(record, indent=1))
            print(name, json.dumps({k: v for k, v in record.items() if k not in ("eager", "compile")}),
                  *(f"{k} {record[k]['kernel_ms']:.3f} ms kernels {record[k]['wall_ms']:.3f} ms wall"
                    for k in ("eager", "compile") if k in record), flush=True)
        except Exception as error:  # one family's failure is reported, the others still built
            print(f"{name}: FAILED {type(error).__name__}: {str(error)[:2000]}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
