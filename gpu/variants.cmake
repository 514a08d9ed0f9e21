# The one table of compiled GPU variants: head dims x dtypes. Every (head dim, dtype) gets one
# translation unit per pass (forward, backward, dq), generated from instance.cu.in, and one entry in
# the generated variants.inc that the runtime dispatch (api.cu) expands. Tile shapes per head dim
# live in traits.cuh.
set(FLASHATTN_GPU_SUPPORTED_HEAD_DIMS 32 64 96 128 256)
set(FLASHATTN_GPU_DTYPES f16 bf16)
set(FLASHATTN_GPU_CUDA_TYPE_f16 __half)
set(FLASHATTN_GPU_CUDA_TYPE_bf16 __nv_bfloat16)
# pass -> parameter struct of its launcher (launch.hpp)
set(FLASHATTN_GPU_PASSES forward backward dq)
set(FLASHATTN_GPU_PARAMS_forward ForwardParams)
set(FLASHATTN_GPU_PARAMS_backward BackwardParams)
set(FLASHATTN_GPU_PARAMS_dq BackwardParams)
