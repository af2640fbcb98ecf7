// LoRA adapters: configuration checks, the adapter arenas, PEFT's initialisation, and the forward,
// backward and merge of one adapted projection (see lora.h for the formulation and shapes).
#include "lora.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "model.h"

namespace anvil {

const char* const kLoraTargetNames[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct TargetShape {
  int in, out, col, ldy;
};

// In/out features of each target and where its output sits in the fused GEMM output.
TargetShape target_shape(const ModelConfig& m, int t) {
  const int C = m.hidden, F = m.inter, HD = m.heads * m.head_dim, KVD = m.kv_heads * m.head_dim;
  const int QKV = HD + 2 * KVD;
  switch (t) {
    case kLoraQ: return {C, HD, 0, QKV};
    case kLoraK: return {C, KVD, HD, QKV};
    case kLoraV: return {C, KVD, HD + KVD, QKV};
    case kLoraO: return {HD, C, 0, C};
    case kLoraGate: return {C, F, 0, 2 * F};
    case kLoraUp: return {C, F, F, 2 * F};
    default: return {F, C, 0, C};  // down
  }
}

std::string peft_name(int layer, int t, const char* which) {
  const bool attn = t <= kLoraO;
  return "base_model.model.model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + kLoraTargetNames[t] +
         ".lora_" + which + ".weight";
}

std::string target_list() {
  std::string s;
  for (int t = 0; t < kLoraTargets; t++) s += std::string(t ? ", " : "") + kLoraTargetNames[t];
  return s;
}

}  // namespace

void validate_lora(const ModelConfig& m, const LoraConfig& c) {
  if (c.targets == 0) throw Error("LoRA: no target modules; choose among " + target_list());
  if (c.targets >> kLoraTargets) throw Error("LoRA: unknown target module; the model has " + target_list());
  if (!(c.alpha > 0) || !std::isfinite(c.alpha)) throw Error("LoRA: alpha must be a finite number > 0, got " + std::to_string(c.alpha));
  if (!(c.dropout >= 0 && c.dropout < 1)) throw Error("LoRA: dropout must be in [0, 1), got " + std::to_string(c.dropout));
  for (int t = 0; t < kLoraTargets; t++) {
    if (!(c.targets >> t & 1)) continue;
    const TargetShape s = target_shape(m, t);
    const int max_r = std::min(s.in, s.out);
    if (c.rank < 1 || c.rank > max_r)
      throw Error("LoRA: rank " + std::to_string(c.rank) + " is out of range for " + kLoraTargetNames[t] + " (" +
                  std::to_string(s.in) + " -> " + std::to_string(s.out) + " features): it must be in [1, " +
                  std::to_string(max_r) + "]");
  }
}

LoraState::LoraState(const ModelConfig& m, const LoraConfig& c) : cfg(c) {
  validate_lora(m, c);
  const int r = c.rank;
  site_of.assign(m.layers, {});
  for (int l = 0; l < m.layers; l++) {
    site_of[l].fill(-1);
    for (int t = 0; t < kLoraTargets; t++) {
      if (!(c.targets >> t & 1)) continue;
      const TargetShape s = target_shape(m, t);
      LoraSite site;
      site.layer = l;
      site.target = t;
      site.in = s.in;
      site.out = s.out;
      site.col = s.col;
      site.ldy = s.ldy;
      auto add = [&](const char* which, int64_t rows, int64_t cols) {
        ParamTensor pt;
        pt.name = peft_name(l, t, which);
        pt.shape = {rows, cols};
        pt.offset = num_params;
        pt.numel = (size_t)(rows * cols);
        num_params += pt.numel;
        tensors.push_back(pt);
        return pt.offset;
      };
      site.a = add("A", r, s.in);   // [r, I]
      site.b = add("B", s.out, r);  // [O, r]
      site_of[l][t] = (int)sites.size();
      sites.push_back(site);
    }
  }
  params = std::make_shared<FloatArena>(num_params);
  grads = std::make_shared<FloatArena>(num_params);
}

void LoraState::init(uint64_t seed) {
  // A ~ U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)), a = sqrt(5): b = 1 / sqrt(I).
  // One stream per tensor, so the values do not depend on the thread count.
  float* base = params->data();
  for (size_t si = 0; si < sites.size(); si++) {
    const LoraSite& s = sites[si];
    float* A = base + s.a;
    const size_t n = (size_t)cfg.rank * s.in;
    const double bound = 1.0 / std::sqrt((double)s.in);
    uint64_t st = mix64(seed * 0x100000001b3ULL ^ (si + 1) * 0x9e3779b97f4a7c15ULL);
    for (size_t k = 0; k < n; k++) {
      st += 0x9e3779b97f4a7c15ULL;
      const double u = (mix64(st) >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
      A[k] = (float)((2.0 * u - 1.0) * bound);
    }
    std::fill(base + s.b, base + s.b + (size_t)s.out * cfg.rank, 0.0f);
  }
}

int LoraState::max_in() const {
  int mx = 0;
  for (const LoraSite& s : sites) mx = std::max(mx, s.in);
  return mx;
}

uint64_t LoraState::next_dropout_seed() { return mix64(cfg.seed ^ mix64(++forwards * 0xd1b54a32d192ed03ULL)); }

uint64_t LoraState::site_seed(uint64_t forward_seed, int site) { return mix64(forward_seed ^ ((uint64_t)site + 1) * 0x9e3779b97f4a7c15ULL); }

void lora_dropout_forward(float* xd, const float* x, int N, int I, float p, uint64_t seed) {
  const uint32_t thr = lora_dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t e0 = (size_t)n * I;
    for (int i = 0; i < I; i++) xd[e0 + i] = lora_dropout_bits(seed, e0 + i) >= thr ? x[e0 + i] * keep_scale : 0.0f;
  }
}

void lora_dropout_backward(float* dx, const float* dxd, int N, int I, float p, uint64_t seed) {
  const uint32_t thr = lora_dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t e0 = (size_t)n * I;
    for (int i = 0; i < I; i++)
      if (lora_dropout_bits(seed, e0 + i) >= thr) dx[e0 + i] += dxd[e0 + i] * keep_scale;
  }
}

void lora_forward(float* y, int ldy, float* u, const float* xd, const float* A, const float* B, int N, int I, int O, int r,
                  float s) {
  // u[N,r] = xd[N,I] @ A[r,I]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, I, 1.0f, xd, I, A, I, 0.0f, u, r);
  // y[N,O] (row stride ldy) += s * u[N,r] @ B[O,r]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, r, s, u, r, B, r, 1.0f, y, ldy);
}

void lora_backward(float* dxd, float* dA, float* dB, float* du, const float* dy, int ldy, const float* u, const float* xd,
                   const float* A, const float* B, int N, int I, int O, int r, float s, bool accumulate_dxd) {
  // dB[O,r] += s * dy[N,O]^T @ u[N,r]
  if (dB) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, r, N, s, dy, ldy, u, r, 1.0f, dB, r);
  // du[N,r] = s * dy[N,O] @ B[O,r]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, r, O, s, dy, ldy, B, r, 0.0f, du, r);
  // dA[r,I] += du[N,r]^T @ xd[N,I]
  if (dA) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, I, N, 1.0f, du, r, xd, I, 1.0f, dA, I);
  // dxd[N,I] (+)= du[N,r] @ A[r,I]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, I, r, 1.0f, du, r, A, I, accumulate_dxd ? 1.0f : 0.0f, dxd, I);
}

LoraGroupTargets lora_group_targets(int group) {
  switch (group) {
    case kLoraGroupQkv: return {kLoraQ, 3};
    case kLoraGroupO: return {kLoraO, 1};
    case kLoraGroupGu: return {kLoraGate, 2};
    default: return {kLoraDown, 1};
  }
}

void lora_layer_forward(const LoraState& st, int layer, int group, float* y, const float* x, int N, float* const* u,
                        float* us, bool drop, uint64_t dropout_seed, float* xd) {
  const LoraGroupTargets g = lora_group_targets(group);
  const float* P = st.params->data();
  const int r = st.cfg.rank;
  for (int t = g.first; t < g.first + g.count; t++) {
    const int si = st.site_of[layer][t];
    if (si < 0) continue;
    const LoraSite& s = st.sites[si];
    const float* in = x;
    if (drop) {
      lora_dropout_forward(xd, x, N, s.in, st.cfg.dropout, LoraState::site_seed(dropout_seed, si));
      in = xd;
    }
    lora_forward(y + s.col, s.ldy, u ? u[si] : us, in, P + s.a, P + s.b, N, s.in, s.out, r, st.cfg.scale());
  }
}

void lora_layer_backward(const LoraState& st, int layer, int group, float* dx, const float* dy, const float* x, int N,
                         const float* const* u, bool drop, uint64_t dropout_seed, float* xd, float* dxd, float* du) {
  const LoraGroupTargets g = lora_group_targets(group);
  const float* P = st.params->data();
  float* G = st.grads ? st.grads->data() : nullptr;
  const int r = st.cfg.rank;
  for (int t = g.first; t < g.first + g.count; t++) {
    const int si = st.site_of[layer][t];
    if (si < 0) continue;
    const LoraSite& s = st.sites[si];
    const uint64_t seed = LoraState::site_seed(dropout_seed, si);
    const float* in = x;
    if (drop) {
      lora_dropout_forward(xd, x, N, s.in, st.cfg.dropout, seed);  // the forward's mask, regenerated
      in = xd;
    }
    // without dropout the input gradient goes straight onto dx; with it, through the mask
    lora_backward(drop ? dxd : dx, G ? G + s.a : nullptr, G ? G + s.b : nullptr, du, dy + s.col, s.ldy, u[si], in, P + s.a,
                  P + s.b, N, s.in, s.out, r, st.cfg.scale(), !drop);
    if (drop) lora_dropout_backward(dx, dxd, N, s.in, st.cfg.dropout, seed);
  }
}

void lora_apply(const LoraState& st, int layer, int group, float* y, const float* x, int N) {
  std::vector<float> us((size_t)N * st.cfg.rank);
  lora_layer_forward(st, layer, group, y, x, N, nullptr, us.data(), false, 0, nullptr);
}

void lora_merge_site(float* W, const float* A, const float* B, int I, int O, int r, float s) {
  // W[O,I] += s * B[O,r] @ A[r,I]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, I, r, s, B, r, A, I, 1.0f, W, I);
}

}  // namespace anvil
