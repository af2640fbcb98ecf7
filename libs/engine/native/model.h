// The Llama / Qwen2 decoder: configuration, the parameter layout (Hugging Face tensor names),
// the per-model arenas and the per-forward activation arena.
#pragma once

#include <memory>
#include <mutex>
#include <algorithm>
#include <string>
#include <vector>

#include "common.h"
#include "kernels.h"
#include "tree.h"

namespace anvil {

// The CUDA build's device side (cuda/device_model.h); null members in the CPU build.
namespace cuda {
class DeviceModel;
struct DeviceActs;
}  // namespace cuda

class LoraState;  // lora.h
struct LoraConfig;
struct LoraSite;

struct ModelConfig {
  int vocab = 0;       // V
  int hidden = 0;      // C
  int inter = 0;       // F
  int layers = 0;      // L
  int heads = 0;       // H
  int kv_heads = 0;    // KVH (H % KVH == 0)
  int head_dim = 0;    // D (even)
  float eps = 1e-6f;   // rms_norm_eps
  bool qkv_bias = false;
  bool tied = false;
  std::vector<float> inv_freq;  // [D/2] RoPE inverse frequencies, rope_scaling already applied
  float rope_attention_scaling = 1.0f;  // multiplies cos and sin (1 for default/linear/llama3)
};

// One tensor of the checkpoint: its transformers name, shape and place in the arenas.
struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats from the start of the arena
  size_t numel = 0;
};

// Pointers into one arena (parameters or gradients; both share the layout).
// q, k, v (and their biases) are adjacent so one GEMM computes [q | k | v]; likewise gate and up.
struct LayerPtrs {
  float* ln1;    // [C]
  float* wqkv;   // [QKV, C] = q_proj [H*D, C] ; k_proj [KVH*D, C] ; v_proj [KVH*D, C]
  float* bqkv;   // [QKV] or null
  float* wo;     // [C, H*D]
  float* ln2;    // [C]
  float* wgu;    // [2F, C] = gate_proj [F, C] ; up_proj [F, C]
  float* wdown;  // [C, F]
};
struct ParamPtrs {
  float* wte;    // [V, C]
  std::vector<LayerPtrs> layers;
  float* normf;  // [C]
  float* lm;     // [V, C] (== wte when tied)
};

class Model {
 public:
  explicit Model(const ModelConfig& cfg);

  const ModelConfig cfg;
  std::vector<ParamTensor> tensors;
  size_t num_params = 0;
  // grads is null while LoRA adapters are on: the base is frozen and has no gradient buffers.
  std::shared_ptr<FloatArena> params, grads;
  std::shared_ptr<FloatArena> adam_m, adam_v;  // allocated at the first optimizer step
  int step = 0;
  // LoRA adapters (lora.h), or null. While set, forward/backward apply them, the backward
  // computes gradients for the adapters only, and the optimizer calls work on the adapters.
  std::shared_ptr<LoraState> lora;
  // CUDA build: the device copy that forward/backward/step run on (the arenas above are then the
  // host mirror that load/save use). Null in the CPU build.
  std::shared_ptr<cuda::DeviceModel> device;
  // Native calls on one model run one at a time (each already uses every thread); workers take
  // this lock inside Execute so the event loop never blocks on it.
  std::mutex mu;

  ParamPtrs ptrs(float* base) const;
  void init_random(uint64_t seed, float std);

  // Callers hold `mu`. enable_lora validates (throwing before any change), builds and initialises
  // the adapters and frees the base gradients and AdamW moments; disable_lora drops the adapters
  // and gives the base fresh gradients (and no moments: AdamW starts over).
  void enable_lora(const LoraConfig& c);
  void disable_lora();
  // W += (alpha / r) B A for every adapted projection, then disable_lora().
  void merge_lora();
  // The base weight rows [O, I] an adapter site modifies, inside the arena `base` (params layout).
  float* site_weight(float* base, const LoraSite& s) const;
  // Index into `tensors` of the base weight a site modifies.
  int site_tensor(const LoraSite& s) const;

  // Activation and scratch arenas are recycled through a small per-model cache: a fresh
  // multi-hundred-MB allocation is an mmap whose first touch page-faults every 4 KiB, which cost
  // more than the layer kernels themselves. A disposed handle's arena goes back to the cache
  // (reported as cached bytes; trim_cache() returns it to the OS).
  std::unique_ptr<FloatArena> acquire(size_t n, bool zero);
  void release(std::unique_ptr<FloatArena> a);
  size_t cached_bytes();
  void trim_cache();

 private:
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<FloatArena>> pool_;
};

// Returns a scratch arena to the model's cache when it goes out of scope (also on exceptions).
struct ScratchGuard {
  Model& m;
  std::unique_ptr<FloatArena> a;
  ScratchGuard(Model& model, size_t n) : m(model), a(model.acquire(n, false)) {}
  ~ScratchGuard() { m.release(std::move(a)); }
};

// How the LM head's logits [M, V] are handled: kept in the handle (the backward reads them back)
// or recomputed chunk by chunk in the backward (one extra LM-head GEMM, no [M, V] memory).
enum class LogitsMode { Auto = 0, Keep = 1, Recompute = 2 };
// Auto keeps them when they take at most this many bytes and fit any maxBytes limit.
constexpr size_t kKeepLogitsMaxBytes = size_t(256) << 20;

struct MemoryPlan {
  size_t kept_floats, fwd_scratch_floats, bwd_scratch_floats;
  int lm_rows;  // LM-head chunk rows
  bool keep_logits;
  size_t peak_bytes() const { return (kept_floats + std::max(fwd_scratch_floats, bwd_scratch_floats)) * sizeof(float); }
};
// max_bytes (0 = no limit) only steers LogitsMode::Auto; the caller enforces the limit itself.
// lora (may be null) adds the adapters' kept [N, r] inputs and their scratch; drop: a training
// forward with LoRA dropout (the dropped-out input is scratch).
MemoryPlan plan_memory(const ModelConfig& cfg, const TreeInfo& tree, LogitsMode mode, double max_bytes,
                       const LoraState* lora = nullptr, bool drop = false);

struct LayerActs {
  float* ln1;    // [N, C]
  float* rstd1;  // [N]
  float* qkv;    // [N, QKV] (q and k after RoPE)
  float* att;    // [N, H*D]
  float* lse;    // [N, H]
  float* mid;    // [N, C] residual after attention
  float* ln2;    // [N, C]
  float* rstd2;  // [N]
  float* gu;     // [N, 2F] [gate | up]
  float* h;      // [N, F] silu(gate) * up
};

// Everything a forward keeps for its backward, in one arena owned by the handle.
struct Activations {
  ~Activations() {
    if (arena && model) model->release(std::move(arena));
  }
  std::shared_ptr<Model> model;
  TreeInfo tree;
  std::vector<int32_t> tokens;
  std::shared_ptr<cuda::DeviceActs> dev;  // CUDA build: the device activations instead of `arena`
  std::unique_ptr<FloatArena> arena;
  std::vector<float*> res;  // L+1 residual streams [N, C]; res[0] = embeddings
  std::vector<LayerActs> layers;
  float* lnf = nullptr;      // [N, C] final norm output
  float* rstdf = nullptr;    // [N]
  float* lse_int = nullptr;  // [M] log-sum-exp of each internal node's logits
  float* ent_int = nullptr;  // [M] entropy of each internal node's distribution
  float* logits = nullptr;   // [M, V] kept logits, or null when the backward recomputes them
  MemoryPlan plan{};
  // LoRA: the adapters this forward ran with (the backward refuses others), whether it dropped
  // out their inputs (a training forward) and with which seed, and each site's u = A xd [N, r].
  std::shared_ptr<LoraState> lora;
  bool drop = false;
  uint64_t dropout_seed = 0;
  std::vector<float*> lora_u;
  float* cos_t = nullptr;    // [max_depth+1, D/2]
  float* sin_t = nullptr;
  size_t kept_bytes = 0;          // bytes of this arena
  size_t forward_scratch_bytes = 0;
  size_t backward_scratch_bytes = 0;
};



// Allocates the activation arena and runs the forward. logp/entropy are [N] outputs.
void model_forward(Activations& a, float* logp, float* entropy);
// Accumulates parameter gradients for dL/dlogp (and optionally dL/dentropy), both [N].
void model_backward(Activations& a, const float* dlogp, const float* dentropy);

}  // namespace anvil
