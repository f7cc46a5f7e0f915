"""Kernels from outside IREE's codegen, substituted for a model's dispatches.

IREE 3.13 emits sm_80 PTX: its kernels use `mma.sync`, and Hopper's `wgmma` (what cuBLAS and
torch use on an H100 or H200) is out of its reach (issue 59). A kernel compiled elsewhere (here
by Triton, `tuner.external.triton_gemm`) enters the program as a `hal.dispatch.extern` whose
object is the kernel's PTX (`tuner.rewrite.external_gemm`); IREE compiles everything around it
and the CUDA driver compiles the PTX at load.

`abi` is the kernel as IREE's CUDA runtime launches it (bindings as pointer parameters in order,
the grid and block from the dispatch, the dynamic shared memory from `workgroup_local_memory`);
`gemm_kernel`, `attention_kernel`, `depthwise_kernel`, `conv_kernel`, `layernorm_kernel` and
`reduction_kernel` the problems and their tiles (the GEMM's and the attention's as Z3 spaces,
constraints.wgmma's rules, ordered by `space.ranked`); `triton_build` Triton's compile for
sm_90a, brought to that ABI (a kernel that makes TMA descriptors given its global scratch as one
more binding); `triton_gemm`, `triton_attention`, `triton_depthwise`, `triton_conv`,
`triton_layernorm` and `triton_reduction` the kernels. The rewrites that put them in a program
are tuner.rewrite.external_gemm, external_attention, external_depthwise, external_conv,
external_layernorm and external_reduction."""
