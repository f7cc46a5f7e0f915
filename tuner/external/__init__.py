"""Kernels from outside IREE's codegen, substituted for a model's dispatches.

IREE 3.13 emits sm_80 PTX: its kernels use `mma.sync`, and Hopper's `wgmma` (what cuBLAS and
torch use on an H100 or H200) is out of its reach (issue 59). A kernel compiled elsewhere (here
by Triton, `tuner.external.triton_gemm`) enters the program as a `hal.dispatch.extern` whose
object is the kernel's PTX (`tuner.rewrite.external_gemm`); IREE compiles everything around it
and the CUDA driver compiles the PTX at load.

`gemm_kernel` holds what both sides share: the problem, the tiles, and the kernel as IREE's CUDA
runtime launches it (bindings as pointer parameters in order, the grid and block from the
dispatch, the dynamic shared memory from `workgroup_local_memory`)."""
