// Generation over per-sequence KV caches (f32, per layer [T, KVH*D], K after RoPE).
//
// A step takes every given sequence's PENDING tokens (the part of its token list that has no KV
// yet: the un-cached rest of the prompt at its first step, the last sampled token afterwards),
// stacks them into one [N, C] batch and runs the same kernels as the training forward
// (embedding, RMSNorm, one GEMM per linear over all N rows, RoPE at each token's position,
// SwiGLU); only attention differs: each row attends over its own sequence's cache, positions
// 0..pos. So prefill and decode are the same code, and a decode step of B sequences is one
// [B, C] GEMM per linear. The LM head runs for the last row of each sequence only; the sampler
// draws one token per sequence from it.
//
// Prefix cache: a finished sequence's KV (with the tokens it covers) is kept in an LRU list
// bounded by bytes; a new prompt copies the KV of the longest common token prefix of any entry
// (at most prompt length - 1 tokens: the last prompt token is always run, it yields the logits)
// and prefills only the rest.
#include "generate.h"
#include "lora.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace anvil {

namespace {

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
// xoshiro256**
uint64_t next_u64(uint64_t* s) {
  const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}
double uniform01(uint64_t* s) { return (next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

// Draws one token from raw logits l[V]. Processing order (as vLLM): temperature, top-k, top-p.
namespace {

// The k largest raw logits of a row (k <= kMaxTopLogprobs), as log-probs, most likely first (ties:
// lower id first). An insertion into a k-element sorted buffer per candidate: O(V) for small k.
void top_logprobs(StepOutput& o, const float* l, int V, float lse, int k) {
  k = std::min(std::min(k, kMaxTopLogprobs), V);
  int n = 0;
  for (int v = 0; v < V; v++) {
    const float x = l[v];
    if (n == k && !(x > l[o.top_ids[k - 1]])) continue;
    int pos = n < k ? n++ : k - 1;
    while (pos > 0 && x > l[o.top_ids[pos - 1]]) {
      o.top_ids[pos] = o.top_ids[pos - 1];
      pos--;
    }
    o.top_ids[pos] = v;
  }
  o.n_top = n;
  for (int i = 0; i < n; i++) o.top_logprobs[i] = l[o.top_ids[i]] - lse;
}

// Top-k then top-p over the candidates idx[0..A) (sorted by logit, descending; ties: lower id
// first), then one draw from what is kept. *S_kept gets the kept mass (of exp((l - mx) / T)),
// the normaliser of the drawn id's log-prob.
int truncated_draw(const float* l, std::vector<int>& idx, int A, float mx, float invT, const SamplingConfig& s,
                   uint64_t* rng, std::vector<float>& e, double* S_kept) {
  auto desc = [l](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  int K = A;
  if (s.top_k > 0 && s.top_k < A) {
    K = s.top_k;
    std::nth_element(idx.begin(), idx.begin() + (K - 1), idx.begin() + A, desc);
  }
  std::sort(idx.begin(), idx.begin() + K, desc);
  e.resize(K);
  double S = 0;
  for (int i = 0; i < K; i++) S += (e[i] = fast_exp((l[idx[i]] - mx) * invT));
  int keep = K;
  if (s.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p (at least one token)
    double cum = 0, target = (double)s.top_p * S;
    for (int i = 0; i < K; i++) {
      cum += e[i];
      if (cum >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  double S2 = 0;
  for (int i = 0; i < keep; i++) S2 += e[i];
  double u = uniform01(rng) * S2, cum = 0;
  int pick = keep - 1;
  for (int i = 0; i < keep; i++) {
    cum += e[i];
    if (cum > u) {
      pick = i;
      break;
    }
  }
  while (e[pick] == 0.f && pick > 0) pick--;
  *S_kept = S2;
  return idx[pick];
}

StepOutput sample_token_only(const float* l, int V, const SamplingConfig& s, uint64_t* rng, std::vector<float>& e,
                             std::vector<int>& idx, float* lse_out) {
  float mx = l[0];
  int arg = 0;
  for (int k = 1; k < V; k++)
    if (l[k] > mx) {
      mx = l[k];
      arg = k;
    }
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int k = 0; k < V; k++) sum += fast_exp(l[k] - mx);
  const float lse = mx + std::log(sum);
  *lse_out = lse;
  StepOutput o;
  if (s.temperature <= 0.f) {  // greedy: the processed distribution is a point mass; report the policy's logprob
    o.token = arg;
    o.raw_logprob = o.logprob = l[arg] - lse;
    return o;
  }
  const float invT = 1.0f / s.temperature;
  const bool truncate = (s.top_k > 0 && s.top_k < V) || s.top_p < 1.0f;
  if (!truncate) {
    e.resize(V);
    double S = 0;
    for (int k = 0; k < V; k++) S += (e[k] = fast_exp((l[k] - mx) * invT));
    double u = uniform01(rng) * S, cum = 0;
    int tok = V - 1;
    for (int k = 0; k < V; k++) {
      cum += e[k];
      if (cum > u) {
        tok = k;
        break;
      }
    }
    while (e[tok] == 0.f && tok > 0) tok--;  // never return a zero-probability id (rounding at the tail)
    o.token = tok;
    o.raw_logprob = l[tok] - lse;
    o.logprob = s.temperature == 1.0f ? o.raw_logprob : (float)((l[tok] - mx) * invT - std::log(S));
    return o;
  }
  idx.resize(V);
  std::iota(idx.begin(), idx.end(), 0);
  double S2 = 0;
  const int tok = truncated_draw(l, idx, V, mx, invT, s, rng, e, &S2);
  o.token = tok;
  o.raw_logprob = l[tok] - lse;
  o.logprob = (float)((l[tok] - mx) * invT - std::log(S2));
  return o;
}

// Constrained decoding: the candidates are the ids the mask allows, and everything above happens
// within them (the policy restricted to the allowed set and renormalised, then temperature, top-k,
// top-p). `logprob` is under that constrained distribution (0 for a forced token: one allowed id).
StepOutput sample_token_masked(const float* l, int V, const SamplingConfig& s, uint64_t* rng, std::vector<float>& e,
                               std::vector<int>& idx, const uint32_t* mask, float* lse_out) {
  float mx = l[0];
  for (int k = 1; k < V; k++) mx = std::max(mx, l[k]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int k = 0; k < V; k++) sum += fast_exp(l[k] - mx);
  const float lse = mx + std::log(sum);
  *lse_out = lse;
  idx.clear();
  const int words = (V + 31) / 32;
  for (int w = 0; w < words; w++)
    for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      const int id = w * 32 + __builtin_ctz(bits);
      if (id < V) idx.push_back(id);
    }
  const int A = (int)idx.size();
  if (A == 0) throw Error("constrained decoding: the mask allows no token of the vocabulary");
  StepOutput o;
  if (A == 1) {  // forced: nothing to draw
    o.token = idx[0];
    o.raw_logprob = l[idx[0]] - lse;
    o.logprob = 0.f;
    return o;
  }
  float mxa = l[idx[0]];
  int arg = idx[0];
  for (int i = 1; i < A; i++)
    if (l[idx[i]] > mxa) {  // ids ascend: ties keep the lower id, as the unconstrained argmax
      mxa = l[idx[i]];
      arg = idx[i];
    }
  if (s.temperature <= 0.f) {  // greedy: the log-prob under the renormalised policy
    double S = 0;
    for (int i = 0; i < A; i++) S += fast_exp(l[idx[i]] - mxa);
    o.token = arg;
    o.raw_logprob = l[arg] - lse;
    o.logprob = (float)(l[arg] - mxa - std::log(S));
    return o;
  }
  const float invT = 1.0f / s.temperature;
  const bool truncate = (s.top_k > 0 && s.top_k < A) || s.top_p < 1.0f;
  int tok;
  double S = 0;
  if (!truncate) {
    e.resize(A);
    for (int i = 0; i < A; i++) S += (e[i] = fast_exp((l[idx[i]] - mxa) * invT));
    double u = uniform01(rng) * S, cum = 0;
    int pick = A - 1;
    for (int i = 0; i < A; i++) {
      cum += e[i];
      if (cum > u) {
        pick = i;
        break;
      }
    }
    while (e[pick] == 0.f && pick > 0) pick--;
    tok = idx[pick];
  } else {
    tok = truncated_draw(l, idx, A, mxa, invT, s, rng, e, &S);
  }
  o.token = tok;
  o.raw_logprob = l[tok] - lse;
  o.logprob = (float)((l[tok] - mxa) * invT - std::log(S));
  return o;
}

}  // namespace

StepOutput sample_token(const float* l, int V, const SamplingConfig& s, uint64_t* rng, std::vector<float>& e,
                        std::vector<int>& idx, const uint32_t* mask) {
  float lse = 0.f;
  StepOutput o = mask ? sample_token_masked(l, V, s, rng, e, idx, mask, &lse) : sample_token_only(l, V, s, rng, e, idx, &lse);
  if (s.top_logprobs > 0) top_logprobs(o, l, V, lse, s.top_logprobs);
  return o;
}

void sample_rows(const float* logits, int B, int V, const SamplingConfig* const* cfg, uint64_t* const* rng,
                 std::vector<StepOutput>& out, const StepMasks& masks) {
  out.resize(B);
  if (!masks.empty() && (int)masks.size() != B) throw Error("step: one mask entry per sequence is needed");
  // An exception must not leave an OpenMP region: the first one is kept and rethrown after it.
  std::string failure;
#pragma omp parallel num_threads(nthreads())
  {
    std::vector<float> e;
    std::vector<int> idx;
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
      try {
        out[b] = sample_token(logits + (size_t)b * V, V, *cfg[b], rng[b], e, idx, masks.empty() ? nullptr : masks[b]);
      } catch (const std::exception& err) {
#pragma omp critical(anvil_sample_failure)
        if (failure.empty()) failure = err.what();
      }
    }
  }
  if (!failure.empty()) throw Error(failure);
}

void seed_rng(uint64_t seed, uint64_t rng[4]) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) rng[i] = splitmix(x);
}

void check_add_args(const ModelConfig& cfg, int max_positions, const int32_t* prompt, int n, const SamplingConfig& s) {
  if (n <= 0) throw Error("empty prompt: generation needs at least one prompt token");
  if (n >= max_positions)
    throw Error("prompt has " + std::to_string(n) + " tokens: it leaves no room to generate within the model's " +
                std::to_string(max_positions) + " positions");
  for (int i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= cfg.vocab)
      throw Error("token out of range: prompt[" + std::to_string(i) + "] = " + std::to_string(prompt[i]) +
                  " (vocab size " + std::to_string(cfg.vocab) + ")");
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) throw Error("temperature must be a finite number >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw Error("top_p must be in (0, 1]");
  if (s.top_k < 0) throw Error("top_k must be >= 0");
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs)
    throw Error("top_logprobs must be an integer in [0, " + std::to_string(kMaxTopLogprobs) + "]");
}

namespace {

// out[N,O] (+)= inp[N,I] @ w[O,I]^T; a single row (decode at batch 1) is a GEMV.
void linear(float* out, const float* inp, const float* w, int N, int I, int O, bool accumulate) {
  if (N == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, O, I, 1.0f, w, I, inp, 1, accumulate ? 1.0f : 0.0f, out, 1);
  else
    matmul_forward(out, inp, w, N, I, O, accumulate);
}

}  // namespace

void KvCache::reserve(int L, int row, int cap) {
  if (k.empty()) {
    k.resize(L);
    v.resize(L);
  }
  for (int l = 0; l < L; l++) {
    if (k[l].size() < (size_t)cap * row) {
      k[l].resize((size_t)cap * row);
      v[l].resize((size_t)cap * row);
    }
  }
}

GeneratorBase::GeneratorBase(std::shared_ptr<Model> m, int maxpos, double budget)
    : model(std::move(m)), max_positions(maxpos), cache_budget(budget) {
  if (max_positions < 2) throw Error("generator: maxPositions must be at least 2");
}

Generator::Generator(std::shared_ptr<Model> m, int maxpos, double budget) : GeneratorBase(std::move(m), maxpos, budget) {}

void Generator::ensure_rope(int positions) {
  if (positions <= rope_len_) return;
  const ModelConfig& cfg = model->cfg;
  const int half = cfg.head_dim / 2;
  int n = std::max(positions, std::min(max_positions, std::max(2 * rope_len_, 256)));
  cos_t_.resize((size_t)n * half);
  sin_t_.resize((size_t)n * half);
  for (int pos = rope_len_; pos < n; pos++)
    for (int i = 0; i < half; i++) {  // exactly as model_forward builds its tables
      float ang = (float)pos * cfg.inv_freq[i];
      cos_t_[(size_t)pos * half + i] = (float)std::cos((double)ang) * cfg.rope_attention_scaling;
      sin_t_[(size_t)pos * half + i] = (float)std::sin((double)ang) * cfg.rope_attention_scaling;
    }
  rope_len_ = n;
}

int Generator::add(int64_t id, const int32_t* prompt, int n, const SamplingConfig& s) {
  const ModelConfig& cfg = model->cfg;
  check_add_args(cfg, max_positions, prompt, n, s);
  if (seqs_.count(id)) throw Error("sequence id already in use");
  auto seq = std::make_unique<Sequence>();
  seq->tokens.assign(prompt, prompt + n);
  seq->sampling = s;
  seed_rng(s.seed, seq->rng);
  const int row = cfg.kv_heads * cfg.head_dim;
  // longest cached prefix
  lookup_tokens += n;
  auto best = cache_.end();
  int best_len = 0;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    const int lim = std::min<int>((int)it->tokens.size(), n - 1);
    int j = 0;
    while (j < lim && it->tokens[j] == prompt[j]) j++;
    if (j > best_len) {
      best_len = j;
      best = it;
    }
  }
  seq->kv.reserve(cfg.layers, row, std::min(max_positions, std::max(n + 64, 2 * n)));
  if (best_len > 0) {
    for (int l = 0; l < cfg.layers; l++) {
      std::memcpy(seq->kv.k[l].data(), best->kv.k[l].data(), sizeof(float) * best_len * row);
      std::memcpy(seq->kv.v[l].data(), best->kv.v[l].data(), sizeof(float) * best_len * row);
    }
    seq->kv.len = best_len;
    cache_.splice(cache_.begin(), cache_, best);  // most recently used
    hit_tokens += best_len;
  }
  seqs_[id] = std::move(seq);
  active = (int)seqs_.size();
  return best_len;
}

void Generator::remove(int64_t id, bool keep) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  std::unique_ptr<Sequence> seq = std::move(it->second);
  seqs_.erase(it);
  active = (int)seqs_.size();
  if (!keep || seq->kv.len == 0 || cache_budget <= 0) return;
  const ModelConfig& cfg = model->cfg;
  const int row = cfg.kv_heads * cfg.head_dim, len = seq->kv.len;
  const size_t bytes = (size_t)2 * cfg.layers * len * row * sizeof(float);
  if ((double)bytes > cache_budget) return;
  // an entry that already covers this sequence makes it redundant; entries it covers are dropped
  for (auto e = cache_.begin(); e != cache_.end();) {
    const size_t m = std::min(e->tokens.size(), (size_t)len);
    const bool common = std::equal(e->tokens.begin(), e->tokens.begin() + m, seq->tokens.begin());
    if (common && e->tokens.size() >= (size_t)len) {
      cache_.splice(cache_.begin(), cache_, e);
      return;
    }
    if (common) {
      cache_bytes -= e->bytes;
      e = cache_.erase(e);
      entries--;
    } else {
      ++e;
    }
  }
  Entry entry;
  entry.tokens.assign(seq->tokens.begin(), seq->tokens.begin() + len);
  entry.kv = std::move(seq->kv);
  for (int l = 0; l < cfg.layers; l++) {
    entry.kv.k[l].resize((size_t)len * row);
    entry.kv.k[l].shrink_to_fit();
    entry.kv.v[l].resize((size_t)len * row);
    entry.kv.v[l].shrink_to_fit();
  }
  entry.bytes = bytes;
  cache_bytes += bytes;
  cache_.push_front(std::move(entry));
  entries++;
  while ((double)cache_bytes > cache_budget && !cache_.empty()) {
    cache_bytes -= cache_.back().bytes;
    cache_.pop_back();
    entries--;
  }
}

void Generator::clear_cache() {
  cache_.clear();
  cache_bytes = 0;
  entries = 0;
}

void Generator::step(const std::vector<int64_t>& ids, std::vector<StepOutput>& out, const StepMasks& masks) {
  Model& m = *model;
  const ModelConfig& cfg = m.cfg;
  const int C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim, V = cfg.vocab;
  const int QKV = (H + 2 * KVH) * D, KVD = KVH * D, L = cfg.layers, group = H / KVH;
  const int B = (int)ids.size();
  out.assign(B, StepOutput{});
  if (B == 0) return;
  std::vector<Sequence*> seqs(B);
  std::vector<int> row_seq, row_pos, last_row(B);
  std::vector<int32_t> row_tok;
  int max_pos = 0;
  for (int b = 0; b < B; b++) {
    auto it = seqs_.find(ids[b]);
    if (it == seqs_.end()) throw Error("step: unknown sequence id " + std::to_string(ids[b]));
    Sequence* s = it->second.get();
    seqs[b] = s;
    const int total = (int)s->tokens.size();
    if (total > max_positions) throw Error("step: sequence exceeds the model's positions");
    if (s->kv.len >= total) throw Error("step: sequence has no pending token");
    for (int p = s->kv.len; p < total; p++) {
      row_seq.push_back(b);
      row_pos.push_back(p);
      row_tok.push_back(s->tokens[p]);
    }
    last_row[b] = (int)row_seq.size() - 1;
    max_pos = std::max(max_pos, total);
    if ((int)(s->kv.k.empty() ? 0 : s->kv.k[0].size() / KVD) < total)
      s->kv.reserve(L, KVD, std::min(max_positions, std::max(total, 2 * (int)(s->kv.k[0].size() / KVD))));
  }
  ensure_rope(max_pos);
  const int N = (int)row_seq.size();
  std::vector<float> x((size_t)N * C), ln((size_t)N * C), rstd(N), qkv((size_t)N * QKV), att((size_t)N * H * D),
      gu((size_t)N * 2 * F), h((size_t)N * F);
  const ParamPtrs P = m.ptrs(m.params->data());
  const float scale = 1.0f / std::sqrt((float)D);
  embedding_forward(x.data(), row_tok.data(), P.wte, N, C);
  for (int l = 0; l < L; l++) {
    const LayerPtrs& w = P.layers[l];
    rmsnorm_forward(ln.data(), rstd.data(), x.data(), w.ln1, N, C, cfg.eps);
    if (w.bqkv) bias_fill(qkv.data(), w.bqkv, N, QKV);
    linear(qkv.data(), ln.data(), w.wqkv, N, C, QKV, w.bqkv != nullptr);
    if (m.lora) lora_apply(*m.lora, l, kLoraGroupQkv, qkv.data(), ln.data(), N);  // LoRA adapters, unmerged
    rope_forward(qkv.data(), row_pos.data(), cos_t_.data(), sin_t_.data(), N, H, KVH, D);
    for (int r = 0; r < N; r++) {
      KvCache& kv = seqs[row_seq[r]]->kv;
      std::memcpy(kv.k[l].data() + (size_t)row_pos[r] * KVD, qkv.data() + (size_t)r * QKV + (size_t)H * D, sizeof(float) * KVD);
      std::memcpy(kv.v[l].data() + (size_t)row_pos[r] * KVD, qkv.data() + (size_t)r * QKV + (size_t)(H + KVH) * D,
                  sizeof(float) * KVD);
    }
#pragma omp parallel num_threads(nthreads())
    {
      std::vector<float> sc;
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < (int64_t)N * H; task++) {
        const int r = (int)(task / H), hd = (int)(task % H), kvh = hd / group, T = row_pos[r] + 1;
        const KvCache& kv = seqs[row_seq[r]]->kv;
        const float* q = qkv.data() + (size_t)r * QKV + (size_t)hd * D;
        const float* K = kv.k[l].data() + (size_t)kvh * D;
        const float* Vv = kv.v[l].data() + (size_t)kvh * D;
        sc.resize(T);
        float mx = -INFINITY;
        for (int t = 0; t < T; t++) {
          sc[t] = dot(q, K + (size_t)t * KVD, D) * scale;
          mx = std::max(mx, sc[t]);
        }
        float sum = 0.f;
        for (int t = 0; t < T; t++) sum += (sc[t] = fast_exp(sc[t] - mx));
        float* o = att.data() + (size_t)r * H * D + (size_t)hd * D;
        std::memset(o, 0, sizeof(float) * D);
        const float inv = 1.0f / sum;
        for (int t = 0; t < T; t++) axpy(o, sc[t] * inv, Vv + (size_t)t * KVD, D);
      }
    }
    linear(x.data(), att.data(), w.wo, N, H * D, C, true);  // x = x + att @ Wo^T
    if (m.lora) lora_apply(*m.lora, l, kLoraGroupO, x.data(), att.data(), N);
    rmsnorm_forward(ln.data(), rstd.data(), x.data(), w.ln2, N, C, cfg.eps);
    linear(gu.data(), ln.data(), w.wgu, N, C, 2 * F, false);
    if (m.lora) lora_apply(*m.lora, l, kLoraGroupGu, gu.data(), ln.data(), N);
    swiglu_forward(h.data(), gu.data(), N, F);
    linear(x.data(), h.data(), w.wdown, N, F, C, true);  // x = x + h @ Wdown^T
    if (m.lora) lora_apply(*m.lora, l, kLoraGroupDown, x.data(), h.data(), N);
  }
  for (int r = 0; r < N; r++) seqs[row_seq[r]]->kv.len = std::max(seqs[row_seq[r]]->kv.len, row_pos[r] + 1);
  // LM head for the last row of each sequence
  std::vector<float> last((size_t)B * C), lnl((size_t)B * C), rs(B), logits((size_t)B * V);
  for (int b = 0; b < B; b++) std::memcpy(last.data() + (size_t)b * C, x.data() + (size_t)last_row[b] * C, sizeof(float) * C);
  rmsnorm_forward(lnl.data(), rs.data(), last.data(), P.normf, B, C, cfg.eps);
  linear(logits.data(), lnl.data(), P.lm, B, C, V, false);
  std::vector<const SamplingConfig*> cfgs(B);
  std::vector<uint64_t*> rngs(B);
  for (int b = 0; b < B; b++) {
    cfgs[b] = &seqs[b]->sampling;
    rngs[b] = seqs[b]->rng;
  }
  sample_rows(logits.data(), B, V, cfgs.data(), rngs.data(), out, masks);
  for (int b = 0; b < B; b++) seqs[b]->tokens.push_back(out[b].token);
}

}  // namespace anvil
