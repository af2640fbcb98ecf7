// GPU forward/backward of the Llama / Qwen2 decoder over a packed prefix tree (see kernels.cuh for
// the dtypes and the pre-order node layout, ../model.cc for the CPU reference this mirrors step by
// step). One CUDA stream per model; every public call ends with a stream synchronisation, so a
// failure surfaces as an anvil::Error from the call that caused it.
#include "device_model.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "device_lora.cuh"
#include "gemm.h"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

int device_ordinal() {
  const char* s = std::getenv("ANVIL_CUDA_DEVICE");
  return s ? std::atoi(s) : 0;
}

// Stream-ordered allocations from the device's default pool, kept (not returned to the driver)
// between packs so that a training loop does not pay cudaMalloc per step; trim_cache() releases.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  cudaStream_t s = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(size_t n, cudaStream_t stream) : bytes(n), s(stream) {
    if (n) ANVIL_CUDA(cudaMallocAsync(&p, n, stream));
  }
  ~DeviceBuffer() {
    if (p) cudaFreeAsync(p, s);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// ANVIL_CUDA_PROFILE=1: CUDA events between the stages of a forward/backward, summed per stage
// name and printed to stderr when the call ends (costs a little; off by default).
struct StageProfile {
  bool on = std::getenv("ANVIL_CUDA_PROFILE") != nullptr;
  cudaStream_t s;
  std::vector<std::pair<const char*, cudaEvent_t>> marks;
  explicit StageProfile(cudaStream_t stream) : s(stream) { mark("start"); }
  void mark(const char* what) {
    if (!on) return;
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) return;
    cudaEventRecord(e, s);
    marks.emplace_back(what, e);
  }
  void report(const char* call) {
    if (!on || marks.size() < 2) return;
    cudaEventSynchronize(marks.back().second);
    std::vector<std::pair<const char*, float>> acc;
    float total = 0;
    for (size_t i = 1; i < marks.size(); i++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second);
      total += ms;
      bool found = false;
      for (auto& a : acc)
        if (std::string(a.first) == marks[i].first) {
          a.second += ms;
          found = true;
        }
      if (!found) acc.emplace_back(marks[i].first, ms);
    }
    std::fprintf(stderr, "[anvil cuda profile] %s %.2f ms:", call, total);
    for (auto& a : acc) std::fprintf(stderr, " %s %.2f", a.first, a.second);
    std::fprintf(stderr, "\n");
  }
  ~StageProfile() {
    for (auto& m : marks) cudaEventDestroy(m.second);
  }
};

struct LayerDev {
  bf16* ln1;    // [N, C]
  float* rstd1; // [N]
  bf16* qkv;    // [N, QKV] after bias and RoPE
  bf16* att;    // [N, H*D]
  float* lse;   // [N, H]
  float* mid;   // [N, C]
  bf16* ln2;    // [N, C]
  float* rstd2; // [N]
  bf16* gu;     // [N, 2F]
  bf16* h;      // [N, F]
};

// Weight pointers of one layer: bf16 copies for GEMM operands, fp32 masters for norms and biases.
struct LayerW {
  const float *ln1, *ln2, *bqkv;
  const bf16 *wqkv, *wo, *wgu, *wdown;
};
struct LayerG {
  float *ln1, *ln2, *bqkv, *wqkv, *wo, *wgu, *wdown;
};

}  // namespace

struct DeviceActs {
  std::shared_ptr<DeviceModel::Impl> model;
  int N = 0, M = 0, R = 0, max_depth = 0;
  bool keep_logits = false;
  std::vector<int32_t> order;  // order[p] = caller's node index at pre-order position p
  std::vector<int32_t> is_root;  // [N] in caller order
  std::unique_ptr<DeviceBuffer> arena;
  int32_t *tokens, *depth, *end, *internal, *child_start, *children;  // pre-order ids
  float *cos_t, *sin_t;
  std::vector<float*> res;  // L+1 residual streams [N, C] fp32
  std::vector<LayerDev> layers;
  float *lnf, *rstdf, *lse_int, *ent_int, *logits, *logp, *ent;
  void* attn_ws;
  // LoRA: the adapters this forward ran with, u = A dropout(x) [N, r] per site, and for a
  // training forward with dropout its seed and each pre-order row's caller node index.
  const LoraState* lora = nullptr;
  bool drop = false;
  uint64_t seed = 0;
  std::vector<bf16*> lora_u;
  int32_t* node = nullptr;
  ForwardBytes bytes;
};

struct DeviceModel::Impl {
  Model& host;
  int dev = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Gemm> gemm;
  size_t P = 0;
  float* p32 = nullptr;  // [P] fp32 master weights (host arena layout)
  bf16* p16 = nullptr;   // [P] bf16 copy used by the GEMMs
  float* g32 = nullptr;  // [P] gradients (null while LoRA adapters are on: the base is frozen)
  float* m32 = nullptr;  // [P] AdamW moments, allocated at the first step
  float* v32 = nullptr;
  DeviceLora lora;       // the adapters, while the host model has them
  double* acc = nullptr;  // one double for reductions
  float* scalar = nullptr;
  // clipGradNorm's scale, not yet applied: the next optimizer step folds it into its gradient
  // read (saving a full read+write pass over the gradients); anything else that reads or adds to
  // the gradients first applies it (apply_pending_clip).
  bool clip_pending = false;
  void apply_pending_clip() {
    if (!clip_pending) return;
    scale_inplace(tg(), tn(), scalar, stream);
    clip_pending = false;
  }
  // the trainable parameters' gradients and count: the adapters' while LoRA is on, else the base's
  float* tg() const { return lora.host ? lora.g32 : g32; }
  size_t tn() const { return lora.host ? lora.n : P; }

  explicit Impl(Model& m) : host(m) {}
  ~Impl() {
    cudaSetDevice(dev);
    if (stream) cudaStreamSynchronize(stream);
    gemm.reset();
    lora.release();
    for (void* p : {(void*)p32, (void*)p16, (void*)g32, (void*)m32, (void*)v32, (void*)acc, (void*)scalar})
      if (p) cudaFree(p);
    if (stream) cudaStreamDestroy(stream);
  }

  void use() { ANVIL_CUDA(cudaSetDevice(dev)); }
  void sync(const char* what) {
    check_launch(what);
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
  }

  const float* f32(const float* host_ptr) const { return p32 + (host_ptr - host.params->data()); }
  const bf16* b16(const float* host_ptr) const { return p16 + (host_ptr - host.params->data()); }
  float* grad(const float* host_ptr) const { return g32 + (host_ptr - host.params->data()); }

  LayerW layer_w(const LayerPtrs& l) const {
    return {f32(l.ln1), f32(l.ln2), l.bqkv ? f32(l.bqkv) : nullptr, b16(l.wqkv), b16(l.wo), b16(l.wgu), b16(l.wdown)};
  }
  LayerG layer_g(const LayerPtrs& l) const {
    return {grad(l.ln1), grad(l.ln2), l.bqkv ? grad(l.bqkv) : nullptr, grad(l.wqkv), grad(l.wo), grad(l.wgu),
            grad(l.wdown)};
  }
};

DeviceProbe probe_device() {
  DeviceProbe d;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  if (e != cudaSuccess) {
    d.why = std::string("no usable CUDA driver or device (") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
    return d;
  }
  if (n == 0) {
    d.why = "the CUDA driver reports no device";
    return d;
  }
  const int dev = device_ordinal();
  if (dev < 0 || dev >= n) {
    d.why = "ANVIL_CUDA_DEVICE=" + std::to_string(dev) + " but there are " + std::to_string(n) + " devices";
    return d;
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) {
    d.why = std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(e);
    return d;
  }
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_bytes = p.totalGlobalMem;
  if (p.major < 8) {
    d.why = d.name + " has compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
            "; the CUDA backend needs bf16 tensor cores (8.0 or newer)";
    return d;
  }
  d.ok = true;
  return d;
}

std::string gemm_library() {
  try {
    return Gemm::library();
  } catch (const std::exception& e) {
    return e.what();
  }
}

DeviceModel::DeviceModel(Model& host) : impl_(std::make_shared<Impl>(host)) {
  Impl& m = *impl_;
  DeviceProbe probe = probe_device();
  if (!probe.ok) throw Error("CUDA backend: " + probe.why);
  m.dev = device_ordinal();
  m.use();
  // Keep freed activation memory in the pool between packs (stream-ordered reuse).
  cudaMemPool_t pool;
  ANVIL_CUDA(cudaDeviceGetDefaultMemPool(&pool, m.dev));
  uint64_t threshold = UINT64_MAX;
  ANVIL_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  ANVIL_CUDA(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.P = host.num_params;
  const size_t need = m.P * (4 + 2 + 4);
  size_t free_b = 0, total_b = 0;
  ANVIL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (need + (size_t(256) << 20) > free_b)
    throw Error("CUDA backend: the model needs " + std::to_string(need >> 20) + " MiB for weights and gradients, " +
                std::to_string(free_b >> 20) + " MiB are free on " + probe.name);
  ANVIL_CUDA(cudaMalloc(&m.p32, m.P * sizeof(float)));
  ANVIL_CUDA(cudaMalloc(&m.p16, m.P * sizeof(bf16)));
  ANVIL_CUDA(cudaMalloc(&m.g32, m.P * sizeof(float)));
  ANVIL_CUDA(cudaMalloc(&m.acc, sizeof(double)));
  ANVIL_CUDA(cudaMalloc(&m.scalar, sizeof(float)));
  ANVIL_CUDA(cudaMemsetAsync(m.g32, 0, m.P * sizeof(float), m.stream));
  m.gemm = std::make_unique<Gemm>(m.stream);
  push_params();
}

DeviceModel::~DeviceModel() = default;

void DeviceModel::push_params() {
  Impl& m = *impl_;
  m.use();
  ANVIL_CUDA(cudaMemcpyAsync(m.p32, m.host.params->data(), m.P * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  f32_to_bf16(m.p16, m.p32, m.P, m.stream);
  m.lora.push(m.stream);
  m.sync("push_params");
}

void DeviceModel::pull_params() {
  Impl& m = *impl_;
  m.use();
  ANVIL_CUDA(cudaMemcpyAsync(m.host.params->data(), m.p32, m.P * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  m.lora.pull(m.stream);
  m.sync("pull_params");
}

void DeviceModel::pull_grads() {
  Impl& m = *impl_;
  m.use();
  m.apply_pending_clip();
  if (m.lora.host)
    m.lora.pull_grads(m.stream);
  else
    ANVIL_CUDA(cudaMemcpyAsync(m.host.grads->data(), m.g32, m.P * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  m.sync("pull_grads");
}

void DeviceModel::lora_changed() {
  Impl& m = *impl_;
  m.use();
  m.sync("lora_changed");
  m.lora.release();
  m.clip_pending = false;
  if (m.host.lora) {
    // the base is frozen: no gradients, no moments (the host freed its mirrors of them too)
    for (float** p : {&m.g32, &m.m32, &m.v32})
      if (*p) {
        cudaFree(*p);
        *p = nullptr;
      }
    m.lora.attach(m.host.lora.get(), m.stream);
  } else if (!m.g32) {
    ANVIL_CUDA(cudaMalloc(&m.g32, m.P * sizeof(float)));
    ANVIL_CUDA(cudaMemsetAsync(m.g32, 0, m.P * sizeof(float), m.stream));
  }
  m.sync("lora_changed");
}

std::shared_ptr<DeviceActs> DeviceModel::forward(const TreeInfo& tree, const int32_t* tokens, float* logp,
                                                 float* entropy, LogitsMode mode, double max_bytes,
                                                 ForwardBytes* bytes_out, const LoraState* lora, bool drop,
                                                 uint64_t dropout_seed) {
  Impl& m = *impl_;
  m.use();
  const ModelConfig& cfg = m.host.cfg;
  const int N = tree.n, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  const int QKV = (H + 2 * KVH) * D, HD = H * D, V = cfg.vocab, L = cfg.layers, half = D / 2;
  const int M = (int)tree.internal.size();
  const int P = tree.max_depth + 1;

  auto a = std::make_shared<DeviceActs>();
  a->model = impl_;
  a->N = N;
  a->M = M;
  a->max_depth = tree.max_depth;
  if (lora != m.lora.host) throw Error("internal error: the device's LoRA adapters are not the host model's");
  a->lora = lora;
  a->drop = lora && drop;
  a->seed = dropout_seed;
  const int lr = lora ? lora->cfg.rank : 0, lsites = lora ? (int)lora->sites.size() : 0;
  const size_t lmax_in = lora ? (size_t)lora->max_in() : 0;

  // Layout of the kept arena (dry run first, to check the limit before allocating).
  auto layout = [&](ByteBump& b) {
    a->tokens = b.take<int32_t>(N);
    a->depth = b.take<int32_t>(N);
    a->end = b.take<int32_t>(N);
    a->internal = b.take<int32_t>(std::max(M, 1));
    a->child_start = b.take<int32_t>(N + 1);
    a->children = b.take<int32_t>(N);
    a->cos_t = b.take<float>((size_t)P * half);
    a->sin_t = b.take<float>((size_t)P * half);
    a->res.assign(L + 1, nullptr);
    for (int l = 0; l <= L; l++) a->res[l] = b.take<float>((size_t)N * C);
    a->layers.assign(L, LayerDev{});
    for (int l = 0; l < L; l++) {
      LayerDev& d = a->layers[l];
      d.ln1 = b.take<bf16>((size_t)N * C);
      d.rstd1 = b.take<float>(N);
      d.qkv = b.take<bf16>((size_t)N * QKV);
      d.att = b.take<bf16>((size_t)N * HD);
      d.lse = b.take<float>((size_t)N * H);
      d.mid = b.take<float>((size_t)N * C);
      d.ln2 = b.take<bf16>((size_t)N * C);
      d.rstd2 = b.take<float>(N);
      d.gu = b.take<bf16>((size_t)N * 2 * F);
      d.h = b.take<bf16>((size_t)N * F);
    }
    a->lnf = b.take<float>((size_t)N * C);
    a->rstdf = b.take<float>(N);
    a->lse_int = b.take<float>(std::max(M, 1));
    a->ent_int = b.take<float>(std::max(M, 1));
    a->logp = b.take<float>(N);
    a->ent = b.take<float>(N);
    a->attn_ws = b.take<char>(tree_attention_workspace_bytes(N, H));
    a->logits = a->keep_logits ? b.take<float>((size_t)M * V) : nullptr;
    a->lora_u.assign(lsites, nullptr);
    for (int i = 0; i < lsites; i++) a->lora_u[i] = b.take<bf16>((size_t)N * lr);
    a->node = a->drop ? b.take<int32_t>(N) : nullptr;
  };
  // LM-head chunk rows: up to 1 GiB of logits per chunk, at least 64 rows.
  const size_t chunk_rows = std::min<size_t>(std::max<size_t>(M, 1), std::max<size_t>(64, (size_t(1) << 28) / V));
  a->R = (int)chunk_rows;
  // LoRA scratch: the dropped-out input [N, max_in] bf16 (forward and backward), du [N, r] bf16 and
  // the dropped-out input's gradient [N, max_in] fp32 (backward)
  const size_t lora_fwd = a->drop ? (size_t)N * lmax_in * 2 + 256 : 0;
  const size_t lora_bwd = lora ? (size_t)N * lr * 2 + 256 + (a->drop ? (size_t)N * lmax_in * 6 + 512 : 0) : 0;
  auto scratch_fwd = [&](bool keep) {
    return (chunk_rows * C + (keep ? 0 : chunk_rows * V)) * sizeof(float) + 512 + lora_fwd;
  };
  auto scratch_bwd = [&]() {
    return (size_t)N * (C * 4 /*dln f32*/ + C * 4 /*dres*/ + C * 2 /*dres16*/ + F * 4 /*dh*/ + 2 * F * 2 /*dgu16*/ +
                        HD * 2 /*datt16*/ + QKV * 4 /*dqkv32*/ + QKV * 2 /*dqkv16*/ + 8 /*dlogp, dent*/) +
           chunk_rows * (2 * C + V) * sizeof(float) + 16 * 256 + lora_bwd;
  };
  ByteBump dry;
  a->keep_logits = false;
  layout(dry);
  const size_t without = dry.used;
  const size_t logits_bytes = (size_t)M * V * sizeof(float);
  if (mode == LogitsMode::Keep) {
    a->keep_logits = true;
  } else if (mode == LogitsMode::Auto) {
    const double with = (double)(without + logits_bytes + std::max(scratch_fwd(true), scratch_bwd()));
    a->keep_logits = logits_bytes <= (size_t(8) << 30) && (max_bytes <= 0 || with <= max_bytes);
  }
  ByteBump count;
  layout(count);
  a->bytes.kept = count.used;
  a->bytes.forward_scratch = scratch_fwd(a->keep_logits);
  a->bytes.backward_scratch = scratch_bwd();
  if (max_bytes > 0) {
    const double need = (double)a->bytes.kept + (double)std::max(a->bytes.forward_scratch, a->bytes.backward_scratch);
    if (need > max_bytes)
      throw Error("pack needs " + std::to_string((int64_t)need) +
                  " bytes of device activations and scratch, over the limit maxBytes = " +
                  std::to_string((int64_t)max_bytes));
  }
  if (bytes_out) *bytes_out = a->bytes;
  a->arena = std::make_unique<DeviceBuffer>(count.used, m.stream);
  ByteBump real{static_cast<char*>(a->arena->p), 0};
  layout(real);

  // ---- host side: the tree in pre-order ----
  a->order = tree.order;
  a->is_root.assign(N, 0);
  std::vector<int32_t> ints((size_t)N * 5 + 1 + std::max(M, 1), 0);
  int32_t* h_tok = ints.data();
  int32_t* h_depth = h_tok + N;
  int32_t* h_end = h_depth + N;
  int32_t* h_cs = h_end + N;       // [N+1]
  int32_t* h_ch = h_cs + N + 1;    // [N]
  int32_t* h_int = h_ch + N;       // [M]
  int rows = 0;
  h_cs[0] = 0;
  for (int p = 0; p < N; p++) {
    const int i = tree.order[p];
    h_tok[p] = tokens[i];
    h_depth[p] = tree.depth[i];
    h_end[p] = tree.end[i];
    if (tree.parent[i] < 0) a->is_root[i] = 1;
    int k = h_cs[p];
    for (int c = tree.child_start[i]; c < tree.child_start[i + 1]; c++) h_ch[k++] = tree.pre[tree.children[c]];
    h_cs[p + 1] = k;
    if (k > h_cs[p]) h_int[rows++] = p;
  }
  if (rows != M) throw Error("internal error: pre-order internal node count mismatch");
  std::vector<float> tables((size_t)P * half * 2);
  for (int pos = 0; pos < P; pos++)
    for (int i = 0; i < half; i++) {
      float ang = (float)pos * cfg.inv_freq[i];  // as transformers: float32(pos * inv_freq)
      tables[(size_t)pos * half + i] = (float)std::cos((double)ang) * cfg.rope_attention_scaling;
      tables[(size_t)P * half + (size_t)pos * half + i] = (float)std::sin((double)ang) * cfg.rope_attention_scaling;
    }
  cudaStream_t s = m.stream;
  ANVIL_CUDA(cudaMemcpyAsync(a->tokens, h_tok, sizeof(int32_t) * N, cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->depth, h_depth, sizeof(int32_t) * N, cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->end, h_end, sizeof(int32_t) * N, cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->child_start, h_cs, sizeof(int32_t) * (N + 1), cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->children, h_ch, sizeof(int32_t) * N, cudaMemcpyHostToDevice, s));
  if (M > 0) ANVIL_CUDA(cudaMemcpyAsync(a->internal, h_int, sizeof(int32_t) * M, cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->cos_t, tables.data(), sizeof(float) * P * half, cudaMemcpyHostToDevice, s));
  ANVIL_CUDA(cudaMemcpyAsync(a->sin_t, tables.data() + (size_t)P * half, sizeof(float) * P * half,
                             cudaMemcpyHostToDevice, s));
  if (a->node) ANVIL_CUDA(cudaMemcpyAsync(a->node, a->order.data(), sizeof(int32_t) * N, cudaMemcpyHostToDevice, s));
  DeviceBuffer lora_scratch(lora_fwd, s);  // the dropped-out input of one site at a time
  bf16* xd = static_cast<bf16*>(lora_scratch.p);

  // ---- the decoder ----
  const ParamPtrs W = m.host.ptrs(m.host.params->data());
  Gemm& g = *m.gemm;
  StageProfile prof(s);
  embedding_forward(a->res[0], a->tokens, m.f32(W.wte), N, C, s);
  prof.mark("upload+embedding");
  for (int l = 0; l < L; l++) {
    const LayerW w = m.layer_w(W.layers[l]);
    LayerDev& d = a->layers[l];
    rmsnorm_forward(d.ln1, d.rstd1, a->res[l], w.ln1, N, C, cfg.eps, s);
    prof.mark("norm");
    g.nt(d.qkv, DType::BF16, {d.ln1, DType::BF16, C}, {w.wqkv, DType::BF16, C}, N, C, QKV);
    prof.mark("gemm");
    if (lora) {
      lora_group_forward(m.lora, g, l, kLoraGroupQkv, d.qkv, DType::BF16, d.ln1, N, a->lora_u.data(), a->drop, a->seed, a->node,
                         xd, s);
      prof.mark("lora");
    }
    rope_forward(d.qkv, w.bqkv, a->depth, a->cos_t, a->sin_t, N, H, KVH, D, s);
    prof.mark("rope");
    tree_attention_forward(d.att, d.lse, d.qkv, a->end, N, H, KVH, D, a->attn_ws, s);
    prof.mark("attention");
    g.nt(d.mid, DType::F32, {d.att, DType::BF16, HD}, {w.wo, DType::BF16, HD}, N, HD, C, {a->res[l], DType::F32, C});
    prof.mark("gemm");
    if (lora) {
      lora_group_forward(m.lora, g, l, kLoraGroupO, d.mid, DType::F32, d.att, N, a->lora_u.data(), a->drop, a->seed, a->node, xd,
                         s);
      prof.mark("lora");
    }
    rmsnorm_forward(d.ln2, d.rstd2, d.mid, w.ln2, N, C, cfg.eps, s);
    prof.mark("norm");
    g.nt(d.gu, DType::BF16, {d.ln2, DType::BF16, C}, {w.wgu, DType::BF16, C}, N, C, 2 * F);
    prof.mark("gemm");
    if (lora) {
      lora_group_forward(m.lora, g, l, kLoraGroupGu, d.gu, DType::BF16, d.ln2, N, a->lora_u.data(), a->drop, a->seed, a->node, xd,
                         s);
      prof.mark("lora");
    }
    swiglu_forward(d.h, d.gu, N, F, s);
    prof.mark("swiglu");
    g.nt(a->res[l + 1], DType::F32, {d.h, DType::BF16, F}, {w.wdown, DType::BF16, F}, N, F, C,
         {d.mid, DType::F32, C});
    prof.mark("gemm");
    if (lora) {
      lora_group_forward(m.lora, g, l, kLoraGroupDown, a->res[l + 1], DType::F32, d.h, N, a->lora_u.data(), a->drop, a->seed,
                         a->node, xd, s);
      prof.mark("lora");
    }
    check_launch("decoder layer forward");
  }
  rmsnorm_forward(a->lnf, a->rstdf, a->res[L], m.f32(W.normf), N, C, cfg.eps, s);
  prof.mark("norm");
  ANVIL_CUDA(cudaMemsetAsync(a->logp, 0, sizeof(float) * N, s));
  ANVIL_CUDA(cudaMemsetAsync(a->ent, 0, sizeof(float) * N, s));
  {
    DeviceBuffer scratch(scratch_fwd(a->keep_logits), s);
    ByteBump b{static_cast<char*>(scratch.p), 0};
    float* hrows = b.take<float>(chunk_rows * C);
    float* chunk = a->keep_logits ? nullptr : b.take<float>(chunk_rows * V);
    const float* lm = m.f32(W.lm);
    for (int r0 = 0; r0 < M; r0 += a->R) {
      const int Rn = std::min(a->R, M - r0);
      float* lg = a->keep_logits ? a->logits + (size_t)r0 * V : chunk;
      gather_rows(hrows, a->lnf, a->internal + r0, Rn, C, s);
      g.nt(lg, DType::F32, {hrows, DType::F32, C}, {lm, DType::F32, C}, Rn, C, V);
      prof.mark("lm head gemm");
      logprob_forward(a->logp, a->ent, a->lse_int, a->ent_int, lg, a->tokens, a->internal, a->child_start,
                      a->children, r0, Rn, V, s);
      prof.mark("log-softmax");
    }
    check_launch("LM head forward");
  }
  std::vector<float> out((size_t)N * 2);
  ANVIL_CUDA(cudaMemcpyAsync(out.data(), a->logp, sizeof(float) * N, cudaMemcpyDeviceToHost, s));
  ANVIL_CUDA(cudaMemcpyAsync(out.data() + N, a->ent, sizeof(float) * N, cudaMemcpyDeviceToHost, s));
  m.sync("forward");
  prof.report("forward");
  for (int p = 0; p < N; p++) {
    logp[a->order[p]] = out[p];
    entropy[a->order[p]] = out[N + p];
  }
  return a;
}

void DeviceModel::backward(DeviceActs& a, const float* dlogp_host, const float* dent_host) {
  Impl& m = *impl_;
  m.use();
  const ModelConfig& cfg = m.host.cfg;
  const int N = a.N, C = cfg.hidden, F = cfg.inter, H = cfg.heads, KVH = cfg.kv_heads, D = cfg.head_dim;
  const int QKV = (H + 2 * KVH) * D, HD = H * D, V = cfg.vocab, L = cfg.layers, M = a.M;
  cudaStream_t s = m.stream;
  Gemm& g = *m.gemm;

  DeviceBuffer scratch(a.bytes.backward_scratch, s);
  ByteBump b{static_cast<char*>(scratch.p), 0};
  float* dln = b.take<float>((size_t)N * C);     // d(norm output) fp32: dlnf, then each layer's dln2 / dln1
  float* dres = b.take<float>((size_t)N * C);    // d(residual stream) fp32
  bf16* dres16 = b.take<bf16>((size_t)N * C);
  float* dh = b.take<float>((size_t)N * F);
  bf16* dgu16 = b.take<bf16>((size_t)N * 2 * F);
  bf16* datt16 = b.take<bf16>((size_t)N * HD);
  float* dqkv32 = b.take<float>((size_t)N * QKV);
  bf16* dqkv16 = b.take<bf16>((size_t)N * QKV);
  float* dlogp = b.take<float>(N);
  float* dent = b.take<float>(N);
  float* hrows = b.take<float>((size_t)a.R * C);
  float* dhrows = b.take<float>((size_t)a.R * C);
  float* dlogits = b.take<float>((size_t)a.R * V);
  // LoRA: du [N, r] bf16; with dropout the regenerated input [N, max_in] bf16 and its gradient fp32
  const LoraState* lora = a.lora;
  if (lora != m.lora.host)
    throw Error("backward: the model's LoRA adapters were enabled, replaced or merged after this forward; run the forward again");
  const size_t lmax_in = lora ? (size_t)lora->max_in() : 0;
  bf16* du = lora ? b.take<bf16>((size_t)N * lora->cfg.rank) : nullptr;
  bf16* xd = a.drop ? b.take<bf16>((size_t)N * lmax_in) : nullptr;
  float* dxd = a.drop ? b.take<float>((size_t)N * lmax_in) : nullptr;
  if (b.used > scratch.bytes) throw Error("internal error: backward scratch layout exceeds its plan");
  const bool frozen = lora != nullptr;  // the base has no gradients: only the input-gradient GEMMs run

  std::vector<float> host((size_t)N * 2);
  for (int p = 0; p < N; p++) {
    host[p] = dlogp_host[a.order[p]];
    host[N + p] = dent_host ? dent_host[a.order[p]] : 0.f;
  }
  ANVIL_CUDA(cudaMemcpyAsync(dlogp, host.data(), sizeof(float) * N, cudaMemcpyHostToDevice, s));
  if (dent_host) ANVIL_CUDA(cudaMemcpyAsync(dent, host.data() + N, sizeof(float) * N, cudaMemcpyHostToDevice, s));

  m.apply_pending_clip();  // gradients accumulate onto the clipped ones
  const ParamPtrs W = m.host.ptrs(m.host.params->data());
  const float* lm = m.f32(W.lm);
  float* dlm = frozen ? nullptr : m.grad(W.lm);
  StageProfile prof(s);
  // ---- LM head ----
  ANVIL_CUDA(cudaMemsetAsync(dln, 0, sizeof(float) * N * C, s));
  for (int r0 = 0; r0 < M; r0 += a.R) {
    const int Rn = std::min(a.R, M - r0);
    gather_rows(hrows, a.lnf, a.internal + r0, Rn, C, s);
    const float* lg = dlogits;
    if (a.keep_logits)
      lg = a.logits + (size_t)r0 * V;
    else
      g.nt(dlogits, DType::F32, {hrows, DType::F32, C}, {lm, DType::F32, C}, Rn, C, V);  // recompute the chunk
    prof.mark("lm head gemm");
    logprob_backward(dlogits, lg, a.lse_int, a.ent_int, dlogp, dent_host ? dent : nullptr, a.tokens, a.internal,
                     a.child_start, a.children, r0, Rn, V, s);
    prof.mark("log-softmax");
    g.nn(dhrows, DType::F32, {dlogits, DType::F32, V}, {lm, DType::F32, C}, Rn, C, V);
    if (dlm) g.tn_acc(dlm, {dlogits, DType::F32, V}, {hrows, DType::F32, C}, Rn, C, V);
    prof.mark("lm head gemm");
    scatter_rows(dln, dhrows, a.internal + r0, Rn, C, s);
  }
  ANVIL_CUDA(cudaMemsetAsync(dres, 0, sizeof(float) * N * C, s));
  rmsnorm_backward(dres, frozen ? nullptr : m.grad(W.normf), dln, a.res[L], m.f32(W.normf), a.rstdf, N, C, s);
  prof.mark("norm");
  check_launch("LM head backward");

  // ---- decoder layers, last to first; dres holds d(res[l+1]) on entry ----
  for (int l = L - 1; l >= 0; l--) {
    const LayerW w = m.layer_w(W.layers[l]);
    const LayerG gw = frozen ? LayerG{} : m.layer_g(W.layers[l]);  // all null when frozen
    LayerDev& d = a.layers[l];
    bf16* const* u = a.lora_u.data();
    // res[l+1] = mid + h @ Wdown^T
    f32_to_bf16(dres16, dres, (size_t)N * C, s);
    prof.mark("convert");
    g.nn(dh, DType::F32, {dres16, DType::BF16, C}, {w.wdown, DType::BF16, F}, N, F, C);
    if (!frozen) g.tn_acc(gw.wdown, {dres16, DType::BF16, C}, {d.h, DType::BF16, F}, N, F, C);
    prof.mark("gemm");
    if (lora) {
      lora_group_backward(m.lora, g, l, kLoraGroupDown, dh, DType::F32, dres16, d.h, N, u, a.drop, a.seed, a.node, xd, dxd, du, s);
      prof.mark("lora");
    }
    swiglu_backward(dgu16, dh, d.gu, N, F, s);
    prof.mark("swiglu");
    g.nn(dln, DType::F32, {dgu16, DType::BF16, 2 * F}, {w.wgu, DType::BF16, C}, N, C, 2 * F);
    if (!frozen) g.tn_acc(gw.wgu, {dgu16, DType::BF16, 2 * F}, {d.ln2, DType::BF16, C}, N, C, 2 * F);
    prof.mark("gemm");
    if (lora) {
      lora_group_backward(m.lora, g, l, kLoraGroupGu, dln, DType::F32, dgu16, d.ln2, N, u, a.drop, a.seed, a.node, xd, dxd, du, s);
      prof.mark("lora");
    }
    rmsnorm_backward(dres, gw.ln2, dln, d.mid, w.ln2, d.rstd2, N, C, s);  // dres = d(mid)
    prof.mark("norm");
    // mid = res[l] + att @ Wo^T
    f32_to_bf16(dres16, dres, (size_t)N * C, s);
    prof.mark("convert");
    g.nn(datt16, DType::BF16, {dres16, DType::BF16, C}, {w.wo, DType::BF16, HD}, N, HD, C);
    if (!frozen) g.tn_acc(gw.wo, {dres16, DType::BF16, C}, {d.att, DType::BF16, HD}, N, HD, C);
    prof.mark("gemm");
    if (lora) {
      lora_group_backward(m.lora, g, l, kLoraGroupO, datt16, DType::BF16, dres16, d.att, N, u, a.drop, a.seed, a.node, xd, dxd, du,
                          s);
      prof.mark("lora");
    }
    ANVIL_CUDA(cudaMemsetAsync(dqkv32, 0, sizeof(float) * N * QKV, s));
    tree_attention_backward(dqkv32, datt16, d.att, d.lse, d.qkv, a.end, N, H, KVH, D, a.attn_ws, s);
    prof.mark("attention");
    rope_backward(dqkv16, gw.bqkv, dqkv32, a.depth, a.cos_t, a.sin_t, N, H, KVH, D, s);
    prof.mark("rope");
    g.nn(dln, DType::F32, {dqkv16, DType::BF16, QKV}, {w.wqkv, DType::BF16, C}, N, C, QKV);
    if (!frozen) g.tn_acc(gw.wqkv, {dqkv16, DType::BF16, QKV}, {d.ln1, DType::BF16, C}, N, C, QKV);
    prof.mark("gemm");
    if (lora) {
      lora_group_backward(m.lora, g, l, kLoraGroupQkv, dln, DType::F32, dqkv16, d.ln1, N, u, a.drop, a.seed, a.node, xd, dxd, du,
                          s);
      prof.mark("lora");
    }
    rmsnorm_backward(dres, gw.ln1, dln, a.res[l], w.ln1, d.rstd1, N, C, s);  // dres = d(res[l])
    prof.mark("norm");
    check_launch("decoder layer backward");
  }
  if (!frozen) embedding_backward(m.grad(W.wte), dres, a.tokens, N, C, s);
  prof.mark("embedding");
  m.sync("backward");
  prof.report("backward");
}

void DeviceModel::zero_grad() {
  Impl& m = *impl_;
  m.use();
  ANVIL_CUDA(cudaMemsetAsync(m.tg(), 0, m.tn() * sizeof(float), m.stream));
  m.clip_pending = false;
  m.sync("zero_grad");
}

double DeviceModel::grad_norm() {
  Impl& m = *impl_;
  m.use();
  m.apply_pending_clip();
  ANVIL_CUDA(cudaMemsetAsync(m.acc, 0, sizeof(double), m.stream));
  sum_squares(m.acc, m.tg(), m.tn(), m.stream);
  double ss = 0;
  ANVIL_CUDA(cudaMemcpyAsync(&ss, m.acc, sizeof(double), cudaMemcpyDeviceToHost, m.stream));
  m.sync("grad_norm");
  return std::sqrt(ss);
}

double DeviceModel::clip_grad_norm(double max_norm) {
  Impl& m = *impl_;
  const double norm = grad_norm();
  if (!std::isfinite(norm)) throw Error("gradient norm is not finite (NaN or Inf in the gradients)");
  if (norm > max_norm) {
    const float scale = (float)(max_norm / (norm + 1e-6));
    ANVIL_CUDA(cudaMemcpyAsync(m.scalar, &scale, sizeof(float), cudaMemcpyHostToDevice, m.stream));
    m.sync("clip_grad_norm");  // the host float must not go out of scope before the copy ran
    m.clip_pending = true;
  }
  return norm;
}

void DeviceModel::adamw(const std::vector<uint8_t>& decay, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step) {
  Impl& m = *impl_;
  m.use();
  const float* scale = m.clip_pending ? m.scalar : nullptr;
  if (m.lora.host) {  // the adapters alone; the base is frozen
    DeviceLora& L = m.lora;
    L.alloc_moments(m.stream);
    const std::vector<ParamTensor>& ts = L.host->tensors;
    if (decay.size() != ts.size()) throw Error("adamw: decay needs one entry per adapter tensor");
    for (size_t i = 0; i < ts.size(); i++) {
      const ParamTensor& t = ts[i];
      adamw_update(L.p32 + t.offset, L.p16 + t.offset, L.g32 + t.offset, L.m32 + t.offset, L.v32 + t.offset, t.numel, lr,
                   beta1, beta2, eps, decay[i] ? weight_decay : 0.0f, step, scale, m.stream);
    }
  } else {
    if (!m.m32) {
      ANVIL_CUDA(cudaMalloc(&m.m32, m.P * sizeof(float)));
      ANVIL_CUDA(cudaMalloc(&m.v32, m.P * sizeof(float)));
      ANVIL_CUDA(cudaMemsetAsync(m.m32, 0, m.P * sizeof(float), m.stream));
      ANVIL_CUDA(cudaMemsetAsync(m.v32, 0, m.P * sizeof(float), m.stream));
    }
    for (size_t i = 0; i < m.host.tensors.size(); i++) {
      const ParamTensor& t = m.host.tensors[i];
      adamw_update(m.p32 + t.offset, m.p16 + t.offset, m.g32 + t.offset, m.m32 + t.offset, m.v32 + t.offset, t.numel,
                   lr, beta1, beta2, eps, decay[i] ? weight_decay : 0.0f, step, scale, m.stream);
    }
  }
  m.clip_pending = false;
  m.sync("adamw");
}

bool DeviceModel::pull_moments(float* m_out, float* v_out) {
  Impl& m = *impl_;
  m.use();
  const bool lora = m.lora.host != nullptr;
  float* dm = lora ? m.lora.m32 : m.m32;
  float* dv = lora ? m.lora.v32 : m.v32;
  if (!dm) return false;
  ANVIL_CUDA(cudaMemcpyAsync(m_out, dm, m.tn() * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  ANVIL_CUDA(cudaMemcpyAsync(v_out, dv, m.tn() * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  m.sync("pull_moments");
  return true;
}

void DeviceModel::push_moments(const float* m_in, const float* v_in) {
  Impl& m = *impl_;
  m.use();
  float *dm, *dv;
  if (m.lora.host) {
    m.lora.alloc_moments(m.stream);
    dm = m.lora.m32;
    dv = m.lora.v32;
  } else {
    if (!m.m32) {
      ANVIL_CUDA(cudaMalloc(&m.m32, m.P * sizeof(float)));
      ANVIL_CUDA(cudaMalloc(&m.v32, m.P * sizeof(float)));
    }
    dm = m.m32;
    dv = m.v32;
  }
  ANVIL_CUDA(cudaMemcpyAsync(dm, m_in, m.tn() * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  ANVIL_CUDA(cudaMemcpyAsync(dv, v_in, m.tn() * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  m.sync("push_moments");  // the caller's host arrays must outlive the copies
}

size_t DeviceModel::param_bytes() const { return impl_->P * (sizeof(float) + sizeof(bf16)) + impl_->lora.bytes_params(); }
size_t DeviceModel::grad_bytes() const { return impl_->tn() * sizeof(float); }
size_t DeviceModel::optimizer_bytes() const {
  const Impl& m = *impl_;
  return (m.lora.host ? m.lora.m32 != nullptr : m.m32 != nullptr) ? m.tn() * 2 * sizeof(float) : 0;
}

size_t DeviceModel::cached_bytes() {
  Impl& m = *impl_;
  m.use();
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, m.dev) != cudaSuccess) return 0;
  uint64_t reserved = 0, used = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  return reserved > used ? (size_t)(reserved - used) : 0;
}

void DeviceModel::trim_cache() {
  Impl& m = *impl_;
  m.use();
  m.sync("trim_cache");
  cudaMemPool_t pool;
  ANVIL_CUDA(cudaDeviceGetDefaultMemPool(&pool, m.dev));
  ANVIL_CUDA(cudaMemPoolTrimTo(pool, 0));
}

DeviceView DeviceModel::view() const {
  const Impl& m = *impl_;
  // The GPU generator reads the base weights alone: refuse rather than generate without the adapters.
  if (m.lora.host)
    throw Error("the CUDA generator does not apply unmerged LoRA adapters: merge them into the model first (mergeLora), "
                "or generate on the CPU backend");
  DeviceView v;
  v.device = m.dev;
  v.stream = m.stream;
  v.p32 = m.p32;
  v.p16 = m.p16;
  v.gemm = m.gemm.get();
  return v;
}

double bench_gemm_bf16(int M, int N, int K, double min_seconds) {
  ANVIL_CUDA(cudaSetDevice(device_ordinal()));
  cudaStream_t s;
  ANVIL_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Cleanup {
    cudaStream_t s;
    std::vector<void*> ptrs;
    ~Cleanup() {
      cudaStreamSynchronize(s);
      for (void* p : ptrs) cudaFree(p);
      cudaStreamDestroy(s);
    }
  } clean{s, {}};
  float* tmp;
  bf16 *A, *B, *C;
  ANVIL_CUDA(cudaMalloc(&A, sizeof(bf16) * M * K));
  clean.ptrs.push_back(A);
  ANVIL_CUDA(cudaMalloc(&B, sizeof(bf16) * N * K));
  clean.ptrs.push_back(B);
  ANVIL_CUDA(cudaMalloc(&C, sizeof(bf16) * M * N));
  clean.ptrs.push_back(C);
  const size_t big = std::max((size_t)M * K, (size_t)N * K);
  ANVIL_CUDA(cudaMalloc(&tmp, sizeof(float) * big));
  clean.ptrs.push_back(tmp);
  // random-looking data: zeros would flatter the tensor cores (less switching power)
  std::vector<float> h(big);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (auto& v : h) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = (float)((x >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  ANVIL_CUDA(cudaMemcpy(tmp, h.data(), sizeof(float) * big, cudaMemcpyHostToDevice));
  f32_to_bf16(A, tmp, (size_t)M * K, s);
  f32_to_bf16(B, tmp, (size_t)N * K, s);
  Gemm g(s);
  auto run = [&] { g.nt(C, DType::BF16, {A, DType::BF16, K}, {B, DType::BF16, K}, M, K, N); };
  cudaEvent_t e0, e1;
  ANVIL_CUDA(cudaEventCreate(&e0));
  ANVIL_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) run();
  double best = 1e30, total = 0;
  while (total < min_seconds) {
    ANVIL_CUDA(cudaEventRecord(e0, s));
    run();
    ANVIL_CUDA(cudaEventRecord(e1, s));
    ANVIL_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    ANVIL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms * 1e-3);
    total += ms * 1e-3;
    if (ms <= 0) break;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

}  // namespace cuda
}  // namespace anvil
