// check_attention_kernels (checks.cuh): the GPU tree attention (attention.cu) against the CPU
// reference (../attention.cc) on random bf16-valued inputs, on chains, forests, a bushy random
// tree, a prompt with branches and N = 1, for head dims that take the SIMT fallback (16, 24) and
// the tensor-core path (32, 64, 128), GQA and MHA; plus GPU-only tree == flat checks. Head dims
// 64 and 128 run both tensor-core implementations, the wmma kernels (attention.cu, name suffix
// "(wmma)") and the FlashAttention-2 kernels (attention_fa2.cu, "(fa2)"), selected with
// attn::set_impl, against the same reference with the same tolerances; D = 32 only has the wmma
// path. The fa2-only cases at the end (GQA group of 6, longer trees) cover the double-buffered
// tile loops and the skipped tiles of both directions at D = 64 and 128.
//
// Every tree is generated with its parents already in DFS pre-order (a node is attached to a node
// of the current root-to-last path), so analyze_tree's pre[i] == i (asserted) and the CPU and the
// GPU index nodes the same way; the GPU gets end[] = tree.end.
//
// The forward is compared with the CPU forward on the same bf16-rounded qkv. The backward is
// compared with the CPU backward fed the GPU's own out (bf16 -> float) and lse, so that
// Di = rowsum(dO * O) is the same on both sides and the check isolates the backward kernel.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|, atol scaled by the largest |cpu| of the tensor):
//  * tensor cores: P (and dS) are rounded to bf16 (relative error <= 2^-9) before the P V, P^T dO,
//    dS^T Q and dS K products, and out is stored as bf16 (<= 2^-9 relative): the forward's error
//    is <= 2^-9 max|v| + 2^-9 |out|, so out uses rtol 1e-2, atol 1e-2 * scale; the gradients sum
//    such terms with cancellation (rows of dS sum to ~0), so rtol 2e-2, atol 2e-2 * scale.
//  * SIMT fallback: fp32 throughout; out only carries its bf16 rounding (rtol 1e-2, atol 1e-3 *
//    scale); gradients rtol 2e-3, atol 2e-3 * scale.
//  * lse (fp32 both paths, scores from identical bf16 operands): atol 5e-4, rtol 2e-4.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../kernels.h"
#include "../tree.h"
#include "attention_common.cuh"
#include "checks.cuh"
#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed ^ 0x9e3779b97f4a7c15ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * (float)((next() >> 40) * (1.0 / 16777216.0)); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { ANVIL_CUDA(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& h) { ANVIL_CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    ANVIL_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); i++) y[i] = __float2bfloat16(x[i]);
  return y;
}
std::vector<float> to_f32(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i++) y[i] = __bfloat162float(x[i]);
  return y;
}

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, (double)std::fabs(v));
  return m;
}

// atol = atol_rel * max|ref| (at least atol_rel * 1e-3 so that an all-zero reference is not
// compared with atol 0)
KernelCheck compare(const std::string& name, const std::vector<float>& gpu, const std::vector<float>& ref,
                    double atol_rel, double rtol, bool absolute_atol = false) {
  KernelCheck c;
  c.name = name;
  c.max_ref = max_abs(ref);
  c.atol = absolute_atol ? atol_rel : atol_rel * std::max(c.max_ref, 1e-3);
  c.rtol = rtol;
  c.max_abs_err = 0;
  c.failures = 0;
  if (gpu.size() != ref.size()) {
    c.failures = 1;
    c.passed = false;
    c.detail = "size mismatch: gpu " + std::to_string(gpu.size()) + " vs cpu " + std::to_string(ref.size());
    return c;
  }
  for (size_t i = 0; i < ref.size(); i++) {
    const double g = gpu[i], r = ref[i];
    const double err = std::fabs(g - r);
    const bool ok = std::isfinite(g) && err <= c.atol + c.rtol * std::fabs(r);
    if (std::isfinite(err)) c.max_abs_err = std::max(c.max_abs_err, err);
    else c.max_abs_err = INFINITY;
    if (!ok) {
      if (c.failures == 0)
        c.detail = "first failure at index " + std::to_string(i) + ": gpu " + std::to_string(g) + " cpu " +
                   std::to_string(r);
      c.failures++;
    }
  }
  c.passed = c.failures == 0;
  return c;
}

KernelCheck failed(const std::string& name, const std::string& why) {
  KernelCheck c;
  c.name = name;
  c.max_abs_err = 0;
  c.max_ref = 0;
  c.atol = 0;
  c.rtol = 0;
  c.failures = 1;
  c.passed = false;
  c.detail = why;
  return c;
}

// ---- trees, parents in DFS pre-order ----
std::vector<int32_t> chain(int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; i++) p[i] = i - 1;
  return p;
}
std::vector<int32_t> forest(const std::vector<int>& lengths) {
  std::vector<int32_t> p;
  for (int len : lengths)
    for (int k = 0; k < len; k++) p.push_back(k == 0 ? -1 : (int32_t)p.size() - 1);
  return p;
}
// Each new node hangs off a node of the current root-to-last path: mostly the last node (long
// runs), sometimes a few levels up (branches), sometimes a new root.
std::vector<int32_t> bushy(int n, Rng& rng) {
  std::vector<int32_t> p(n);
  std::vector<int32_t> path;
  for (int i = 0; i < n; i++) {
    const int u = rng.below(100);
    if (!path.empty() && u >= 70) {
      const int up = 1 + rng.below(std::min<int>((int)path.size(), u >= 97 ? (int)path.size() : 12));
      path.resize(path.size() - std::min<size_t>(path.size(), up));
    }
    p[i] = path.empty() ? -1 : path.back();
    path.push_back(i);
  }
  return p;
}
std::vector<int32_t> prompt_branches(int prompt, int branches, int len) {
  std::vector<int32_t> p = chain(prompt);
  for (int b = 0; b < branches; b++)
    for (int k = 0; k < len; k++) p.push_back(k == 0 ? prompt - 1 : (int32_t)p.size() - 1);
  return p;
}

bool tensor_core_path(int D) { return D % 16 == 0 && D >= 32 && D <= 128; }

std::string shape_name(int N, int H, int KVH, int D) {
  return "N=" + std::to_string(N) + " H=" + std::to_string(H) + " KVH=" + std::to_string(KVH) +
         " D=" + std::to_string(D) + (tensor_core_path(D) ? " (tensor cores)" : " (SIMT)");
}

// the implementations a case runs: {kAuto} for the SIMT fallback, {kWmma} for D = 32, both
// tensor-core implementations for D = 64 and 128
std::vector<int> impls_for(int D) {
  if (!tensor_core_path(D)) return {attn::kAuto};
  if (!attn::fa2_supports(D)) return {attn::kWmma};
  return {attn::kWmma, attn::kFa2};
}
std::string impl_suffix(int impl) { return impl == attn::kWmma ? " (wmma)" : impl == attn::kFa2 ? " (fa2)" : ""; }

struct Inputs {
  std::vector<float> qkv, dout;  // bf16-rounded values
};
Inputs random_inputs(int N, int H, int KVH, int D, Rng& rng) {
  const int QKV = (H + 2 * KVH) * D;
  Inputs in;
  in.qkv.resize((size_t)N * QKV);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < QKV; c++) {
      const bool is_v = c >= (H + KVH) * D;  // q, k in [-2, 2] so that the softmaxes are peaked
      in.qkv[(size_t)n * QKV + c] = bf16_round(is_v ? rng.uniform(-1.f, 1.f) : rng.uniform(-2.f, 2.f));
    }
  in.dout.resize((size_t)N * H * D);
  for (auto& x : in.dout) x = bf16_round(rng.uniform(-1.f, 1.f));
  return in;
}

struct GpuResult {
  std::vector<float> out, lse, dqkv;
};
// selects `impl` for its calls (restores the previous choice, also on a throw)
struct ImplScope {
  int prev;
  explicit ImplScope(int impl) : prev(attn::get_impl()) { attn::set_impl(impl); }
  ~ImplScope() { attn::set_impl(prev); }
};

GpuResult run_gpu(const std::vector<float>& qkv, const std::vector<float>& dout, const std::vector<int32_t>& end, int N,
                  int H, int KVH, int D, int impl) {
  const ImplScope scope(impl);
  const int QKV = (H + 2 * KVH) * D;
  DevBuf<bf16> d_qkv((size_t)N * QKV), d_out((size_t)N * H * D), d_dout((size_t)N * H * D);
  DevBuf<float> d_lse((size_t)N * H), d_dqkv((size_t)N * QKV);
  DevBuf<int32_t> d_end(N);
  DevBuf<char> d_ws(tree_attention_workspace_bytes(N, H));
  d_qkv.upload(to_bf16(qkv));
  d_dout.upload(to_bf16(dout));
  d_end.upload(end);
  ANVIL_CUDA(cudaMemset(d_out.p, 0xff, d_out.n * sizeof(bf16)));  // NaN: rows left unwritten show up
  ANVIL_CUDA(cudaMemset(d_lse.p, 0xff, d_lse.n * sizeof(float)));
  ANVIL_CUDA(cudaMemset(d_dqkv.p, 0, d_dqkv.n * sizeof(float)));
  tree_attention_forward(d_out.p, d_lse.p, d_qkv.p, d_end.p, N, H, KVH, D, d_ws.p, 0);
  check_launch("check_attention_kernels forward");
  tree_attention_backward(d_dqkv.p, d_dout.p, d_out.p, d_lse.p, d_qkv.p, d_end.p, N, H, KVH, D, d_ws.p, 0);
  check_launch("check_attention_kernels backward");
  ANVIL_CUDA(cudaDeviceSynchronize());
  GpuResult r;
  r.out = to_f32(d_out.download());
  r.lse = d_lse.download();
  r.dqkv = d_dqkv.download();
  return r;
}

// the q, k or v part (part 0, 1, 2) of a [N, QKV] matrix
std::vector<float> qkv_part(const std::vector<float>& x, int N, int H, int KVH, int D, int part) {
  const int QKV = (H + 2 * KVH) * D;
  const int c0 = part == 0 ? 0 : part == 1 ? H * D : (H + KVH) * D;
  const int w = part == 0 ? H * D : KVH * D;
  std::vector<float> y((size_t)N * w);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < w; c++) y[(size_t)n * w + c] = x[(size_t)n * QKV + c0 + c];
  return y;
}

void check_case(std::vector<KernelCheck>& res, const std::string& tree_name, const std::vector<int32_t>& parents,
                int H, int KVH, int D, Rng& rng) {
  const int N = (int)parents.size();
  const std::string tag = " tree=" + tree_name + " " + shape_name(N, H, KVH, D);
  const TreeInfo tree = analyze_tree(parents.data(), N);
  for (int i = 0; i < N; i++)
    if (tree.pre[i] != i) {
      res.push_back(failed("tree_attention setup" + tag, "generated tree is not in pre-order at node " + std::to_string(i)));
      return;
    }
  const Inputs in = random_inputs(N, H, KVH, D, rng);
  const int QKV = (H + 2 * KVH) * D;
  std::vector<float> out_ref((size_t)N * H * D), lse_ref((size_t)N * H);
  ::anvil::tree_attention_forward(out_ref.data(), lse_ref.data(), in.qkv.data(), tree, H, KVH, D);
  const bool tc = tensor_core_path(D);
  for (const int impl : impls_for(D)) {
    const std::string itag = tag + impl_suffix(impl);
    GpuResult g;
    try {
      g = run_gpu(in.qkv, in.dout, tree.end, N, H, KVH, D, impl);
    } catch (const std::exception& e) {
      res.push_back(failed("tree_attention run" + itag, e.what()));
      continue;
    }
    res.push_back(compare("tree_attention_forward out" + itag, g.out, out_ref, tc ? 1e-2 : 1e-3, 1e-2));
    res.push_back(compare("tree_attention_forward lse" + itag, g.lse, lse_ref, 5e-4, 2e-4, true));
    // CPU backward from the GPU's out and lse (same Di on both sides)
    std::vector<float> dqkv_ref((size_t)N * QKV, 0.f);
    ::anvil::tree_attention_backward(dqkv_ref.data(), in.dout.data(), g.out.data(), g.lse.data(), in.qkv.data(), tree,
                                     H, KVH, D);
    const char* part_name[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++)
      res.push_back(compare(std::string("tree_attention_backward ") + part_name[part] + itag,
                            qkv_part(g.dqkv, N, H, KVH, D, part), qkv_part(dqkv_ref, N, H, KVH, D, part),
                            tc ? 2e-2 : 2e-3, tc ? 2e-2 : 2e-3));
  }
}

// GPU only: a prompt with two branches equals the two root-to-leaf sequences packed as a forest.
// Forward rows of the tree equal the corresponding rows of the flat pack (prompt rows twice). The
// flat pack's second prompt copy gets dout = 0, so both packs carry the same loss (a shared
// prompt's own predictions are counted once, as the merged tree counts them); then dq of every
// other flat row equals its tree row's, and the tree's dk, dv of a prompt row are the sums over
// its two flat copies.
void check_tree_equals_flat(std::vector<KernelCheck>& res, int H, int KVH, int D, Rng& rng) {
  const int P = 100, A = 60, B = 50;
  const std::vector<int32_t> tparents = prompt_branches(P, 1, A);  // prompt + branch A
  std::vector<int32_t> tp = tparents;
  for (int k = 0; k < B; k++) tp.push_back(k == 0 ? P - 1 : (int32_t)tp.size() - 1);  // + branch B
  const int NT = P + A + B, NF = (P + A) + (P + B);
  const std::vector<int32_t> fp = forest({P + A, P + B});
  const std::string tag = " " + shape_name(NT, H, KVH, D) + " prompt=100 branches=60,50 vs forest N=310";
  const TreeInfo tt = analyze_tree(tp.data(), NT), ft = analyze_tree(fp.data(), NF);
  for (int i = 0; i < NT; i++)
    if (tt.pre[i] != i) {
      res.push_back(failed("tree_attention tree == flat setup" + tag, "tree not in pre-order"));
      return;
    }
  std::vector<int> map(NF);  // flat row -> tree row
  for (int f = 0; f < NF; f++) {
    if (f < P + A) map[f] = f;
    else {
      const int g = f - (P + A);
      map[f] = g < P ? g : g - P + (P + A);
    }
  }
  const int QKV = (H + 2 * KVH) * D, HD = H * D;
  const Inputs in = random_inputs(NT, H, KVH, D, rng);
  std::vector<float> fqkv((size_t)NF * QKV), fdout((size_t)NF * HD);
  auto second_prompt_copy = [&](int f) { return f >= P + A && f < P + A + P; };
  for (int f = 0; f < NF; f++) {
    std::copy_n(in.qkv.begin() + (size_t)map[f] * QKV, QKV, fqkv.begin() + (size_t)f * QKV);
    if (second_prompt_copy(f))
      std::fill_n(fdout.begin() + (size_t)f * HD, HD, 0.f);
    else
      std::copy_n(in.dout.begin() + (size_t)map[f] * HD, HD, fdout.begin() + (size_t)f * HD);
  }
  for (const int impl : impls_for(D)) {
  const std::string itag = tag + impl_suffix(impl);
  const GpuResult gt = run_gpu(in.qkv, in.dout, tt.end, NT, H, KVH, D, impl);
  const GpuResult gf = run_gpu(fqkv, fdout, ft.end, NF, H, KVH, D, impl);
  std::vector<float> t_out((size_t)NF * HD), t_lse((size_t)NF * H), t_dq, f_dq;
  for (int f = 0; f < NF; f++) {
    std::copy_n(gt.out.begin() + (size_t)map[f] * HD, HD, t_out.begin() + (size_t)f * HD);
    std::copy_n(gt.lse.begin() + (size_t)map[f] * H, H, t_lse.begin() + (size_t)f * H);
    if (second_prompt_copy(f)) continue;  // its dout is 0 on the flat side: no dq to compare
    t_dq.insert(t_dq.end(), gt.dqkv.begin() + (size_t)map[f] * QKV, gt.dqkv.begin() + (size_t)map[f] * QKV + HD);
    f_dq.insert(f_dq.end(), gf.dqkv.begin() + (size_t)f * QKV, gf.dqkv.begin() + (size_t)f * QKV + HD);
  }
  // the flat pack's k, v gradients summed onto tree rows
  const int KVD = 2 * KVH * D;
  std::vector<float> f_dkv((size_t)NT * KVD, 0.f), t_dkv((size_t)NT * KVD);
  for (int f = 0; f < NF; f++)
    for (int c = 0; c < KVD; c++) f_dkv[(size_t)map[f] * KVD + c] += gf.dqkv[(size_t)f * QKV + HD + c];
  for (int t = 0; t < NT; t++)
    std::copy_n(gt.dqkv.begin() + (size_t)t * QKV + HD, KVD, t_dkv.begin() + (size_t)t * KVD);
  const bool tc = tensor_core_path(D);
  res.push_back(compare("tree_attention tree == flat out" + itag, t_out, gf.out, tc ? 1e-2 : 2e-3, 1e-2));
  res.push_back(compare("tree_attention tree == flat lse" + itag, t_lse, gf.lse, 5e-4, 2e-4, true));
  res.push_back(compare("tree_attention tree == flat dq" + itag, t_dq, f_dq, tc ? 2e-2 : 2e-3, tc ? 2e-2 : 2e-3));
  res.push_back(compare("tree_attention tree == flat dk,dv" + itag, t_dkv, f_dkv, tc ? 2e-2 : 2e-3, tc ? 2e-2 : 2e-3));
  }
}

}  // namespace

std::vector<KernelCheck> check_attention_kernels(uint64_t seed) {
  Rng rng(seed);
  std::vector<KernelCheck> res;
  struct Shape {
    int H, KVH, D;
  };
  const std::vector<int32_t> ch300 = chain(300);
  for (const Shape& s : {Shape{4, 2, 16}, Shape{4, 2, 64}, Shape{2, 2, 128}, Shape{4, 1, 32}})
    check_case(res, "chain300", ch300, s.H, s.KVH, s.D, rng);
  const std::vector<int32_t> fo = forest({100, 77, 130});
  for (const Shape& s : {Shape{4, 2, 16}, Shape{4, 2, 64}, Shape{2, 2, 128}})
    check_case(res, "forest(100,77,130)", fo, s.H, s.KVH, s.D, rng);
  const std::vector<int32_t> bu = bushy(500, rng);
  for (const Shape& s : {Shape{4, 2, 16}, Shape{4, 2, 64}, Shape{2, 2, 128}, Shape{2, 1, 24}})
    check_case(res, "bushy500", bu, s.H, s.KVH, s.D, rng);
  const std::vector<int32_t> pb = prompt_branches(200, 8, 40);
  for (const Shape& s : {Shape{4, 2, 16}, Shape{4, 2, 64}, Shape{4, 4, 128}})
    check_case(res, "prompt200+8x40", pb, s.H, s.KVH, s.D, rng);
  const std::vector<int32_t> one = chain(1);
  for (const Shape& s : {Shape{4, 2, 16}, Shape{4, 2, 64}, Shape{2, 2, 128}})
    check_case(res, "single", one, s.H, s.KVH, s.D, rng);
  // longer tile loops: a 700-token prompt with 4 branches of 300 (fully visible prompt tiles,
  // skipped sibling tiles, partial tiles at every branch border)
  check_case(res, "prompt700+4x300", prompt_branches(700, 4, 300), 4, 2, 128, rng);
  check_tree_equals_flat(res, 4, 2, 64, rng);
  check_tree_equals_flat(res, 4, 2, 16, rng);
  // after the cases above (their random inputs stay as they were): Qwen2-like GQA groups of 6 and
  // 7 heads, longer forests and trees (more tiles in flight, both skip directions)
  check_case(res, "forest(700,333,40)", forest({700, 333, 40}), 12, 2, 128, rng);
  check_case(res, "prompt700+4x300", prompt_branches(700, 4, 300), 14, 2, 64, rng);
  check_case(res, "bushy1500", bushy(1500, rng), 6, 2, 64, rng);
  check_tree_equals_flat(res, 4, 2, 128, rng);
  return res;
}

}  // namespace cuda
}  // namespace anvil
