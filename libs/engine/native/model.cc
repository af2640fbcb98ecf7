#include "model.h"

#include "lora.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace anvil {

namespace {

// ANVIL_ENGINE_PROFILE=1 prints the time of every kernel call of forward/backward to stderr.
struct Prof {
  bool on = std::getenv("ANVIL_ENGINE_PROFILE") != nullptr;
  std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  std::vector<std::pair<const char*, double>> acc;
  void mark(const char* what) {
    if (!on) return;
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
    for (auto& a : acc)
      if (a.first == what) {
        a.second += ms;
        return;
      }
    acc.emplace_back(what, ms);
  }
  ~Prof() {
    if (!on) return;
    for (auto& a : acc) std::fprintf(stderr, "  %-28s %9.2f ms\n", a.first, a.second);
  }
};

void copy_parallel(float* dst, const float* src, size_t n) {
  const size_t chunk = 1 << 16;
  const int64_t chunks = (int64_t)((n + chunk - 1) / chunk);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int64_t c = 0; c < chunks; c++) {
    size_t b = (size_t)c * chunk, e = std::min(n, b + chunk);
    std::memcpy(dst + b, src + b, sizeof(float) * (e - b));
  }
}

void zero_parallel(float* dst, size_t n) {
  const size_t chunk = 1 << 16;
  const int64_t chunks = (int64_t)((n + chunk - 1) / chunk);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
  for (int64_t c = 0; c < chunks; c++) {
    size_t b = (size_t)c * chunk, e = std::min(n, b + chunk);
    std::memset(dst + b, 0, sizeof(float) * (e - b));
  }
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Model::Model(const ModelConfig& c) : cfg(c) {
  if (cfg.vocab <= 0 || cfg.hidden <= 0 || cfg.inter <= 0 || cfg.layers <= 0 || cfg.heads <= 0 || cfg.kv_heads <= 0 ||
      cfg.head_dim <= 0)
    throw Error("model config: vocab, hidden, intermediate, layers, heads, kv heads and head dim must be positive");
  if (cfg.heads % cfg.kv_heads != 0) throw Error("model config: num_attention_heads must be a multiple of num_key_value_heads");
  if (cfg.head_dim % 2 != 0) throw Error("model config: head_dim must be even for RoPE");
  if ((int)cfg.inv_freq.size() != cfg.head_dim / 2) throw Error("model config: inv_freq must have head_dim / 2 entries");
  const int64_t V = cfg.vocab, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    ParamTensor t;
    t.name = name;
    t.shape = shape;
    t.offset = num_params;
    t.numel = 1;
    for (auto s : shape) t.numel *= (size_t)s;
    num_params += t.numel;
    tensors.push_back(t);
  };
  // Order matters: q/k/v (and their biases) and gate/up must stay adjacent (see LayerPtrs).
  add("model.embed_tokens.weight", {V, C});
  for (int l = 0; l < cfg.layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C});
    add(p + "self_attn.q_proj.weight", {H * D, C});
    add(p + "self_attn.k_proj.weight", {KVH * D, C});
    add(p + "self_attn.v_proj.weight", {KVH * D, C});
    if (cfg.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {H * D});
      add(p + "self_attn.k_proj.bias", {KVH * D});
      add(p + "self_attn.v_proj.bias", {KVH * D});
    }
    add(p + "self_attn.o_proj.weight", {C, H * D});
    add(p + "post_attention_layernorm.weight", {C});
    add(p + "mlp.gate_proj.weight", {F, C});
    add(p + "mlp.up_proj.weight", {F, C});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  if (!cfg.tied) add("lm_head.weight", {V, C});
  params = std::make_shared<FloatArena>(num_params);
  grads = std::make_shared<FloatArena>(num_params);
}

ParamPtrs Model::ptrs(float* base) const {
  ParamPtrs p;
  size_t i = 0;
  auto next = [&]() { return base + tensors[i++].offset; };
  p.wte = next();
  for (int l = 0; l < cfg.layers; l++) {
    LayerPtrs lp;
    lp.ln1 = next();
    lp.wqkv = next();
    i += 2;  // k, v follow q
    lp.bqkv = nullptr;
    if (cfg.qkv_bias) {
      lp.bqkv = next();
      i += 2;
    }
    lp.wo = next();
    lp.ln2 = next();
    lp.wgu = next();
    i += 1;  // up follows gate
    lp.wdown = next();
    p.layers.push_back(lp);
  }
  p.normf = next();
  p.lm = cfg.tied ? p.wte : next();
  return p;
}

void Model::init_random(uint64_t seed, float std) {
  // Linear and embedding weights ~ N(0, std) (transformers' initializer_range), norms = 1,
  // biases = 0. Each 64k-element chunk has its own stream, so the result is the same for any
  // thread count.
  float* base = params->data();
  for (size_t ti = 0; ti < tensors.size(); ti++) {
    const ParamTensor& t = tensors[ti];
    float* p = base + t.offset;
    const bool is_norm = t.name.find("norm") != std::string::npos;
    const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
    if (is_norm || is_bias) {
      std::fill(p, p + t.numel, is_norm ? 1.0f : 0.0f);
      continue;
    }
    const size_t chunk = 1 << 16;
    const int64_t chunks = (int64_t)((t.numel + chunk - 1) / chunk);
#pragma omp parallel for num_threads(nthreads()) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
      uint64_t s = seed * 0x100000001b3ULL ^ (ti * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)c << 20);
      splitmix64(s);
      size_t b = (size_t)c * chunk, e = std::min(t.numel, b + chunk);
      for (size_t k = b; k < e; k += 2) {
        // Box-Muller: two normals from two uniforms in (0, 1]
        double u1 = ((splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
        double u2 = (splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
        double r = std::sqrt(-2.0 * std::log(u1));
        p[k] = (float)(std * r * std::cos(6.283185307179586 * u2));
        if (k + 1 < e) p[k + 1] = (float)(std * r * std::sin(6.283185307179586 * u2));
      }
    }
  }
}

void Model::enable_lora(const LoraConfig& c) {
  auto st = std::make_shared<LoraState>(cfg, c);  // validates the config first
  st->init(c.seed);
  lora = std::move(st);
  if (grads) grads->discard();  // JavaScript's gradient views may keep the arena itself alive a while
  grads.reset();                // the base is frozen: no gradients, no moments
  adam_m.reset();
  adam_v.reset();
  step = 0;
}

void Model::disable_lora() {
  if (!lora) return;
  grads = std::make_shared<FloatArena>(num_params);
  lora.reset();
}

float* Model::site_weight(float* base, const LoraSite& s) const {
  const ParamPtrs P = ptrs(base);
  const LayerPtrs& w = P.layers[s.layer];
  float* block = s.target <= kLoraV ? w.wqkv : s.target == kLoraO ? w.wo : s.target <= kLoraUp ? w.wgu : w.wdown;
  return block + (size_t)s.col * s.in;  // q/k/v and gate/up are row blocks of the fused weight
}

int Model::site_tensor(const LoraSite& s) const {
  const std::string name = "model.layers." + std::to_string(s.layer) + (s.target <= kLoraO ? ".self_attn." : ".mlp.") +
                           kLoraTargetNames[s.target] + ".weight";
  for (size_t i = 0; i < tensors.size(); i++)
    if (tensors[i].name == name) return (int)i;
  throw Error("internal error: no base tensor " + name);
}

void Model::merge_lora() {
  if (!lora) throw Error("mergeLora: the model has no LoRA adapters");
  const LoraState& st = *lora;
  const float* P = st.params->data();
  for (const LoraSite& s : st.sites)
    lora_merge_site(site_weight(params->data(), s), P + s.a, P + s.b, s.in, s.out, st.cfg.rank, st.cfg.scale());
  disable_lora();
}

std::unique_ptr<FloatArena> Model::acquire(size_t n, bool zero) {
  std::unique_ptr<FloatArena> a;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    // best fit among cached arenas that are big enough but not wastefully so
    int best = -1;
    for (int i = 0; i < (int)pool_.size(); i++)
      if (pool_[i]->size() >= n && pool_[i]->size() <= 2 * n + (1u << 20) &&
          (best < 0 || pool_[i]->size() < pool_[best]->size()))
        best = i;
    if (best >= 0) {
      a = std::move(pool_[best]);
      pool_.erase(pool_.begin() + best);
    }
  }
  if (!a) return std::make_unique<FloatArena>(n, zero);
  if (zero) zero_parallel(a->data(), n);
  return a;
}

void Model::release(std::unique_ptr<FloatArena> a) {
  if (!a) return;
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.push_back(std::move(a));
  // keep the 4 largest
  while (pool_.size() > 4) {
    auto smallest = std::min_element(pool_.begin(), pool_.end(),
                                     [](const auto& x, const auto& y) { return x->size() < y->size(); });
    pool_.erase(smallest);
  }
}

size_t Model::cached_bytes() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  size_t b = 0;
  for (auto& a : pool_) b += a->bytes();
  return b;
}

void Model::trim_cache() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.clear();
}

MemoryPlan plan_memory(const ModelConfig& cfg, const TreeInfo& tree, LogitsMode mode, double max_bytes, const LoraState* lora,
                       bool drop) {
  const size_t N = tree.n, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  const size_t QKV = (H + 2 * KVH) * D, V = cfg.vocab, M = tree.internal.size();
  Bump b;
  auto t = [&](size_t n) { b.take(n); };
  for (int l = 0; l <= cfg.layers; l++) t(N * C);  // residual streams
  for (int l = 0; l < cfg.layers; l++) {
    t(N * C); t(N); t(N * QKV); t(N * H * D); t(N * H); t(N * C); t(N * C); t(N); t(N * 2 * F); t(N * F);
  }
  t(N * C); t(N); t(M); t(M);
  t((size_t)(tree.max_depth + 1) * (D / 2)); t((size_t)(tree.max_depth + 1) * (D / 2));
  const size_t R = lora ? (size_t)lora->cfg.rank : 0;
  const size_t xd = lora && drop ? N * (size_t)lora->max_in() + 16 : 0;  // dropped-out input of one site
  if (lora)
    for (size_t i = 0; i < lora->sites.size(); i++) t(N * R);  // u = A dropout(x) per site
  MemoryPlan plan;
  // LM-head chunk: about 8M logits (32 MiB) per chunk, at least 64 rows so the GEMM stays efficient
  size_t rows = std::max<size_t>(64, (size_t(8) << 20) / V);
  rows = std::min(rows, std::max<size_t>(M, 1));
  plan.lm_rows = (int)rows;
  const size_t lm = rows * C + rows * V + 32;
  // backward: dres, dln [N,C]; dqkv [N,QKV]; datt [N,HD]; dgu [N,2F]; dh [N,F]; + LM chunk
  // + LoRA: du [N, r], and with dropout the regenerated input and its gradient [N, max_in] each
  plan.bwd_scratch_floats = N * (2 * C + QKV + H * D + 3 * F) + 6 * 16 + lm + (lora ? N * R + 16 + 2 * xd : 0);
  plan.fwd_scratch_floats = std::max(lm, xd);  // the LM-head chunk comes after the layers' dropout scratch
  plan.kept_floats = b.used;
  const size_t logits = ((M * V) + 15) & ~size_t(15);
  if (mode == LogitsMode::Keep) {
    plan.keep_logits = true;
  } else if (mode == LogitsMode::Recompute) {
    plan.keep_logits = false;
  } else {
    const double with = (double)(plan.kept_floats + logits + std::max(plan.fwd_scratch_floats, plan.bwd_scratch_floats)) * 4.0;
    plan.keep_logits = logits * sizeof(float) <= kKeepLogitsMaxBytes && (max_bytes <= 0 || with <= max_bytes);
  }
  if (plan.keep_logits) plan.kept_floats += logits;
  return plan;
}

void model_forward(Activations& a, float* logp, float* entropy) {
  Model& m = *a.model;
  const ModelConfig& cfg = m.cfg;
  const TreeInfo& tree = a.tree;
  const int N = tree.n, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  const int QKV = (H + 2 * KVH) * D, V = cfg.vocab, M = (int)tree.internal.size(), half = D / 2;
  const MemoryPlan& plan = a.plan;  // set by the caller (plan_memory)
  Prof prof;

  a.arena = m.acquire(plan.kept_floats, false);  // every tensor is written before it is read
  a.kept_bytes = plan.kept_floats * sizeof(float);  // what the pack needs (a reused arena may be larger)
  a.forward_scratch_bytes = plan.fwd_scratch_floats * sizeof(float);
  a.backward_scratch_bytes = plan.bwd_scratch_floats * sizeof(float);
  Bump b{a.arena->data(), 0};
  a.res.clear();
  a.layers.clear();
  for (int l = 0; l <= cfg.layers; l++) a.res.push_back(b.take((size_t)N * C));
  for (int l = 0; l < cfg.layers; l++) {
    LayerActs la;
    la.ln1 = b.take((size_t)N * C);
    la.rstd1 = b.take(N);
    la.qkv = b.take((size_t)N * QKV);
    la.att = b.take((size_t)N * H * D);
    la.lse = b.take((size_t)N * H);
    la.mid = b.take((size_t)N * C);
    la.ln2 = b.take((size_t)N * C);
    la.rstd2 = b.take(N);
    la.gu = b.take((size_t)N * 2 * F);
    la.h = b.take((size_t)N * F);
    a.layers.push_back(la);
  }
  a.lnf = b.take((size_t)N * C);
  a.rstdf = b.take(N);
  a.lse_int = b.take(M);
  a.ent_int = b.take(M);
  a.cos_t = b.take((size_t)(tree.max_depth + 1) * half);
  a.sin_t = b.take((size_t)(tree.max_depth + 1) * half);
  a.logits = plan.keep_logits ? b.take((size_t)M * V) : nullptr;
  const LoraState* lora = a.lora.get();
  a.lora_u.clear();
  if (lora)
    for (size_t i = 0; i < lora->sites.size(); i++) a.lora_u.push_back(b.take((size_t)N * lora->cfg.rank));
  // one scratch arena for the whole forward: the layers' LoRA dropout input, then the LM-head chunks
  ScratchGuard scratch(m, plan.fwd_scratch_floats);
  float* xd = scratch.a->data();

  // RoPE tables as transformers computes them: angle = float32(pos * inv_freq), then cos/sin.
  for (int pos = 0; pos <= tree.max_depth; pos++)
    for (int i = 0; i < half; i++) {
      float ang = (float)pos * cfg.inv_freq[i];
      a.cos_t[(size_t)pos * half + i] = (float)std::cos((double)ang) * cfg.rope_attention_scaling;
      a.sin_t[(size_t)pos * half + i] = (float)std::sin((double)ang) * cfg.rope_attention_scaling;
    }

  prof.mark("alloc+rope tables");
  const ParamPtrs P = m.ptrs(m.params->data());
  embedding_forward(a.res[0], a.tokens.data(), P.wte, N, C);
  prof.mark("embedding_forward");
  for (int l = 0; l < cfg.layers; l++) {
    const LayerPtrs& w = P.layers[l];
    LayerActs& la = a.layers[l];
    rmsnorm_forward(la.ln1, la.rstd1, a.res[l], w.ln1, N, C, cfg.eps);
    prof.mark("rmsnorm_forward");
    if (w.bqkv) bias_fill(la.qkv, w.bqkv, N, QKV);
    matmul_forward(la.qkv, la.ln1, w.wqkv, N, C, QKV, w.bqkv != nullptr);
    prof.mark("matmul_forward:wqkv");
    if (lora) {
      lora_layer_forward(*lora, l, kLoraGroupQkv, la.qkv, la.ln1, N, a.lora_u.data(), nullptr, a.drop, a.dropout_seed, xd);
      prof.mark("lora_forward");
    }
    rope_forward(la.qkv, tree.depth.data(), a.cos_t, a.sin_t, N, H, KVH, D);
    prof.mark("rope_forward");
    tree_attention_forward(la.att, la.lse, la.qkv, tree, H, KVH, D);
    prof.mark("tree_attention_forward");
    copy_parallel(la.mid, a.res[l], (size_t)N * C);
    prof.mark("copy_parallel");
    matmul_forward(la.mid, la.att, w.wo, N, H * D, C, true);  // mid = x + att @ Wo^T
    prof.mark("matmul_forward:wo");
    if (lora) {
      lora_layer_forward(*lora, l, kLoraGroupO, la.mid, la.att, N, a.lora_u.data(), nullptr, a.drop, a.dropout_seed, xd);
      prof.mark("lora_forward");
    }
    rmsnorm_forward(la.ln2, la.rstd2, la.mid, w.ln2, N, C, cfg.eps);
    prof.mark("rmsnorm_forward");
    matmul_forward(la.gu, la.ln2, w.wgu, N, C, 2 * F, false);
    prof.mark("matmul_forward:wgu");
    if (lora) {
      lora_layer_forward(*lora, l, kLoraGroupGu, la.gu, la.ln2, N, a.lora_u.data(), nullptr, a.drop, a.dropout_seed, xd);
      prof.mark("lora_forward");
    }
    swiglu_forward(la.h, la.gu, N, F);
    prof.mark("swiglu_forward");
    copy_parallel(a.res[l + 1], la.mid, (size_t)N * C);
    prof.mark("copy_parallel");
    matmul_forward(a.res[l + 1], la.h, w.wdown, N, F, C, true);  // out = mid + h @ Wdown^T
    prof.mark("matmul_forward:wdown");
    if (lora) {
      lora_layer_forward(*lora, l, kLoraGroupDown, a.res[l + 1], la.h, N, a.lora_u.data(), nullptr, a.drop, a.dropout_seed,
                         xd);
      prof.mark("lora_forward");
    }
  }
  rmsnorm_forward(a.lnf, a.rstdf, a.res[cfg.layers], P.normf, N, C, cfg.eps);
  prof.mark("rmsnorm_forward");
  Bump sb{scratch.a->data(), 0};
  LogprobScratch ls;
  ls.R = plan.lm_rows;
  ls.rows = sb.take((size_t)ls.R * C);
  ls.logits = sb.take((size_t)ls.R * V);
  logprob_forward(logp, entropy, a.lse_int, a.ent_int, a.lnf, P.lm, a.tokens.data(), tree, C, V, ls, a.logits);
  prof.mark("logprob_forward");
}

void model_backward(Activations& a, const float* dlogp, const float* dentropy) {
  Model& m = *a.model;
  const ModelConfig& cfg = m.cfg;
  const TreeInfo& tree = a.tree;
  const int N = tree.n, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  const int QKV = (H + 2 * KVH) * D, V = cfg.vocab;
  const MemoryPlan& plan = a.plan;
  Prof prof;
  ScratchGuard scratch(m, plan.bwd_scratch_floats);
  Bump b{scratch.a->data(), 0};
  float* dres = b.take((size_t)N * C);
  float* dln = b.take((size_t)N * C);
  float* dqkv = b.take((size_t)N * QKV);
  float* datt = b.take((size_t)N * H * D);
  float* dgu = b.take((size_t)N * 2 * F);
  float* dh = b.take((size_t)N * F);
  LogprobScratch ls;
  ls.R = plan.lm_rows;
  ls.rows = b.take((size_t)ls.R * C);
  ls.logits = b.take((size_t)ls.R * V);
  // LoRA: the adapters' rank-space gradient, and with dropout the regenerated input and its gradient
  const LoraState* lora = a.lora.get();
  if (a.lora != m.lora)
    throw Error("backward: the model's LoRA adapters were enabled, replaced or merged after this forward; run the forward again");
  float* du = lora ? b.take((size_t)N * lora->cfg.rank) : nullptr;
  float* xd = lora && a.drop ? b.take((size_t)N * lora->max_in()) : nullptr;
  float* dxd = lora && a.drop ? b.take((size_t)N * lora->max_in()) : nullptr;
  if (b.used > plan.bwd_scratch_floats) throw Error("internal error: backward scratch exceeds its plan");

  prof.mark("alloc scratch");
  const ParamPtrs P = m.ptrs(m.params->data());
  // With LoRA the base is frozen: no base gradient is computed (null dw skips those GEMMs).
  const bool frozen = lora != nullptr;
  const ParamPtrs G = frozen ? ParamPtrs{nullptr, {}, nullptr, nullptr} : m.ptrs(m.grads->data());
  const LayerPtrs none{};
  zero_parallel(dres, (size_t)N * C);  // accumulated into by the final rmsnorm backward
  zero_parallel(dln, (size_t)N * C);   // accumulated into by the LM-head backward
  // LM head: dln (as d lnf) starts at zero; only rows of nodes with children receive gradient
  logprob_backward(dln, G.lm, dlogp, dentropy, a.lnf, P.lm, a.lse_int, a.ent_int, a.tokens.data(), tree, C, V, ls,
                   a.logits);
  prof.mark("logprob_backward");
  rmsnorm_backward(dres, G.normf, dln, a.res[cfg.layers], P.normf, a.rstdf, N, C);
  prof.mark("rmsnorm_backward");
  for (int l = cfg.layers - 1; l >= 0; l--) {
    const LayerPtrs& w = P.layers[l];
    const LayerPtrs& gw = frozen ? none : G.layers[l];
    LayerActs& la = a.layers[l];
    const float* const* u = a.lora_u.data();
    // MLP: out = mid + (silu(gate) * up) @ Wdown^T, gate|up = ln2 @ Wgu^T, ln2 = rmsnorm(mid)
    matmul_backward(dh, gw.wdown, dres, la.h, w.wdown, N, F, C, false);
    prof.mark("matmul_backward:wdown");
    if (lora) {
      lora_layer_backward(*lora, l, kLoraGroupDown, dh, dres, la.h, N, u, a.drop, a.dropout_seed, xd, dxd, du);
      prof.mark("lora_backward");
    }
    swiglu_backward(dgu, dh, la.gu, N, F);
    prof.mark("swiglu_backward");
    matmul_backward(dln, gw.wgu, dgu, la.ln2, w.wgu, N, C, 2 * F, false);
    prof.mark("matmul_backward:wgu");
    if (lora) {
      lora_layer_backward(*lora, l, kLoraGroupGu, dln, dgu, la.ln2, N, u, a.drop, a.dropout_seed, xd, dxd, du);
      prof.mark("lora_backward");
    }
    rmsnorm_backward(dres, gw.ln2, dln, la.mid, w.ln2, la.rstd2, N, C);  // dres is now d mid
    prof.mark("rmsnorm_backward");
    // attention: mid = x + att @ Wo^T, att = attention(rope(q), rope(k), v), qkv = ln1 @ Wqkv^T (+ b)
    matmul_backward(datt, gw.wo, dres, la.att, w.wo, N, H * D, C, false);
    prof.mark("matmul_backward:wo");
    if (lora) {
      lora_layer_backward(*lora, l, kLoraGroupO, datt, dres, la.att, N, u, a.drop, a.dropout_seed, xd, dxd, du);
      prof.mark("lora_backward");
    }
    zero_parallel(dqkv, (size_t)N * QKV);
    prof.mark("zero_parallel");
    tree_attention_backward(dqkv, datt, la.att, la.lse, la.qkv, tree, H, KVH, D);
    prof.mark("tree_attention_backward");
    rope_backward(dqkv, tree.depth.data(), a.cos_t, a.sin_t, N, H, KVH, D);
    prof.mark("rope_backward");
    if (gw.bqkv) bias_backward(gw.bqkv, dqkv, N, QKV);
    matmul_backward(dln, gw.wqkv, dqkv, la.ln1, w.wqkv, N, C, QKV, false);
    prof.mark("matmul_backward:wqkv");
    if (lora) {
      lora_layer_backward(*lora, l, kLoraGroupQkv, dln, dqkv, la.ln1, N, u, a.drop, a.dropout_seed, xd, dxd, du);
      prof.mark("lora_backward");
    }
    rmsnorm_backward(dres, gw.ln1, dln, a.res[l], w.ln1, la.rstd1, N, C);  // dres is now d x
    prof.mark("rmsnorm_backward");
  }
  if (!frozen) embedding_backward(G.wte, dres, a.tokens.data(), N, C);
  prof.mark("embedding_backward");
}

}  // namespace anvil
