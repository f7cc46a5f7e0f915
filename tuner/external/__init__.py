"""Kernels from outside IREE's codegen, substituted for a model's dispatches.

IREE 3.13 emits sm_80 PTX: its kernels use `mma.sync`, and Hopper's `wgmma` (what cuBLAS and
torch use on an H100 or H200) is out of its reach (issue 59). A kernel compiled elsewhere (here
by Triton, `tuner.external.triton_gemm`) enters the program as a `hal.dispatch.extern` whose
object is the kernel's PTX (`tuner.rewrite.external_gemm`); IREE compiles everything around it
and the CUDA driver compiles the PTX at load.

`abi` is the kernel as IREE's CUDA runtime launches it (bindings as pointer parameters in order,
the grid and block from the dispatch, the dynamic shared memory from `workgroup_local_memory`);
`gemm_kernel`, `attention_kernel`, `depthwise_kernel` and `conv_kernel` the problems and their
tiles; `triton_build` Triton's compile for sm_90a, brought to that ABI; `triton_gemm`,
`triton_attention`, `triton_depthwise` and `triton_conv` the kernels. The rewrites that put them
in a program are tuner.rewrite.external_gemm, external_attention, external_depthwise and
external_conv."""
