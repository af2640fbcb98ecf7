// Generation: batched prefill/decode over per-sequence KV caches, sampling, and a prefix cache
// of finished sequences' KV. One Generator per model; its calls are serialised by the caller
// (the TypeScript scheduler runs one step at a time and admits/removes sequences between steps)
// and, defensively, by Generator::mu.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "model.h"

namespace anvil {

struct SamplingConfig {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // 1 = disabled
  int top_k = 0;             // 0 = disabled
  uint64_t seed = 0;
  int top_logprobs = 0;      // 0..kMaxTopLogprobs most likely alternatives to report per token
};

// OpenAI allows top_logprobs up to 20.
constexpr int kMaxTopLogprobs = 20;

// Per-sequence allowed-token masks of one step (constrained decoding): one entry per sequence of
// the step, nullptr = unconstrained, else ceil(V / 32) words where bit (id & 31) of word id >> 5
// allows id. Empty = no sequence is constrained.
using StepMasks = std::vector<const uint32_t*>;

// KV of one sequence: per layer [T, KVH*D] for K (after RoPE) and V, T = cached positions.
struct KvCache {
  std::vector<std::vector<float>> k, v;  // [L][cap * KVH * D]
  int len = 0;
  void reserve(int L, int row, int cap);
};

struct Sequence {
  std::vector<int32_t> tokens;  // every token of the sequence; tokens[0..kv.len) have KV
  KvCache kv;
  SamplingConfig sampling;
  uint64_t rng[4];
};

struct StepOutput {
  int32_t token;
  float logprob;      // under the processed (sampled-from) distribution; raw logprob when greedy
  float raw_logprob;  // under the policy itself (softmax of the raw logits)
  // The sampling config's top_logprobs most likely tokens under the policy itself (raw logits,
  // as vLLM's default raw logprobs), most likely first; n_top of the arrays are filled.
  int n_top = 0;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// What the addon drives: the CPU Generator below and, in the CUDA build, cuda::GpuGenerator
// (cuda/generate_cuda.h, paged KV cache on the device) implement the same contract with the same
// counters. Calls are serialised by the caller holding `mu` (step() also holds model->mu).
class GeneratorBase {
 public:
  GeneratorBase(std::shared_ptr<Model> model, int max_positions, double cache_bytes);
  virtual ~GeneratorBase() = default;

  // Validates the prompt, reuses the longest cached prefix; returns the number of reused tokens.
  virtual int add(int64_t id, const int32_t* prompt, int n, const SamplingConfig& s) = 0;
  // Drops a sequence; with keep = true its KV goes into the prefix cache.
  virtual void remove(int64_t id, bool keep) = 0;
  // Runs one batched step for the given sequences (prefill of pending tokens + sampling of one
  // token each); the sampled token is appended to each sequence. `masks` (empty, or one entry per
  // id) restricts each sequence's draw to its allowed ids (see sample_token).
  virtual void step(const std::vector<int64_t>& ids, std::vector<StepOutput>& out, const StepMasks& masks = {}) = 0;
  virtual void clear_cache() = 0;

  std::shared_ptr<Model> model;
  const int max_positions;
  const double cache_budget;
  // Counters are atomics so that stats() never waits for a step in flight (it runs on the event loop).
  std::atomic<int64_t> hit_tokens{0}, lookup_tokens{0};
  std::atomic<size_t> cache_bytes{0};
  std::atomic<int> entries{0}, active{0};
  std::mutex mu;
};

// Shared by both generators (generate.cc).
// Throws the errors add() reports for a bad prompt or bad sampling values.
void check_add_args(const ModelConfig& cfg, int max_positions, const int32_t* prompt, int n, const SamplingConfig& s);
// A sequence's xoshiro256** state from its seed (splitmix64).
void seed_rng(uint64_t seed, uint64_t rng[4]);
// Draws one token from raw logits l[V] (temperature, then top-k, then top-p, as vLLM); e and idx
// are scratch. Greedy (temperature 0) returns the argmax with the policy's logprob.
// With a mask (constrained decoding) only allowed ids are candidates: the distribution is the
// policy's restricted to them and renormalised, and temperature, top-k and top-p apply within it;
// `logprob` is the sampled id's log-prob under that constrained distribution (0 when one id is
// allowed; greedy: under the renormalised policy), `raw_logprob` stays the policy's own. Throws
// when the mask allows no id below V.
StepOutput sample_token(const float* l, int V, const SamplingConfig& s, uint64_t* rng, std::vector<float>& e,
                        std::vector<int>& idx, const uint32_t* mask = nullptr);
// out[b] = sample_token(logits[b, :], V, *cfg[b], rng[b], masks[b]) for b < B, rows in parallel (OpenMP).
void sample_rows(const float* logits, int B, int V, const SamplingConfig* const* cfg, uint64_t* const* rng,
                 std::vector<StepOutput>& out, const StepMasks& masks = {});

class Generator : public GeneratorBase {
 public:
  Generator(std::shared_ptr<Model> model, int max_positions, double cache_bytes);

  int add(int64_t id, const int32_t* prompt, int n, const SamplingConfig& s) override;
  void remove(int64_t id, bool keep) override;
  void step(const std::vector<int64_t>& ids, std::vector<StepOutput>& out, const StepMasks& masks = {}) override;
  void clear_cache() override;

 private:
  struct Entry {
    std::vector<int32_t> tokens;  // tokens whose KV is stored
    KvCache kv;
    size_t bytes = 0;
  };
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::list<Entry> cache_;  // front = most recently used
  std::vector<float> cos_t_, sin_t_;
  int rope_len_ = 0;
  void ensure_rope(int positions);
};

}  // namespace anvil
