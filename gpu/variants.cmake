# The one table of compiled GPU variants: head-dim pairs x dtypes. An entry is "D" (dv = d) or
# "DxDV" (query/key head dim D, value head dim DV). Every (pair, dtype) gets one translation unit per
# pass (forward, backward, dq; forward only for the pairs in FLASHATTN_GPU_FORWARD_ONLY), generated
# from instance.cu.in, and one entry in the generated variants.inc that the runtime dispatch
# (api.cu, emu/emu_api.cpp) expands. Tile shapes per pair live in traits.cuh.
set(FLASHATTN_GPU_SUPPORTED_HEAD_DIMS 32 64 96 128 256 192x128 576x512)
set(FLASHATTN_GPU_FORWARD_ONLY 576x512)  # MLA decoding: forward only
set(FLASHATTN_GPU_DTYPES f16 bf16)
set(FLASHATTN_GPU_CUDA_TYPE_f16 __half)
set(FLASHATTN_GPU_CUDA_TYPE_bf16 __nv_bfloat16)
# pass -> parameter struct of its launcher (launch.hpp)
set(FLASHATTN_GPU_PASSES forward backward dq)
set(FLASHATTN_GPU_PARAMS_forward ForwardParams)
set(FLASHATTN_GPU_PARAMS_backward BackwardParams)
set(FLASHATTN_GPU_PARAMS_dq BackwardParams)
