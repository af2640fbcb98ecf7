// LoRA adapters (Hu et al. 2021) in PEFT's formulation: a targeted projection y = W x becomes
//   y = W x + s * B (A dropout(x)),  s = alpha / r,  A [r, I] kaiming-uniform, B [O, r] zero,
// with the base W frozen: only A and B have gradients and AdamW moments. Adapters live in their
// own arenas (parameters, gradients, two moments; llm.c style, one allocation each per model),
// carved per (layer, target) in the order layers x {q, k, v, o, gate, up, down}, A then B.
//
// Shapes: N rows (pack nodes or generation rows), I / O the projection's in / out features,
// r the rank. q/k/v write columns of the fused qkv output [N, QKV] and gate/up columns of the
// fused [N, 2F]; `col` is the first column and `ldy` the row stride of that output, which is
// also the row offset of the projection inside the fused weight ([QKV, C] or [2F, C]).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "lora_mask.h"
#include "model.h"

namespace anvil {

enum LoraTarget { kLoraQ = 0, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraTargets };
extern const char* const kLoraTargetNames[kLoraTargets];  // PEFT module names: q_proj, ..., down_proj

struct LoraConfig {
  int rank = 0;
  float alpha = 0.f;
  float dropout = 0.f;    // probability in [0, 1); applied only in training forwards
  uint32_t targets = 0;   // bit t set = kLoraTargetNames[t] is adapted
  uint64_t seed = 0;      // A's initialisation and the stream of dropout masks
  float scale() const { return alpha / (float)rank; }
};

// One adapted projection of one layer.
struct LoraSite {
  int layer = 0, target = 0;
  int in = 0, out = 0;  // I, O
  int col = 0, ldy = 0; // output columns [col, col + O) of a row-major [N, ldy] output
  size_t a = 0, b = 0;  // offsets (floats) of A [r, I] and B [O, r] in the adapter arenas
};

// The adapters of one model. Constructing one validates the config against the model's shape
// (targets, 1 <= r <= min(I, O) for every target, alpha > 0, dropout in [0, 1)) and throws
// anvil::Error before anything is allocated, so a bad config changes nothing.
class LoraState {
 public:
  LoraState(const ModelConfig& model, const LoraConfig& cfg);

  const LoraConfig cfg;
  std::vector<LoraSite> sites;
  std::vector<std::array<int, kLoraTargets>> site_of;  // [L][target] -> index into sites, -1 if not adapted
  std::vector<ParamTensor> tensors;                    // PEFT names, A then B for each site
  size_t num_params = 0;
  std::shared_ptr<FloatArena> params, grads;
  std::shared_ptr<FloatArena> adam_m, adam_v;  // allocated at the first optimizer step
  int step = 0;
  uint64_t forwards = 0;  // training forwards so far: each draws fresh dropout masks

  // A ~ U(-1/sqrt(I), 1/sqrt(I)) (PEFT: kaiming_uniform_ with a = sqrt(5)), B = 0.
  void init(uint64_t seed);
  // The largest input width of any site (dropout scratch is [N, max_in]).
  int max_in() const;
  // The dropout seed of the next training forward (advances `forwards`).
  uint64_t next_dropout_seed();
  // Seed of one site's mask within a forward.
  static uint64_t site_seed(uint64_t forward_seed, int site);
};

// Checks a config against a model's shape without building anything (same errors as LoraState).
void validate_lora(const ModelConfig& model, const LoraConfig& cfg);

// ---- dropout: a counter-based mask (the same on every backend and thread count) ----
// Element i of node n's input to a site is kept iff lora_dropout_bits(seed, n * I + i) >=
// lora_dropout_threshold(p); kept values are scaled by 1 / (1 - p). n is the node's index in the
// caller's pack (the CUDA path, which works in pre-order, maps rows back to it), so both backends
// draw the same mask. No mask is stored: the backward regenerates it from the seed.
// xd[N,I] = dropout(x[N,I])
void lora_dropout_forward(float* xd, const float* x, int N, int I, float p, uint64_t seed);
// dx[N,I] += dropout(dxd[N,I]) with the same mask
void lora_dropout_backward(float* dx, const float* dxd, int N, int I, float p, uint64_t seed);

// ---- one adapted projection ----
// u[N,r] = xd[N,I] @ A[r,I]^T;  y[N, ldy] columns [col, col+O) += s * u @ B[O,r]^T
void lora_forward(float* y, int ldy, float* u, const float* xd, const float* A, const float* B, int N, int I, int O, int r,
                  float s);
// Given dy [N, ldy] (the gradient of y; columns [col, col+O) are this site's, the caller offsets the
// pointer), u and xd from the forward:
//   dB[O,r] += s * dy^T @ u;  du[N,r] = s * dy @ B;  dA[r,I] += du^T @ xd;
//   dxd[N,I] (+)= du @ A  (accumulated when accumulate_dxd, which is how the caller adds the LoRA
//   path's input gradient onto the base projection's when there is no dropout)
// dA and dB may be null (no adapter gradient wanted, e.g. a frozen evaluation); du is [N, r] scratch.
void lora_backward(float* dxd, float* dA, float* dB, float* du, const float* dy, int ldy, const float* u, const float* xd,
                   const float* A, const float* B, int N, int I, int O, int r, float s, bool accumulate_dxd);

// ---- one layer's adapters, by the input they read (the projections that share a GEMM input) ----
enum LoraGroup { kLoraGroupQkv = 0, kLoraGroupO, kLoraGroupGu, kLoraGroupDown, kLoraGroups };
// Targets of a group: qkv = {q, k, v} on ln1 [N, C]; o = {o} on att [N, H*D]; gu = {gate, up} on
// ln2 [N, C]; down = {down} on h [N, F].
struct LoraGroupTargets {
  int first, count;
};
LoraGroupTargets lora_group_targets(int group);

// y (the group's fused output [N, ldy], column 0 of row 0) += every adapted projection of the group
// applied to x [N, I]. u[site] ([N, r] each, indexed by site) receives A dropout(x) for the
// backward; pass u = null for inference (then `us` [N, r] is the scratch). With `drop` the input is
// dropped out per site (seed LoraState::site_seed(dropout_seed, site)) into xd [N, I] scratch.
void lora_layer_forward(const LoraState& st, int layer, int group, float* y, const float* x, int N, float* const* u,
                        float* us, bool drop, uint64_t dropout_seed, float* xd);
// The backward of lora_layer_forward: adapter gradients accumulate into st.grads (when not null),
// dx [N, I] += the adapters' input gradient, given dy (the gradient of the group's fused output,
// [N, ldy]). Scratch: du [N, r]; with `drop`, xd and dxd [N, I].
void lora_layer_backward(const LoraState& st, int layer, int group, float* dx, const float* dy, const float* x, int N,
                         const float* const* u, bool drop, uint64_t dropout_seed, float* xd, float* dxd, float* du);

// Inference (generation): y += the group's adapters applied to x [N, I], without dropout (no-op
// when the layer's group has none). Allocates its own [N, r] scratch.
void lora_apply(const LoraState& st, int layer, int group, float* y, const float* x, int N);

// ---- merging: W[O,I] += s * B[O,r] @ A[r,I] (W = rows [col, col+O) of the fused weight) ----
void lora_merge_site(float* W, const float* A, const float* B, int I, int O, int r, float s);

}  // namespace anvil
