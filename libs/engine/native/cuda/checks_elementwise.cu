// check_elementwise_kernels: every kernel of elementwise.cu run on seeded random inputs and
// compared element by element with the CPU reference kernel of ../kernels.h on the same inputs.
// bf16 inputs are rounded on the host first and the CPU gets the rounded values, so a comparison
// measures only the GPU kernel's own error (fp32 arithmetic order, expf vs the CPU's fast_exp,
// FMA contraction, atomics' summation order, and one final bf16 rounding for bf16 outputs).
//
// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), "scale" = max |cpu| of the compared tensor:
//   - pure data movement, bf16 conversion, scale_inplace: exact (atol = rtol = 0);
//   - bf16 outputs: rtol = 2^-7 (one round-to-nearest is <= 2^-8 relative; the fp32 value
//     before rounding may differ slightly, which can move a rounding by at most one more
//     half-ulp), atol = 1e-5 * scale for values that cancel;
//   - fp32 outputs: rtol = 1e-5, widened as sqrt(length) / 4 for reductions over `length`
//     terms (fp32_tol), atol = the same factor times scale (cancellation in sums);
//   - logprob: lse/logp/entropy over V terms get atol 1e-5 * max(1, sqrt(V) / 8) (the CPU sums
//     e^z in a few fp32 SIMD lanes of ~V/8 terms each);
//   - sum_squares (double accumulation of exact products): rtol 1e-9.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../kernels.h"
#include "../lora.h"
#include "../tree.h"
#include "checks.cuh"
#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

// ---- host bf16 (round to nearest even), independent of the device intrinsics under test ----
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = bf16_bits(x[i]);
  return r;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = bf16_value(x[i]);
  return r;
}

// ---- device memory, freed on scope exit even when a CUDA call throws ----
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <typename T>
  T* alloc(size_t n) {  // zero-filled
    const size_t bytes = std::max<size_t>(1, n) * sizeof(T);
    ptrs_.push_back(nullptr);
    ANVIL_CUDA(cudaMalloc(&ptrs_.back(), bytes));
    ANVIL_CUDA(cudaMemset(ptrs_.back(), 0, bytes));
    return static_cast<T*>(ptrs_.back());
  }
  template <typename T>
  T* upload(const std::vector<T>& v) {
    T* d = alloc<T>(v.size());
    if (!v.empty()) ANVIL_CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  }
  bf16* upload_bf16(const std::vector<uint16_t>& v) { return reinterpret_cast<bf16*>(upload(v)); }

 private:
  std::vector<void*> ptrs_;
};

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) ANVIL_CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
std::vector<float> download_bf16(const bf16* d, size_t n) {
  return from_bf16(download(reinterpret_cast<const uint16_t*>(d), n));
}

// launch check, then wait so that an execution error is reported against this kernel
void finish(const char* what) {
  check_launch(what);
  ANVIL_CUDA(cudaDeviceSynchronize());
}

// ---- random inputs ----
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  float normal() { return std::normal_distribution<float>(0.f, 1.f)(g); }
  int randint(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }  // inclusive
  std::vector<float> normals(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = scale * normal();
    return v;
  }
  std::vector<int32_t> ints(size_t n, int lo, int hi) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = randint(lo, hi);
    return v;
  }
};

// ---- comparison ----
constexpr double kBf16Rtol = 1.0 / 128;  // 2^-7

// fp32 tolerance factor for a reduction over `len` terms
double fp32_tol(double len) { return 1e-5 * std::max(1.0, std::sqrt(len) / 4); }

template <typename T>
double max_abs(const std::vector<T>& v) {
  double m = 0;
  for (const T& x : v) m = std::max(m, std::fabs((double)x));
  return m;
}

// cols > 0 prints the first failure as [row, col]
template <typename T>
KernelCheck compare(const std::string& name, const std::vector<T>& gpu, const std::vector<T>& cpu, double atol,
                    double rtol, size_t cols = 0) {
  KernelCheck k;
  k.name = name;
  k.max_abs_err = 0;
  k.max_ref = 0;
  k.atol = atol;
  k.rtol = rtol;
  k.failures = 0;
  k.passed = false;
  if (gpu.size() != cpu.size()) {
    k.failures = 1;
    k.detail = "size mismatch: gpu " + std::to_string(gpu.size()) + " vs cpu " + std::to_string(cpu.size());
    return k;
  }
  for (size_t i = 0; i < cpu.size(); i++) {
    const double g = (double)gpu[i], c = (double)cpu[i];
    const double err = g == c ? 0.0 : std::fabs(g - c);  // equal infinities (bf16 overflow) match
    const double tol = atol + rtol * std::fabs(c);
    k.max_ref = std::max(k.max_ref, std::fabs(c));
    if (std::isnan(err)) k.max_abs_err = INFINITY;
    else k.max_abs_err = std::max(k.max_abs_err, err);
    if (err != 0.0 && !(err <= tol)) {  // NaN fails; exact matches pass even where tol is NaN (inf * 0)
      if (k.failures == 0) {
        char buf[256];
        if (cols > 0)
          std::snprintf(buf, sizeof buf,
                        "first failure at [%zu, %zu] (flat %zu): gpu %.9g cpu %.9g |diff| %.3g > tol %.3g", i / cols,
                        i % cols, i, g, c, err, tol);
        else
          std::snprintf(buf, sizeof buf, "first failure at [%zu]: gpu %.9g cpu %.9g |diff| %.3g > tol %.3g", i, g, c,
                        err, tol);
        k.detail = buf;
      }
      k.failures++;
    }
  }
  k.passed = k.failures == 0;
  return k;
}

std::string shape(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string shape(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

using Out = std::vector<KernelCheck>;

// ---------------------------------------------------------------------------------------------

void check_f32_to_bf16(Rng& rng, Out& out) {
  // n = 37: vector path + tail; 1000003: many grid-stride steps; offset 1: unaligned scalar path
  struct Case { size_t n, offset; };
  for (Case cs : {Case{37, 0}, Case{1000003, 0}, Case{1001, 1}}) {
    std::vector<float> x = rng.normals(cs.n + cs.offset, 3.0f);
    // exact ties (round to even: down, then up) and a few specials
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00000000u, 0x80000000u, 0x7f7fffffu};
    for (size_t j = 0; j < sizeof(special) / 4 && cs.offset + j < x.size(); j++)
      std::memcpy(&x[cs.offset + j], &special[j], 4);
    DeviceArena a;
    float* in = a.upload(x);
    bf16* o = reinterpret_cast<bf16*>(a.alloc<uint16_t>(cs.n + 1)) + cs.offset;
    f32_to_bf16(o, in + cs.offset, cs.n, 0);
    finish("f32_to_bf16");
    std::vector<float> ref(cs.n);
    for (size_t i = 0; i < cs.n; i++) ref[i] = bf16_value(bf16_bits(x[cs.offset + i]));
    out.push_back(compare(shape("f32_to_bf16 n=%zu offset=%zu", cs.n, cs.offset), download_bf16(o, cs.n), ref, 0, 0));
  }
}

void check_rows(Rng& rng, Out& out) {
  const int R = 37, ROWS = 50;
  for (int C : {96, 97}) {
    std::vector<float> in = rng.normals((size_t)ROWS * C, 1.0f);
    std::vector<int32_t> idx = rng.ints(R, 0, ROWS - 1);
    DeviceArena a;
    float* in_d = a.upload(in);
    int32_t* idx_d = a.upload(idx);
    // gather: the CPU embedding lookup is the same operation (out[r] = table[idx[r]])
    float* g_d = a.alloc<float>((size_t)R * C);
    gather_rows(g_d, in_d, idx_d, R, C, 0);
    finish("gather_rows");
    std::vector<float> ref((size_t)R * C);
    anvil::embedding_forward(ref.data(), idx.data(), in.data(), R, C);
    out.push_back(compare(shape("gather_rows R=%d C=%d", R, C), download(g_d, ref.size()), ref, 0, 0, C));
    // scatter into distinct rows of a prefilled buffer (untouched rows must keep their values)
    std::vector<int32_t> perm(ROWS);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.g);
    perm.resize(R);
    std::vector<float> src = rng.normals((size_t)R * C, 1.0f);
    std::vector<float> dst = rng.normals((size_t)ROWS * C, 1.0f);
    float* dst_d = a.upload(dst);
    scatter_rows(dst_d, a.upload(src), a.upload(perm), R, C, 0);
    finish("scatter_rows");
    for (int r = 0; r < R; r++) std::copy_n(&src[(size_t)r * C], C, &dst[(size_t)perm[r] * C]);
    out.push_back(compare(shape("scatter_rows R=%d C=%d", R, C), download(dst_d, dst.size()), dst, 0, 0, C));
  }
}

void check_embedding(Rng& rng, Out& out) {
  const int V = 11;  // small vocab: tokens repeat, so the backward's atomics collide
  for (int C : {96, 97}) {
    for (int N : {37, 300}) {
      std::vector<float> wte = rng.normals((size_t)V * C, 1.0f);
      std::vector<int32_t> tok = rng.ints(N, 0, V - 1);
      DeviceArena a;
      int32_t* tok_d = a.upload(tok);
      float* o_d = a.alloc<float>((size_t)N * C);
      embedding_forward(o_d, tok_d, a.upload(wte), N, C, 0);
      finish("embedding_forward");
      std::vector<float> ref((size_t)N * C);
      anvil::embedding_forward(ref.data(), tok.data(), wte.data(), N, C);
      out.push_back(
          compare(shape("embedding_forward N=%d C=%d V=%d", N, C, V), download(o_d, ref.size()), ref, 0, 0, C));

      std::vector<float> dout = rng.normals((size_t)N * C, 1.0f);
      std::vector<float> dwte = rng.normals((size_t)V * C, 1.0f);  // accumulates
      float* dwte_d = a.upload(dwte);
      embedding_backward(dwte_d, a.upload(dout), tok_d, N, C, 0);
      finish("embedding_backward");
      anvil::embedding_backward(dwte.data(), dout.data(), tok.data(), N, C);
      const double t = fp32_tol((double)N / V * 4);
      out.push_back(compare(shape("embedding_backward N=%d C=%d V=%d", N, C, V), download(dwte_d, dwte.size()), dwte,
                            t * max_abs(dwte), t, C));
    }
  }
}

void check_rmsnorm(Rng& rng, Out& out) {
  struct Case { int N, C; };
  // 3000 rows > the backward's resident block count (blocks stride over rows);
  // C = 16384 needs the opt-in to > 48 KiB of dynamic shared memory in the backward
  for (Case cs : {Case{37, 96}, Case{3000, 96}, Case{16, 1000}, Case{4, 4096}, Case{3, 16384}}) {
    const int N = cs.N, C = cs.C;
    const float eps = 1e-6f;
    std::vector<float> x = rng.normals((size_t)N * C, 2.0f);
    std::vector<float> w(C);
    for (auto& v : w) v = 1.0f + 0.2f * rng.normal();
    std::vector<float> ref((size_t)N * C), rstd(N);
    anvil::rmsnorm_forward(ref.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    const double t = fp32_tol(C);

    DeviceArena a;
    float* x_d = a.upload(x);
    float* w_d = a.upload(w);
    float* rstd_d = a.alloc<float>(N);
    float* o32_d = a.alloc<float>((size_t)N * C);
    rmsnorm_forward(o32_d, rstd_d, x_d, w_d, N, C, eps, 0);
    finish("rmsnorm_forward fp32");
    out.push_back(compare(shape("rmsnorm_forward fp32 N=%d C=%d", N, C), download(o32_d, ref.size()), ref,
                          t * max_abs(ref), t, C));
    out.push_back(compare(shape("rmsnorm_forward rstd N=%d C=%d", N, C), download(rstd_d, N), rstd, 0, t));

    bf16* o16_d = reinterpret_cast<bf16*>(a.alloc<uint16_t>((size_t)N * C));
    float* rstd2_d = a.alloc<float>(N);
    rmsnorm_forward(o16_d, rstd2_d, x_d, w_d, N, C, eps, 0);
    finish("rmsnorm_forward bf16");
    out.push_back(compare(shape("rmsnorm_forward bf16 N=%d C=%d", N, C), download_bf16(o16_d, ref.size()), ref,
                          1e-5 * max_abs(ref), kBf16Rtol, C));

    // backward with the CPU's rstd (the forward's output), accumulating into random dinp and dw
    std::vector<float> dout = rng.normals((size_t)N * C, 1.0f);
    std::vector<float> dinp = rng.normals((size_t)N * C, 0.5f);
    std::vector<float> dw = rng.normals(C, 0.5f);
    float* dinp_d = a.upload(dinp);
    float* dw_d = a.upload(dw);
    rmsnorm_backward(dinp_d, dw_d, a.upload(dout), x_d, w_d, a.upload(rstd), N, C, 0);
    finish("rmsnorm_backward");
    anvil::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    out.push_back(compare(shape("rmsnorm_backward dinp N=%d C=%d", N, C), download(dinp_d, dinp.size()), dinp,
                          t * max_abs(dinp), t, C));
    const double tw = fp32_tol(N);
    out.push_back(compare(shape("rmsnorm_backward dw N=%d C=%d", N, C), download(dw_d, dw.size()), dw,
                          tw * max_abs(dw), tw));
  }
}

void check_rope(Rng& rng, Out& out) {
  struct Case { int N, H, KVH, D; };
  for (Case cs : {Case{37, 4, 2, 16}, Case{37, 4, 2, 64}, Case{77, 14, 2, 64}, Case{5, 2, 1, 128}}) {
    for (bool with_bias : {true, false}) {
      const int N = cs.N, H = cs.H, KVH = cs.KVH, D = cs.D, half = D / 2, QKV = (H + 2 * KVH) * D, P = 64;
      std::vector<float> cos_t((size_t)P * half), sin_t((size_t)P * half);
      for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
          const double ang = p * std::pow(10000.0, -2.0 * i / D);
          cos_t[(size_t)p * half + i] = (float)std::cos(ang);
          sin_t[(size_t)p * half + i] = (float)std::sin(ang);
        }
      std::vector<int32_t> depth = rng.ints(N, 0, P - 1);
      std::vector<uint16_t> qkv16 = to_bf16(rng.normals((size_t)N * QKV, 1.0f));
      std::vector<float> bias = rng.normals(QKV, 0.5f);
      const std::string sh = shape("N=%d H=%d KVH=%d D=%d bias=%s", N, H, KVH, D, with_bias ? "on" : "off");

      // forward: CPU on the bf16 values plus the fp32 bias
      std::vector<float> ref = from_bf16(qkv16);
      if (with_bias)
        for (int n = 0; n < N; n++)
          for (int j = 0; j < QKV; j++) ref[(size_t)n * QKV + j] += bias[j];
      anvil::rope_forward(ref.data(), depth.data(), cos_t.data(), sin_t.data(), N, H, KVH, D);
      DeviceArena a;
      int32_t* depth_d = a.upload(depth);
      float* cos_d = a.upload(cos_t);
      float* sin_d = a.upload(sin_t);
      bf16* qkv_d = a.upload_bf16(qkv16);
      rope_forward(qkv_d, with_bias ? a.upload(bias) : nullptr, depth_d, cos_d, sin_d, N, H, KVH, D, 0);
      finish("rope_forward");
      out.push_back(compare("rope_forward " + sh, download_bf16(qkv_d, ref.size()), ref, 1e-5 * max_abs(ref),
                            kBf16Rtol, QKV));

      // backward: dqkv fp32 -> inverse rotation (bf16 out) and the column sums into dbias
      std::vector<float> dqkv = rng.normals((size_t)N * QKV, 1.0f);
      std::vector<float> dbias = rng.normals(QKV, 0.5f);  // accumulates
      float* dbias_d = with_bias ? a.upload(dbias) : nullptr;
      bf16* dout_d = reinterpret_cast<bf16*>(a.alloc<uint16_t>((size_t)N * QKV));
      rope_backward(dout_d, dbias_d, a.upload(dqkv), depth_d, cos_d, sin_d, N, H, KVH, D, 0);
      finish("rope_backward");
      std::vector<float> dref = dqkv;
      anvil::rope_backward(dref.data(), depth.data(), cos_t.data(), sin_t.data(), N, H, KVH, D);
      out.push_back(compare("rope_backward dqkv " + sh, download_bf16(dout_d, dref.size()), dref,
                            1e-5 * max_abs(dref), kBf16Rtol, QKV));
      if (with_bias) {
        anvil::bias_backward(dbias.data(), dref.data(), N, QKV);
        const double t = fp32_tol(N);
        out.push_back(compare("rope_backward dbias " + sh, download(dbias_d, QKV), dbias,
                              t * N * max_abs(dref) * 0.1, t));
      }
    }
  }
}

void check_swiglu(Rng& rng, Out& out) {
  struct Case { int N, F; };
  // F even: bf16x2 path; F odd: scalar path
  for (Case cs : {Case{37, 96}, Case{37, 333}, Case{5, 1000}}) {
    const int N = cs.N, F = cs.F;
    std::vector<uint16_t> gu16 = to_bf16(rng.normals((size_t)N * 2 * F, 2.5f));
    std::vector<float> gu = from_bf16(gu16);
    DeviceArena a;
    bf16* gu_d = a.upload_bf16(gu16);
    bf16* h_d = reinterpret_cast<bf16*>(a.alloc<uint16_t>((size_t)N * F));
    swiglu_forward(h_d, gu_d, N, F, 0);
    finish("swiglu_forward");
    std::vector<float> h((size_t)N * F);
    anvil::swiglu_forward(h.data(), gu.data(), N, F);
    out.push_back(compare(shape("swiglu_forward N=%d F=%d", N, F), download_bf16(h_d, h.size()), h,
                          1e-5 * max_abs(h), kBf16Rtol, F));

    std::vector<float> dh = rng.normals((size_t)N * F, 1.0f);
    bf16* dgu_d = reinterpret_cast<bf16*>(a.alloc<uint16_t>((size_t)N * 2 * F));
    swiglu_backward(dgu_d, a.upload(dh), gu_d, N, F, 0);
    finish("swiglu_backward");
    std::vector<float> dgu((size_t)N * 2 * F);
    anvil::swiglu_backward(dgu.data(), dh.data(), gu.data(), N, F);
    out.push_back(compare(shape("swiglu_backward N=%d F=%d", N, F), download_bf16(dgu_d, dgu.size()), dgu,
                          1e-5 * max_abs(dgu), kBf16Rtol, 2 * F));
  }
}

// The CPU logprob computes logits = h[internal] @ w^T itself and, given `kept`, leaves them there;
// the GPU kernels get exactly those logits (in chunks of GR rows, so r0 > 0 is exercised). The
// CPU backward leaves the logits gradient of its active rows (rows with a nonzero coefficient, in
// row order) in scratch.logits when one chunk holds them all; that is compared with the GPU's
// dlogits directly, and, through the public CPU GEMM, as dh and dw against the CPU's.
void check_logprob(Rng& rng, Out& out) {
  struct Case { int N, V; };
  const int C = 16, GR = 7;
  for (Case cs : {Case{40, 97}, Case{60, 32003}, Case{30, 151936}}) {
    const int N = cs.N, V = cs.V;
    // tree: node 0 has children 1..6 (two of them with the same token), the rest random with
    // some extra roots and chains
    std::vector<int32_t> parents(N);
    for (int i = 0; i < N; i++) {
      if (i == 0) parents[i] = -1;
      else if (i <= 6) parents[i] = 0;
      else if (rng.randint(0, 9) == 0) parents[i] = -1;
      else parents[i] = rng.randint(std::max(0, i - 8), i - 1);
    }
    const TreeInfo tree = analyze_tree(parents.data(), N);
    const int M = (int)tree.internal.size();
    std::vector<int32_t> tokens = rng.ints(N, 0, V - 1);
    tokens[2] = tokens[1];
    std::vector<float> h = rng.normals((size_t)N * C, 1.0f);
    for (int n = 0; n < N; n++)  // rows of very different logit scales (std ~2 to ~20)
      for (int c = 0; c < C; c++) h[(size_t)n * C + c] *= 1.0f + 3.0f * (n % 4);
    std::vector<float> w = rng.normals((size_t)V * C, 0.5f);

    std::vector<float> kept((size_t)M * V), rows((size_t)M * C), scratch((size_t)M * V);
    std::vector<float> logp(N), entropy(N), lse(M), ent(M);
    LogprobScratch ls{rows.data(), scratch.data(), M};
    anvil::logprob_forward(logp.data(), entropy.data(), lse.data(), ent.data(), h.data(), w.data(), tokens.data(), tree,
                           C, V, ls, kept.data());

    DeviceArena a;
    float* logits_d = a.upload(kept);
    int32_t* tok_d = a.upload(tokens);
    int32_t* int_d = a.upload(tree.internal);
    int32_t* cs_d = a.upload(tree.child_start);
    int32_t* ch_d = a.upload(tree.children);
    float* logp_d = a.alloc<float>(N);
    float* entropy_d = a.alloc<float>(N);
    float* lse_d = a.alloc<float>(M);
    float* ent_d = a.alloc<float>(M);
    for (int r0 = 0; r0 < M; r0 += GR)
      logprob_forward(logp_d, entropy_d, lse_d, ent_d, logits_d + (size_t)r0 * V, tok_d, int_d, cs_d, ch_d, r0,
                      std::min(GR, M - r0), V, 0);
    finish("logprob_forward");
    const std::string sh = shape("N=%d M=%d V=%d", N, M, V);
    const double at = 1e-5 * std::max(1.0, std::sqrt((double)V) / 8), rt = 2e-5;
    out.push_back(compare("logprob_forward logp " + sh, download(logp_d, N), logp, at, rt));
    out.push_back(compare("logprob_forward entropy " + sh, download(entropy_d, N), entropy, at, rt));
    out.push_back(compare("logprob_forward lse " + sh, download(lse_d, M), lse, at, rt));
    out.push_back(compare("logprob_forward ent " + sh, download(ent_d, M), ent, at, rt));

    // backward inputs: the CPU forward's lse/ent; one internal row gets all-zero coefficients
    float* lse_in = a.upload(lse);
    float* ent_in = a.upload(ent);
    std::vector<float> dlogp = rng.normals(N, 1.0f), dent = rng.normals(N, 0.3f);
    for (int n = 0; n < N; n++)
      if (parents[n] < 0) dlogp[n] = dent[n] = 0.f;
    const int zero_node = tree.internal[M / 2];
    for (int c = tree.child_start[zero_node]; c < tree.child_start[zero_node + 1]; c++)
      dlogp[tree.children[c]] = dent[tree.children[c]] = 0.f;
    float* dlogp_d = a.upload(dlogp);
    float* dent_d = a.upload(dent);

    for (bool with_ent : {true, false}) {
      std::vector<float> dh((size_t)N * C, 0.f), dw((size_t)V * C, 0.f);
      std::fill(scratch.begin(), scratch.end(), 0.f);
      anvil::logprob_backward(dh.data(), dw.data(), dlogp.data(), with_ent ? dent.data() : nullptr, h.data(), w.data(),
                              lse.data(), ent.data(), tokens.data(), tree, C, V, ls, kept.data());
      // the CPU's dlogits, rows in internal order, zero for skipped rows
      std::vector<float> gref((size_t)M * V, 0.f);
      int act = 0;
      for (int r = 0; r < M; r++) {
        const int node = tree.internal[r];
        bool any = false;
        for (int c = tree.child_start[node]; c < tree.child_start[node + 1]; c++) {
          const int ch = tree.children[c];
          any = any || dlogp[ch] != 0.f || (with_ent && dent[ch] != 0.f);
        }
        if (any) std::copy_n(&scratch[(size_t)act++ * V], V, &gref[(size_t)r * V]);
      }
      for (bool in_place : {false, true}) {
        if (in_place && !with_ent) continue;
        float* g_d;
        if (in_place) {
          g_d = a.upload(kept);
          for (int r0 = 0; r0 < M; r0 += GR)
            logprob_backward(g_d + (size_t)r0 * V, g_d + (size_t)r0 * V, lse_in, ent_in, dlogp_d,
                             with_ent ? dent_d : nullptr, tok_d, int_d, cs_d, ch_d, r0, std::min(GR, M - r0), V, 0);
        } else {
          g_d = a.alloc<float>((size_t)M * V);
          for (int r0 = 0; r0 < M; r0 += GR)
            logprob_backward(g_d + (size_t)r0 * V, logits_d + (size_t)r0 * V, lse_in, ent_in, dlogp_d,
                             with_ent ? dent_d : nullptr, tok_d, int_d, cs_d, ch_d, r0, std::min(GR, M - r0), V, 0);
        }
        finish("logprob_backward");
        const std::string bsh = sh + (with_ent ? " entropy=on" : " entropy=off") + (in_place ? " in-place" : "");
        std::vector<float> g = download(g_d, gref.size());
        out.push_back(compare("logprob_backward dlogits " + bsh, g, gref, 1e-5 * max_abs(gref), 1e-4, V));
        // dh and dw from the GPU's dlogits through the CPU GEMM, against the CPU backward's
        std::vector<float> hrows((size_t)M * C), drows((size_t)M * C), dw_g((size_t)V * C, 0.f),
            dh_g((size_t)N * C, 0.f);
        for (int r = 0; r < M; r++) std::copy_n(&h[(size_t)tree.internal[r] * C], C, &hrows[(size_t)r * C]);
        anvil::matmul_backward(drows.data(), dw_g.data(), g.data(), hrows.data(), w.data(), M, C, V, false);
        for (int r = 0; r < M; r++)
          for (int c = 0; c < C; c++) dh_g[(size_t)tree.internal[r] * C + c] += drows[(size_t)r * C + c];
        out.push_back(compare("logprob_backward dh " + bsh, dh_g, dh, 1e-4 * max_abs(dh), 1e-4, C));
        out.push_back(compare("logprob_backward dw " + bsh, dw_g, dw, 1e-4 * max_abs(dw), 1e-4, C));
      }
    }
  }
}

void check_adamw(Rng& rng, Out& out) {
  struct Case { size_t n; int t; bool p16; };
  for (Case cs : {Case{37, 1, true}, Case{100003, 7, true}, Case{100003, 1, false}}) {
    const size_t n = cs.n;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    std::vector<float> p = rng.normals(n, 1.0f), g = rng.normals(n, 0.1f), m = rng.normals(n, 0.01f),
                       v = rng.normals(n, 1e-2f);
    for (auto& x : v) x = x * x;  // second moments are non-negative
    DeviceArena a;
    float* p_d = a.upload(p);
    float* m_d = a.upload(m);
    float* v_d = a.upload(v);
    bf16* p16_d = cs.p16 ? reinterpret_cast<bf16*>(a.alloc<uint16_t>(n)) : nullptr;
    adamw_update(p_d, p16_d, a.upload(g), m_d, v_d, n, lr, b1, b2, eps, wd, cs.t, nullptr, 0);
    finish("adamw_update");
    anvil::adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, cs.t);
    const std::string sh = shape("n=%zu t=%d p16=%s", n, cs.t, cs.p16 ? "on" : "off");
    const double t = 1e-5;
    out.push_back(compare("adamw_update p " + sh, download(p_d, n), p, t * max_abs(p) * 0.1, t));
    out.push_back(compare("adamw_update m " + sh, download(m_d, n), m, t * max_abs(m) * 0.1, t));
    out.push_back(compare("adamw_update v " + sh, download(v_d, n), v, t * max_abs(v) * 0.1, t));
    if (cs.p16)
      out.push_back(compare("adamw_update p16 " + sh, download_bf16(p16_d, n), p, 1e-6 * max_abs(p), kBf16Rtol));
  }
}

void check_grad_utils(Rng& rng, Out& out) {
  for (size_t n : {size_t(37), size_t(1000003)}) {
    std::vector<float> x = rng.normals(n, 2.0f);
    DeviceArena a;
    float* x_d = a.upload(x);
    const double init = 1.5;  // the kernel accumulates into *acc
    double* acc_d = a.upload(std::vector<double>{init});
    sum_squares(acc_d, x_d, n, 0);
    finish("sum_squares");
    std::vector<double> ref{init + anvil::sum_squares(x.data(), n)};
    out.push_back(compare(shape("sum_squares n=%zu", n), download(acc_d, 1), ref, 0, 1e-9));

    const float sc = 0.37f;
    scale_inplace(x_d, n, a.upload(std::vector<float>{sc}), 0);
    finish("scale_inplace");
    anvil::scale_inplace(x.data(), n, sc);
    out.push_back(compare(shape("scale_inplace n=%zu", n), download(x_d, n), x, 0, 0));
  }
}

// LoRA dropout: the GPU draws exactly the CPU's mask (same hash of node id and element), with the
// rows in a permuted (pre-order-like) order mapped back to node ids.
void check_lora_dropout(Rng& rng, Out& out) {
  for (const float p : {0.1f, 0.5f}) {
    const int N = 37, I = 96;
    const uint64_t seed = 0x1234567ull + (uint64_t)(p * 100);
    std::vector<int32_t> node(N);
    std::iota(node.begin(), node.end(), 0);
    std::shuffle(node.begin(), node.end(), rng.g);
    const uint32_t thr = lora_dropout_threshold(p);
    const float keep = 1.0f / (1.0f - p);
    DeviceArena a;
    const auto x16 = to_bf16(rng.normals((size_t)N * I, 1.0f));
    const auto x = from_bf16(x16);
    const int32_t* node_d = a.upload(node);
    bf16* out_d = a.alloc<bf16>((size_t)N * I);
    lora_dropout_forward(out_d, a.upload_bf16(x16), node_d, N, I, thr, keep, seed, 0);
    finish("lora_dropout_forward");
    // the CPU in node order: row node[r] of its input is the GPU's row r
    std::vector<float> xn((size_t)N * I), ref((size_t)N * I), cpu((size_t)N * I);
    for (int r = 0; r < N; r++) std::copy(x.begin() + (size_t)r * I, x.begin() + (size_t)(r + 1) * I, xn.begin() + (size_t)node[r] * I);
    anvil::lora_dropout_forward(ref.data(), xn.data(), N, I, p, seed);
    for (int r = 0; r < N; r++) std::copy(ref.begin() + (size_t)node[r] * I, ref.begin() + (size_t)(node[r] + 1) * I, cpu.begin() + (size_t)r * I);
    out.push_back(compare(shape("lora_dropout_forward bf16 p=%.1f N=%d I=%d", p, N, I), download_bf16(out_d, (size_t)N * I), from_bf16(to_bf16(cpu)),
                          0, 0, I));
    // backward into fp32 and bf16 gradients
    const auto dxd = rng.normals((size_t)N * I, 1.0f);
    const auto dx0 = rng.normals((size_t)N * I, 1.0f);
    std::vector<float> dxd_n((size_t)N * I), dx_n((size_t)N * I), want((size_t)N * I);
    for (int r = 0; r < N; r++) {
      std::copy(dxd.begin() + (size_t)r * I, dxd.begin() + (size_t)(r + 1) * I, dxd_n.begin() + (size_t)node[r] * I);
      std::copy(dx0.begin() + (size_t)r * I, dx0.begin() + (size_t)(r + 1) * I, dx_n.begin() + (size_t)node[r] * I);
    }
    anvil::lora_dropout_backward(dx_n.data(), dxd_n.data(), N, I, p, seed);
    for (int r = 0; r < N; r++) std::copy(dx_n.begin() + (size_t)node[r] * I, dx_n.begin() + (size_t)(node[r] + 1) * I, want.begin() + (size_t)r * I);
    const float* dxd_d = a.upload(dxd);
    float* dx_d = a.upload(dx0);
    lora_dropout_backward(dx_d, dxd_d, node_d, N, I, thr, keep, seed, 0);
    finish("lora_dropout_backward f32");
    out.push_back(compare(shape("lora_dropout_backward f32 p=%.1f N=%d I=%d", p, N, I), download(dx_d, (size_t)N * I), want, 1e-6, 1e-6, I));
    bf16* dx16_d = a.upload_bf16(to_bf16(dx0));
    lora_dropout_backward(dx16_d, dxd_d, node_d, N, I, thr, keep, seed, 0);
    finish("lora_dropout_backward bf16");
    std::vector<float> want16((size_t)N * I);
    const auto dx0r = from_bf16(to_bf16(dx0));
    for (size_t e = 0; e < want16.size(); e++) want16[e] = dx0r[e] + (want[e] - dx0[e]);  // the rounded start plus the same update
    out.push_back(compare(shape("lora_dropout_backward bf16 p=%.1f N=%d I=%d", p, N, I), download_bf16(dx16_d, (size_t)N * I), want16,
                          1e-5 * max_abs(want16), kBf16Rtol, I));
  }
}

}  // namespace

std::vector<KernelCheck> check_elementwise_kernels(uint64_t seed) {
  Out out;
  struct Group { const char* name; void (*fn)(Rng&, Out&); };
  const Group groups[] = {
      {"f32_to_bf16", check_f32_to_bf16}, {"gather/scatter_rows", check_rows}, {"embedding", check_embedding},
      {"rmsnorm", check_rmsnorm},         {"rope", check_rope},                {"swiglu", check_swiglu},
      {"logprob", check_logprob},         {"adamw", check_adamw},              {"sum_squares/scale", check_grad_utils},
      {"lora_dropout", check_lora_dropout},
  };
  uint64_t k = 0;
  for (const Group& g : groups) {
    Rng rng(seed * 0x9E3779B97F4A7C15ull + (++k));  // an independent stream per group
    try {
      g.fn(rng, out);
    } catch (const std::exception& e) {  // device memory of the group is already freed
      KernelCheck c;
      c.name = std::string(g.name) + " (aborted)";
      c.max_abs_err = 0;
      c.max_ref = 0;
      c.atol = 0;
      c.rtol = 0;
      c.failures = 1;
      c.passed = false;
      c.detail = std::string("exception: ") + e.what();
      out.push_back(c);
      cudaGetLastError();  // clear a non-sticky error so the next group starts clean
    }
  }
  return out;
}

}  // namespace cuda
}  // namespace anvil
