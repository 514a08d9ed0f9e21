"""flashattn: exact FlashAttention-style attention.

- flashattn.forward / flashattn.backward: the CPU backend (and the CUDA backend for CUDA torch
  tensors where it was built) on numpy arrays, torch tensors or any DLPack / buffer-protocol array,
  in place, every option of the C++ API;
- flashattn.torch.attention: a PyTorch custom op with autograd, a fake (meta) implementation and
  torch.compile support (import flashattn.torch; needs torch);
- flashattn.testing: the fp64 oracle, the tolerance rule (assert_close) and Hypothesis strategies
  with check_attention to test any attention implementation against them.

Bad arguments raise ValueError (flashattn::Error's message) or TypeError. docs/python.md.
"""
from ._core import BlockMask, Gradients, backward, block_mask_from_dense, forward
from ._flashattn import cpu_targets, has_gpu

__version__ = "0.1.0"
__all__ = ["forward", "backward", "Gradients", "BlockMask", "block_mask_from_dense", "has_gpu", "cpu_targets",
           "__version__"]
