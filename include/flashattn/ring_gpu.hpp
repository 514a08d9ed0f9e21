// Ring attention blocks on the GPU through host staging (target flashattn::ring, when both MPI and
// the CUDA backend are built). The ring's shards, messages and accumulators stay in host memory;
// each block's views are copied to device buffers, computed by flashattn::gpu on `stream`, and its
// outputs copied back. f16/bf16 and the GPU's head dims only (gpu::unsupported_reason). A CUDA-aware
// transport that keeps blocks on the device is future work: this one pays two PCIe copies per block.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flashattn/ring.hpp"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace flashattn::ring {

class GpuStaging final : public BlockBackend {
 public:
  // deterministic: the GPU backward without dQ atomics (the ring's bits then depend only on the
  // rank count, as with the CPU).
  explicit GpuStaging(cudaStream_t stream = nullptr, bool deterministic = true);
  ~GpuStaging() override;
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  std::string unsupported(const AttentionArgs& a) const override;
  void forward(const ForwardArgs& block) override;
  void backward(const BackwardArgs& block) override;

 private:
  struct Buffer {
    void* device = nullptr;
    size_t bytes = 0;
  };
  // Returns a device copy of the memory `host` spans (bytes), in buffer slot i (grown as needed).
  void* stage(size_t i, const void* host, size_t bytes);
  void fetch(size_t i, void* host, size_t bytes);  // enqueues the copy of slot i back to host
  void finish();                                   // waits for the stream (the fetches)
  // Returns the view t re-pointed at a device copy of its memory in slot i.
  template <class View>
  View staged(size_t i, View t);
  // Stages what both passes read, q, k, v and the ALiBi slopes, in slots 0-3 of d.
  void stage_inputs(AttentionArgs& d, const AttentionArgs& a);
  cudaStream_t stream_;
  bool deterministic_;
  std::vector<Buffer> slots_;
};

}  // namespace flashattn::ring
