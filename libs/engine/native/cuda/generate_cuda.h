// GPU generation (CUDA build): the contract of anvil::Generator (../generate.h) on a DeviceModel,
// with a paged KV cache and a block-hashed prefix cache on the device. Host-only header (no CUDA
// types) so that addon.cc compiles with the plain C++ compiler.
//
// KV cache: blocks of kKvBlock = 16 positions, each holding K and V of every layer (bf16), in
// device chunks allocated on demand (the first one sized for the prefix-cache budget plus room
// for active sequences, more when the active sequences need them). A sequence has a block table;
// blocks are reference counted (a cached block may be shared by several sequences).
//
// Prefix cache (as vLLM's automatic prefix caching): remove(id, keep = true) registers the
// sequence's FULL blocks under a hash chain (block i's key = hash(key of block i-1, its 16
// tokens)); add() reuses the longest chain of cached blocks that matches the prompt (at most
// prompt length - 1 tokens, as the CPU generator: the last prompt token always runs), so hits are
// whole blocks (multiples of 16 tokens, where the CPU generator reuses any common prefix).
// Unused cached blocks sit in an LRU list, evicted tail blocks first while the cached bytes
// exceed the budget or when blocks run out. Stats: prefixCacheBytes = cached blocks' bytes (bf16,
// all layers), prefixCacheEntries = cached blocks.
//
// A step runs the decoder on the device over every pending token of the batch (embedding, per
// layer RMSNorm -> QKV GEMM -> bias + RoPE -> K,V into the pages -> paged attention -> output
// projection + residual -> RMSNorm -> gate/up GEMM -> SwiGLU -> down GEMM + residual), the final
// norm and the fp32 (TF32) LM head for the last pending row of each sequence; the logits [B, V]
// come back to the host and the CPU generator's sampler (sample_token) draws each token, so
// sampling and logprob semantics (constrained decoding's masks included) are the CPU path's by
// construction.
//
// Weights: every step reads the DeviceModel's current fp32/bf16 weights, so an optimizer step is
// visible to the next generation step with no copy; in-flight sequences keep the KV their earlier
// steps computed with the old weights (exactly as with the CPU generator).
#pragma once

#include <memory>

#include "../generate.h"

namespace anvil {
namespace cuda {

class GpuGenerator : public GeneratorBase {
 public:
  // model->device must be set (the CUDA build's DeviceModel).
  GpuGenerator(std::shared_ptr<Model> model, int max_positions, double cache_bytes);
  ~GpuGenerator() override;

  int add(int64_t id, const int32_t* prompt, int n, const SamplingConfig& s) override;
  void remove(int64_t id, bool keep) override;
  // Call under model->mu (it uses the model's stream and GEMM handle).
  void step(const std::vector<int64_t>& ids, std::vector<StepOutput>& out, const StepMasks& masks = {}) override;
  void clear_cache() override;

  // Device bytes of the KV pool (all chunks) — for tests and benchmarks.
  size_t pool_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Decode throughput of the GPU generator on a random model (weights ~ N(0, 0.02)): `batch`
// sequences of `prompt_len` random tokens are prefilled in one step, then `steps` decode steps
// run (each: the device forward of `batch` rows, logits to the host, sampling at `temperature`;
// 0 = greedy); the first decode step is a warm-up, the other steps - 1 are timed.
struct DecodeBench {
  double prefill_seconds = 0;  // the first (prefill) step
  double decode_seconds = 0;   // the timed decode steps
  double tokens_per_second = 0;  // batch * timed steps / decode_seconds
  double step_ms = 0;          // decode_seconds / timed steps * 1000
  size_t kv_pool_bytes = 0;
};
DecodeBench bench_decode(const ModelConfig& cfg, int batch, int prompt_len, int steps, float temperature,
                         uint64_t seed);

}  // namespace cuda
}  // namespace anvil
