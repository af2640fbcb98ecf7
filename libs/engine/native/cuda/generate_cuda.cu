// GPU generation over a paged KV cache with a block-hashed prefix cache (see generate_cuda.h for
// the design; ../generate.cc is the CPU reference whose semantics this follows).
//
// Host bookkeeping (blocks, reference counts, the prefix cache, sequences) is plain C++ and runs
// in add/remove/clear_cache without touching the device except to allocate pool chunks; step()
// uploads the step's rows and block tables, runs the decoder on the model's stream, copies the
// logits back and samples on the host with the CPU sampler.
#include "generate_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <list>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "common.cuh"
#include "device_model.h"
#include "gemm.h"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 128-bit key of a block: two independent 64-bit hash chains over (parent key, 16 tokens).
struct BlockKey {
  uint64_t a = 0, b = 0;
  bool operator==(const BlockKey& o) const { return a == o.a && b == o.b; }
};

BlockKey block_key(const BlockKey& parent, const int32_t* t) {
  uint64_t ha = mix64(parent.a ^ 0x6a09e667f3bcc909ULL) ^ parent.b;
  uint64_t hb = mix64(parent.b + 0xbb67ae8584caa73bULL) ^ (parent.a * 0x9e3779b97f4a7c15ULL);
  for (int i = 0; i < kKvBlock; i++) {
    const uint64_t v = (uint64_t)(uint32_t)t[i] + 1;
    ha = mix64(ha + v * 0x9e3779b97f4a7c15ULL);
    hb = mix64((hb ^ (v << 17)) + 0x3c6ef372fe94f82bULL);
  }
  return {ha, hb};
}

struct BlockInfo {
  int ref = 0;
  bool cached = false;  // registered in the prefix cache under `key`
  bool in_lru = false;  // cached and unused: evictable
  BlockKey key, parent;
  int32_t tokens[kKvBlock];
  std::list<int>::iterator lru;
};

struct GSeq {
  std::vector<int32_t> tokens;  // every token; tokens[0..kv_len) have KV in the blocks
  int kv_len = 0;
  std::vector<int> blocks;      // block i holds positions [16 i, 16 i + 16)
  SamplingConfig sampling;
  uint64_t rng[4];
};

constexpr size_t kPoolHeadroom = size_t(1) << 30;  // device bytes a pool chunk leaves free

}  // namespace

struct GpuGenerator::Impl {
  Model& host;
  DeviceView view;
  int L, C, F, H, KVH, D, V, QKV, HD, KVD;
  size_t block_elems, block_bytes;
  int room_blocks;  // blocks for active sequences beyond the cache budget in the first chunk

  // pool
  std::vector<void*> chunks;
  size_t pool_bytes = 0;
  std::vector<bf16*> block_ptr;  // [blocks] host copy of the device table
  bf16** block_ptr_dev = nullptr;
  size_t block_ptr_dev_cap = 0;
  bool block_ptr_dirty = false;
  std::vector<BlockInfo> blocks;
  std::vector<int> free_list;
  std::list<int> lru;  // front = most recently released
  std::unordered_map<uint64_t, int> cache;  // key.a -> block
  std::unordered_map<int64_t, std::unique_ptr<GSeq>> seqs;

  // RoPE tables (as the CPU generator's ensure_rope)
  std::vector<float> cos_h, sin_h;
  int rope_len = 0;
  float* rope_dev = nullptr;  // [2][rope_dev_len][D/2]: cos, then sin
  int rope_dev_len = 0;

  // step buffers
  void* ws = nullptr;
  size_t ws_bytes = 0;
  int32_t* pin_in = nullptr;
  size_t pin_in_n = 0;
  float* pin_out = nullptr;
  size_t pin_out_n = 0;

  explicit Impl(Model& m) : host(m) {
    const ModelConfig& c = m.cfg;
    L = c.layers;
    C = c.hidden;
    F = c.inter;
    H = c.heads;
    KVH = c.kv_heads;
    D = c.head_dim;
    V = c.vocab;
    QKV = (H + 2 * KVH) * D;
    HD = H * D;
    KVD = KVH * D;
    block_elems = (size_t)L * 2 * kKvBlock * KVD;
    block_bytes = block_elems * sizeof(bf16);
    view = m.device->view();
  }
  ~Impl() {
    cudaSetDevice(view.device);
    if (view.stream) cudaStreamSynchronize((cudaStream_t)view.stream);
    for (void* p : chunks) cudaFree(p);
    if (block_ptr_dev) cudaFree(block_ptr_dev);
    if (rope_dev) cudaFree(rope_dev);
    if (ws) cudaFree(ws);
    if (pin_in) cudaFreeHost(pin_in);
    if (pin_out) cudaFreeHost(pin_out);
  }

  void use() { ANVIL_CUDA(cudaSetDevice(view.device)); }

  // ---- blocks ----
  void grow(size_t min_blocks, double budget) {
    use();
    size_t want;
    if (chunks.empty()) {
      const double cache_blocks = std::min(budget / (double)block_bytes, 1e9);
      want = (size_t)cache_blocks + (size_t)room_blocks;
    } else {
      want = std::max<size_t>((size_t)room_blocks, blocks.size() / 2);
    }
    want = std::max(want, min_blocks);
    size_t free_b = 0, total_b = 0;
    ANVIL_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const size_t avail = free_b > kPoolHeadroom ? (free_b - kPoolHeadroom) / block_bytes : 0;
    const size_t n = std::min(want, avail);
    auto out_of_memory = [&](const std::string& why) {
      return Error("GPU generation: out of device memory for the KV cache: " + std::to_string(min_blocks) +
                   " more blocks of " + std::to_string(block_bytes) + " bytes are needed (the pool has " +
                   std::to_string(blocks.size()) + " blocks, all in use), " + why);
    };
    if (n < min_blocks)
      throw out_of_memory(std::to_string(free_b >> 20) + " MiB are free on the device and " +
                          std::to_string(kPoolHeadroom >> 20) + " MiB are left for the step's activations");
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n * block_bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the error state
      throw out_of_memory(std::string("cudaMalloc failed: ") + cudaGetErrorString(e));
    }
    chunks.push_back(p);
    pool_bytes += n * block_bytes;
    const int first = (int)blocks.size();
    blocks.resize(blocks.size() + n);
    for (size_t i = 0; i < n; i++) block_ptr.push_back(static_cast<bf16*>(p) + i * block_elems);
    for (int i = (int)(first + n) - 1; i >= first; i--) free_list.push_back(i);  // lowest id popped first
    block_ptr_dirty = true;
  }

  void unregister(int b, GpuGenerator& g) {
    BlockInfo& bi = blocks[b];
    auto it = cache.find(bi.key.a);
    if (it != cache.end() && it->second == b) cache.erase(it);
    bi.cached = false;
    g.cache_bytes -= block_bytes;
    g.entries--;
  }

  void evict_lru_back(GpuGenerator& g) {
    const int b = lru.back();
    lru.pop_back();
    blocks[b].in_lru = false;
    unregister(b, g);
    free_list.push_back(b);
  }

  // Makes at least `need` blocks free: free ones, then evicting unused cached blocks (least
  // recently used first), then a new pool chunk. Throws (changing nothing a sequence sees) when
  // the device has no room.
  void reserve_free(size_t need, GpuGenerator& g) {
    if (free_list.size() >= need) return;
    if (chunks.empty()) {
      grow(need, g.cache_budget);
      if (free_list.size() >= need) return;
    }
    while (free_list.size() < need && !lru.empty()) evict_lru_back(g);
    if (free_list.size() < need) grow(need - free_list.size(), g.cache_budget);
  }

  int alloc_block() {
    const int b = free_list.back();
    free_list.pop_back();
    BlockInfo& bi = blocks[b];
    bi.ref = 1;
    bi.cached = false;
    bi.in_lru = false;
    return b;
  }

  void acquire(int b) {
    BlockInfo& bi = blocks[b];
    if (bi.in_lru) {
      lru.erase(bi.lru);
      bi.in_lru = false;
    }
    bi.ref++;
  }

  void release(int b) {
    BlockInfo& bi = blocks[b];
    if (--bi.ref > 0) return;
    if (bi.cached) {
      lru.push_front(b);
      bi.lru = lru.begin();
      bi.in_lru = true;
    } else {
      free_list.push_back(b);
    }
  }

  // ---- RoPE tables ----
  void ensure_rope(int positions, int max_positions) {
    const ModelConfig& cfg = host.cfg;
    const int half = D / 2;
    if (positions > rope_len) {
      const int n = std::max(positions, std::min(max_positions, std::max(2 * rope_len, 256)));
      cos_h.resize((size_t)n * half);
      sin_h.resize((size_t)n * half);
      for (int pos = rope_len; pos < n; pos++)
        for (int i = 0; i < half; i++) {  // exactly as model_forward and the CPU generator build them
          float ang = (float)pos * cfg.inv_freq[i];
          cos_h[(size_t)pos * half + i] = (float)std::cos((double)ang) * cfg.rope_attention_scaling;
          sin_h[(size_t)pos * half + i] = (float)std::sin((double)ang) * cfg.rope_attention_scaling;
        }
      rope_len = n;
    }
    if (rope_dev_len < rope_len) {
      if (rope_dev) ANVIL_CUDA(cudaFree(rope_dev));
      rope_dev = nullptr;
      rope_dev_len = 0;
      ANVIL_CUDA(cudaMalloc(&rope_dev, sizeof(float) * 2 * (size_t)rope_len * half));
      cudaStream_t s = (cudaStream_t)view.stream;
      ANVIL_CUDA(cudaMemcpyAsync(rope_dev, cos_h.data(), sizeof(float) * (size_t)rope_len * half,
                                 cudaMemcpyHostToDevice, s));
      ANVIL_CUDA(cudaMemcpyAsync(rope_dev + (size_t)rope_len * half, sin_h.data(),
                                 sizeof(float) * (size_t)rope_len * half, cudaMemcpyHostToDevice, s));
      rope_dev_len = rope_len;
    }
  }

  void upload_block_ptrs() {
    if (!block_ptr_dirty) return;
    if (block_ptr_dev_cap < block_ptr.size()) {
      if (block_ptr_dev) ANVIL_CUDA(cudaFree(block_ptr_dev));
      block_ptr_dev = nullptr;
      block_ptr_dev_cap = 0;
      ANVIL_CUDA(cudaMalloc(&block_ptr_dev, sizeof(bf16*) * block_ptr.size()));
      block_ptr_dev_cap = block_ptr.size();
    }
    // pageable source: the copy has read it when the call returns
    ANVIL_CUDA(cudaMemcpyAsync(block_ptr_dev, block_ptr.data(), sizeof(bf16*) * block_ptr.size(),
                               cudaMemcpyHostToDevice, (cudaStream_t)view.stream));
    block_ptr_dirty = false;
  }

  void ensure_ws(size_t bytes) {
    if (bytes <= ws_bytes) return;
    if (ws) ANVIL_CUDA(cudaFree(ws));  // the previous step ended with a stream synchronisation
    ws = nullptr;
    ws_bytes = 0;
    const size_t n = bytes + bytes / 4;
    ANVIL_CUDA(cudaMalloc(&ws, n));
    ws_bytes = n;
  }
  void ensure_pinned(size_t n_in, size_t n_out) {
    if (n_in > pin_in_n) {
      if (pin_in) ANVIL_CUDA(cudaFreeHost(pin_in));
      pin_in = nullptr;
      pin_in_n = 0;
      const size_t n = n_in + n_in / 4;
      ANVIL_CUDA(cudaMallocHost(&pin_in, n * sizeof(int32_t)));
      pin_in_n = n;
    }
    if (n_out > pin_out_n) {
      if (pin_out) ANVIL_CUDA(cudaFreeHost(pin_out));
      pin_out = nullptr;
      pin_out_n = 0;
      const size_t n = n_out + n_out / 4;
      ANVIL_CUDA(cudaMallocHost(&pin_out, n * sizeof(float)));
      pin_out_n = n;
    }
  }
};

GpuGenerator::GpuGenerator(std::shared_ptr<Model> m, int maxpos, double budget)
    : GeneratorBase(std::move(m), maxpos, budget) {
  if (!model || !model->device) throw Error("GPU generator: the model has no device copy");
  if (model->cfg.head_dim > 256)
    throw Error("GPU generation supports head_dim <= 256, the model has " + std::to_string(model->cfg.head_dim));
  impl_ = std::make_unique<Impl>(*model);
  const int per_seq = (max_positions + kKvBlock - 1) / kKvBlock;
  impl_->room_blocks = std::max(64, 2 * per_seq);
}

GpuGenerator::~GpuGenerator() = default;

size_t GpuGenerator::pool_bytes() const { return impl_->pool_bytes; }

int GpuGenerator::add(int64_t id, const int32_t* prompt, int n, const SamplingConfig& s) {
  Impl& g = *impl_;
  check_add_args(model->cfg, max_positions, prompt, n, s);
  if (g.seqs.count(id)) throw Error("sequence id already in use");
  auto seq = std::make_unique<GSeq>();
  seq->tokens.assign(prompt, prompt + n);
  seq->sampling = s;
  seed_rng(s.seed, seq->rng);
  // longest chain of cached full blocks matching the prompt, at most n - 1 tokens
  std::vector<int> hit;
  BlockKey parent;
  const int max_hit = (n - 1) / kKvBlock;
  for (int i = 0; i < max_hit && !g.cache.empty(); i++) {
    const int32_t* t = prompt + (size_t)i * kKvBlock;
    const BlockKey key = block_key(parent, t);
    auto it = g.cache.find(key.a);
    if (it == g.cache.end()) break;
    const BlockInfo& bi = g.blocks[it->second];
    if (!(bi.key == key) || !(bi.parent == parent) || std::memcmp(bi.tokens, t, sizeof(bi.tokens)) != 0) break;
    hit.push_back(it->second);
    parent = key;
  }
  for (int b : hit) g.acquire(b);  // out of the LRU before anything is evicted
  const size_t need = (size_t)((n + kKvBlock - 1) / kKvBlock) - hit.size();
  try {
    g.reserve_free(need, *this);
  } catch (...) {
    for (int b : hit) g.release(b);
    throw;
  }
  seq->blocks = hit;
  for (size_t i = 0; i < need; i++) seq->blocks.push_back(g.alloc_block());
  const int reused = (int)hit.size() * kKvBlock;
  seq->kv_len = reused;
  lookup_tokens += n;
  hit_tokens += reused;
  g.seqs[id] = std::move(seq);
  active = (int)g.seqs.size();
  return reused;
}

void GpuGenerator::remove(int64_t id, bool keep) {
  Impl& g = *impl_;
  auto it = g.seqs.find(id);
  if (it == g.seqs.end()) return;
  std::unique_ptr<GSeq> seq = std::move(it->second);
  g.seqs.erase(it);
  active = (int)g.seqs.size();
  if (keep && cache_budget > 0 && seq->kv_len > 0) {
    // register the full blocks under their hash chain; a block whose key is cached already (an
    // equal chain another sequence left) stays unregistered and is freed below
    const int full = std::min<int>(seq->kv_len / kKvBlock, (int)seq->blocks.size());
    BlockKey parent;
    for (int i = 0; i < full; i++) {
      const int32_t* t = seq->tokens.data() + (size_t)i * kKvBlock;
      const BlockKey key = block_key(parent, t);
      BlockInfo& bi = g.blocks[seq->blocks[i]];
      if (!bi.cached && g.cache.find(key.a) == g.cache.end()) {
        bi.cached = true;
        bi.key = key;
        bi.parent = parent;
        std::memcpy(bi.tokens, t, sizeof(bi.tokens));
        g.cache[key.a] = seq->blocks[i];
        cache_bytes += g.block_bytes;
        entries++;
      }
      parent = key;
    }
  }
  // release last block first: cached ones enter the LRU front in reverse, so a chain's tail
  // blocks are evicted before its head
  for (int i = (int)seq->blocks.size() - 1; i >= 0; i--) g.release(seq->blocks[i]);
  while ((double)cache_bytes.load() > cache_budget && !g.lru.empty()) g.evict_lru_back(*this);
}

void GpuGenerator::clear_cache() {
  Impl& g = *impl_;
  for (int b : g.lru) {
    g.blocks[b].in_lru = false;
    g.blocks[b].cached = false;
    g.free_list.push_back(b);
  }
  g.lru.clear();
  for (auto& kv : g.cache) g.blocks[kv.second].cached = false;  // in use: freed when released
  g.cache.clear();
  cache_bytes = 0;
  entries = 0;
}

void GpuGenerator::step(const std::vector<int64_t>& ids, std::vector<StepOutput>& out, const StepMasks& masks) {
  Impl& g = *impl_;
  const ModelConfig& cfg = model->cfg;
  const int C = g.C, F = g.F, H = g.H, KVH = g.KVH, D = g.D, V = g.V, QKV = g.QKV, HD = g.HD, L = g.L;
  const int B = (int)ids.size();
  out.assign(B, StepOutput{});
  if (B == 0) return;
  std::vector<GSeq*> seqs(B);
  std::unordered_set<int64_t> seen;
  size_t need = 0;
  int max_pos = 0, N = 0;
  for (int b = 0; b < B; b++) {
    auto it = g.seqs.find(ids[b]);
    if (it == g.seqs.end()) throw Error("step: unknown sequence id " + std::to_string(ids[b]));
    if (!seen.insert(ids[b]).second) throw Error("step: sequence id " + std::to_string(ids[b]) + " given twice");
    GSeq* s = it->second.get();
    seqs[b] = s;
    const int total = (int)s->tokens.size();
    if (total > max_positions) throw Error("step: sequence exceeds the model's positions");
    if (s->kv_len >= total) throw Error("step: sequence has no pending token");
    const size_t nb = (size_t)(total + kKvBlock - 1) / kKvBlock;
    if (nb > s->blocks.size()) need += nb - s->blocks.size();
    max_pos = std::max(max_pos, total);
    N += total - s->kv_len;
  }
  g.reserve_free(need, *this);  // throws before any sequence changes
  for (GSeq* s : seqs)
    while (s->blocks.size() * kKvBlock < s->tokens.size()) s->blocks.push_back(g.alloc_block());

  // ---- host: rows and block tables, one int buffer [tok N | pos N | row_bt N | last B | table] ----
  size_t nbt = 0;
  for (GSeq* s : seqs) nbt += s->blocks.size();
  auto al = [](size_t n) { return (n + 63) & ~size_t(63); };  // 256-byte aligned segments
  const size_t o_tok = 0, o_pos = al(N), o_rbt = o_pos + al(N), o_last = o_rbt + al(N), o_bt = o_last + al(B);
  const size_t n_ints = o_bt + al(nbt);
  g.use();
  g.ensure_pinned(n_ints, (size_t)B * V);
  int32_t* hi = g.pin_in;
  {
    int r = 0, bt = 0;
    for (int b = 0; b < B; b++) {
      GSeq* s = seqs[b];
      const int total = (int)s->tokens.size();
      for (int p = s->kv_len; p < total; p++, r++) {
        hi[o_tok + r] = s->tokens[p];
        hi[o_pos + r] = p;
        hi[o_rbt + r] = bt;
      }
      hi[o_last + b] = r - 1;
      for (int blk : s->blocks) hi[o_bt + bt++] = blk;
    }
  }

  // ---- device buffers ----
  cudaStream_t st = (cudaStream_t)g.view.stream;
  g.ensure_rope(max_pos, max_positions);
  g.upload_block_ptrs();
  auto layout = [&](ByteBump& bb, int32_t** ints, float** x0, float** x1, bf16** ln, float** rstd, bf16** qkv,
                    bf16** att, bf16** gu, bf16** hb, float** last, float** lnf, float** rstdf, float** logits) {
    *ints = bb.take<int32_t>(n_ints);
    *x0 = bb.take<float>((size_t)N * C);
    *x1 = bb.take<float>((size_t)N * C);
    *ln = bb.take<bf16>((size_t)N * C);
    *rstd = bb.take<float>(N);
    *qkv = bb.take<bf16>((size_t)N * QKV);
    *att = bb.take<bf16>((size_t)N * HD);
    *gu = bb.take<bf16>((size_t)N * 2 * F);
    *hb = bb.take<bf16>((size_t)N * F);
    *last = bb.take<float>((size_t)B * C);
    *lnf = bb.take<float>((size_t)B * C);
    *rstdf = bb.take<float>(B);
    *logits = bb.take<float>((size_t)B * V);
  };
  int32_t* d_ints;
  float *x0, *x1, *rstd, *last, *lnf, *rstdf, *logits;
  bf16 *ln, *qkv, *att, *gu, *hb;
  ByteBump dry;
  layout(dry, &d_ints, &x0, &x1, &ln, &rstd, &qkv, &att, &gu, &hb, &last, &lnf, &rstdf, &logits);
  g.ensure_ws(dry.used);
  ByteBump real{static_cast<char*>(g.ws), 0};
  layout(real, &d_ints, &x0, &x1, &ln, &rstd, &qkv, &att, &gu, &hb, &last, &lnf, &rstdf, &logits);
  ANVIL_CUDA(cudaMemcpyAsync(d_ints, hi, sizeof(int32_t) * n_ints, cudaMemcpyHostToDevice, st));
  const int32_t* d_tok = d_ints + o_tok;
  const int32_t* d_pos = d_ints + o_pos;
  const int32_t* d_rbt = d_ints + o_rbt;
  const int32_t* d_last = d_ints + o_last;
  const int32_t* d_bt = d_ints + o_bt;
  const float* cos_t = g.rope_dev;
  const float* sin_t = g.rope_dev + (size_t)g.rope_dev_len * (D / 2);
  bf16* const* bp = g.block_ptr_dev;

  // ---- the decoder (the weights as they are now on the device) ----
  const float* hbase = model->params->data();
  const float* p32 = g.view.p32;
  const bf16* p16 = static_cast<const bf16*>(g.view.p16);
  auto f32 = [&](const float* hp) { return p32 + (hp - hbase); };
  auto b16 = [&](const float* hp) { return p16 + (hp - hbase); };
  const ParamPtrs W = model->ptrs(model->params->data());
  Gemm& gm = *g.view.gemm;
  float* x = x0;  // residual stream [N, C] fp32, ping-pong between x0 and x1
  float* y = x1;
  embedding_forward(x, d_tok, f32(W.wte), N, C, st);
  for (int l = 0; l < L; l++) {
    const LayerPtrs& lp = W.layers[l];
    rmsnorm_forward(ln, rstd, x, f32(lp.ln1), N, C, cfg.eps, st);
    gm.nt(qkv, DType::BF16, {ln, DType::BF16, C}, {b16(lp.wqkv), DType::BF16, C}, N, C, QKV);
    rope_forward(qkv, lp.bqkv ? f32(lp.bqkv) : nullptr, d_pos, cos_t, sin_t, N, H, KVH, D, st);
    paged_kv_write(bp, qkv, d_pos, d_rbt, d_bt, N, l, H, KVH, D, st);
    paged_attention(att, qkv, bp, d_pos, d_rbt, d_bt, N, l, H, KVH, D, st);
    gm.nt(y, DType::F32, {att, DType::BF16, HD}, {b16(lp.wo), DType::BF16, HD}, N, HD, C, {x, DType::F32, C});
    std::swap(x, y);  // x = x + att @ Wo^T
    rmsnorm_forward(ln, rstd, x, f32(lp.ln2), N, C, cfg.eps, st);
    gm.nt(gu, DType::BF16, {ln, DType::BF16, C}, {b16(lp.wgu), DType::BF16, C}, N, C, 2 * F);
    swiglu_forward(hb, gu, N, F, st);
    gm.nt(y, DType::F32, {hb, DType::BF16, F}, {b16(lp.wdown), DType::BF16, F}, N, F, C, {x, DType::F32, C});
    std::swap(x, y);  // x = x + h @ Wdown^T
  }
  gather_rows(last, x, d_last, B, C, st);
  rmsnorm_forward(lnf, rstdf, last, f32(W.normf), B, C, cfg.eps, st);
  gm.nt(logits, DType::F32, {lnf, DType::F32, C}, {f32(W.lm), DType::F32, C}, B, C, V);
  ANVIL_CUDA(cudaMemcpyAsync(g.pin_out, logits, sizeof(float) * (size_t)B * V, cudaMemcpyDeviceToHost, st));
  check_launch("generation step");
  {
    cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) throw_cuda(e, "generation step", __FILE__, __LINE__);
  }

  // ---- host: sampling by the CPU sampler (constrained sequences within their masks), then the sequences advance ----
  std::vector<const SamplingConfig*> cfgs(B);
  std::vector<uint64_t*> rngs(B);
  for (int b = 0; b < B; b++) {
    cfgs[b] = &seqs[b]->sampling;
    rngs[b] = seqs[b]->rng;
  }
  sample_rows(g.pin_out, B, V, cfgs.data(), rngs.data(), out, masks);
  for (int b = 0; b < B; b++) {
    seqs[b]->kv_len = (int)seqs[b]->tokens.size();
    seqs[b]->tokens.push_back(out[b].token);
  }
}

DecodeBench bench_decode(const ModelConfig& cfg, int batch, int prompt_len, int steps, float temperature,
                         uint64_t seed) {
  if (batch < 1 || prompt_len < 1 || steps < 1) throw Error("benchDecode: batch, promptLen and steps must be >= 1");
  auto model = std::make_shared<Model>(cfg);
  model->init_random(seed, 0.02f);
  model->device = std::make_shared<DeviceModel>(*model);
  DecodeBench r;
  {
    GpuGenerator gen(model, prompt_len + steps + 2, 0);
    std::mt19937_64 rng(seed);
    std::vector<int64_t> ids(batch);
    std::vector<int32_t> prompt(prompt_len);
    for (int b = 0; b < batch; b++) {
      for (auto& t : prompt) t = (int32_t)(rng() % (uint64_t)cfg.vocab);
      SamplingConfig sc;
      sc.temperature = temperature;
      sc.seed = seed + b;
      gen.add(b, prompt.data(), prompt_len, sc);
      ids[b] = b;
    }
    std::vector<StepOutput> out;
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    gen.step(ids, out);  // prefill
    auto t1 = clock::now();
    gen.step(ids, out);  // warm-up decode step (GEMM plans for N = batch)
    auto t2 = clock::now();
    for (int i = 1; i < steps; i++) gen.step(ids, out);
    auto t3 = clock::now();
    r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    const int timed = steps - 1;
    if (timed > 0) {
      r.decode_seconds = std::chrono::duration<double>(t3 - t2).count();
      r.tokens_per_second = (double)batch * timed / r.decode_seconds;
      r.step_ms = r.decode_seconds / timed * 1e3;
    } else {  // one decode step only: it is the warm-up, report it
      r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
      r.tokens_per_second = (double)batch / r.decode_seconds;
      r.step_ms = r.decode_seconds * 1e3;
    }
    r.kv_pool_bytes = gen.pool_bytes();
  }
  return r;
}

}  // namespace cuda
}  // namespace anvil
