// LoRA on the GPU: the dropout kernels (the CPU's counter-based mask, ../lora_mask.h), the device
// adapter buffers, and one layer's adapted projections forward and backward through cuBLASLt
// (see device_lora.cuh; the CPU reference is ../lora.cc).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "common.cuh"
#include "device_lora.cuh"

namespace anvil {
namespace cuda {

namespace {

constexpr int kBlock = 256;

// one thread per element of a row-major [N, I] input; row p is node node[p] of the caller's pack
__global__ void lora_dropout_forward_kernel(bf16* out, const bf16* x, const int32_t* node, int N, int I, uint32_t thr,
                                            float keep_scale, uint64_t seed) {
  const size_t total = (size_t)N * I;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    const size_t p = e / I, i = e - p * I;
    const uint64_t id = (uint64_t)(node ? node[p] : (int32_t)p) * (uint64_t)I + i;
    out[e] = lora_dropout_bits(seed, id) >= thr ? __float2bfloat16(__bfloat162float(x[e]) * keep_scale) : __float2bfloat16(0.f);
  }
}

template <typename T>
__device__ __forceinline__ void add_to(T* p, float v);
template <>
__device__ __forceinline__ void add_to<float>(float* p, float v) {
  *p += v;
}
template <>
__device__ __forceinline__ void add_to<bf16>(bf16* p, float v) {
  *p = __float2bfloat16(__bfloat162float(*p) + v);
}

template <typename T>
__global__ void lora_dropout_backward_kernel(T* dx, const float* dxd, const int32_t* node, int N, int I, uint32_t thr,
                                             float keep_scale, uint64_t seed) {
  const size_t total = (size_t)N * I;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    const size_t p = e / I, i = e - p * I;
    const uint64_t id = (uint64_t)(node ? node[p] : (int32_t)p) * (uint64_t)I + i;
    if (lora_dropout_bits(seed, id) >= thr) add_to(dx + e, dxd[e] * keep_scale);
  }
}

unsigned blocks_for(size_t n) { return (unsigned)std::max<size_t>(1, std::min<size_t>((n + kBlock - 1) / kBlock, 65535)); }

void check(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

}  // namespace

void lora_dropout_forward(bf16* out, const bf16* x, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                          uint64_t seed, cudaStream_t s) {
  if (N <= 0 || I <= 0) return;
  lora_dropout_forward_kernel<<<blocks_for((size_t)N * I), kBlock, 0, s>>>(out, x, node, N, I, thr, keep_scale, seed);
  check("lora_dropout_forward");
}

void lora_dropout_backward(float* dx, const float* dxd, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                           uint64_t seed, cudaStream_t s) {
  if (N <= 0 || I <= 0) return;
  lora_dropout_backward_kernel<float><<<blocks_for((size_t)N * I), kBlock, 0, s>>>(dx, dxd, node, N, I, thr, keep_scale, seed);
  check("lora_dropout_backward");
}

void lora_dropout_backward(bf16* dx, const float* dxd, const int32_t* node, int N, int I, uint32_t thr, float keep_scale,
                           uint64_t seed, cudaStream_t s) {
  if (N <= 0 || I <= 0) return;
  lora_dropout_backward_kernel<bf16><<<blocks_for((size_t)N * I), kBlock, 0, s>>>(dx, dxd, node, N, I, thr, keep_scale, seed);
  check("lora_dropout_backward");
}

// ---- device adapter buffers ----

void DeviceLora::release() {
  for (void* p : {(void*)p32, (void*)p16, (void*)g32, (void*)m32, (void*)v32})
    if (p) cudaFree(p);
  p32 = g32 = m32 = v32 = nullptr;
  p16 = nullptr;
  host = nullptr;
  n = 0;
}

void DeviceLora::attach(const LoraState* st, cudaStream_t s) {
  release();
  host = st;
  n = st->num_params;
  ANVIL_CUDA(cudaMalloc(&p32, n * sizeof(float)));
  ANVIL_CUDA(cudaMalloc(&p16, n * sizeof(bf16)));
  ANVIL_CUDA(cudaMalloc(&g32, n * sizeof(float)));
  ANVIL_CUDA(cudaMemsetAsync(g32, 0, n * sizeof(float), s));
  push(s);
}

void DeviceLora::push(cudaStream_t s) {
  if (!host) return;
  ANVIL_CUDA(cudaMemcpyAsync(p32, host->params->data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  f32_to_bf16(p16, p32, n, s);
}

void DeviceLora::pull(cudaStream_t s) {
  if (!host) return;
  ANVIL_CUDA(cudaMemcpyAsync(host->params->data(), p32, n * sizeof(float), cudaMemcpyDeviceToHost, s));
}

void DeviceLora::pull_grads(cudaStream_t s) {
  if (!host) return;
  ANVIL_CUDA(cudaMemcpyAsync(host->grads->data(), g32, n * sizeof(float), cudaMemcpyDeviceToHost, s));
}

void DeviceLora::alloc_moments(cudaStream_t s) {
  if (m32) return;
  ANVIL_CUDA(cudaMalloc(&m32, n * sizeof(float)));
  ANVIL_CUDA(cudaMalloc(&v32, n * sizeof(float)));
  ANVIL_CUDA(cudaMemsetAsync(m32, 0, n * sizeof(float), s));
  ANVIL_CUDA(cudaMemsetAsync(v32, 0, n * sizeof(float), s));
}

// ---- one layer's adapters ----

void lora_group_forward(const DeviceLora& L, Gemm& g, int layer, int group, void* y, DType yt, const bf16* x, int N,
                        bf16* const* u, bool drop, uint64_t seed, const int32_t* node, bf16* xd, cudaStream_t s) {
  const LoraState& st = *L.host;
  const LoraGroupTargets gt = lora_group_targets(group);
  const int r = st.cfg.rank;
  const size_t esize = yt == DType::F32 ? sizeof(float) : sizeof(bf16);
  for (int t = gt.first; t < gt.first + gt.count; t++) {
    const int si = st.site_of[layer][t];
    if (si < 0) continue;
    const LoraSite& site = st.sites[si];
    const bf16* in = x;
    if (drop) {
      lora_dropout_forward(xd, x, node, N, site.in, lora_dropout_threshold(st.cfg.dropout), 1.0f / (1.0f - st.cfg.dropout),
                           LoraState::site_seed(seed, si), s);
      in = xd;
    }
    // u[N,r] = in[N,I] @ A[r,I]^T
    g.nt(u[si], DType::BF16, {in, DType::BF16, site.in}, {L.p16 + site.a, DType::BF16, site.in}, N, site.in, r);
    // y[N, col:col+O] += s * u @ B[O,r]^T
    char* yc = static_cast<char*>(y) + (size_t)site.col * esize;
    g.nt_strided(yc, yt, site.ldy, {u[si], DType::BF16, r}, {L.p16 + site.b, DType::BF16, r}, N, r, site.out, st.cfg.scale(),
                 1.0f);
  }
}

void lora_group_backward(const DeviceLora& L, Gemm& g, int layer, int group, void* dx, DType dxt, const bf16* dy,
                         const bf16* x, int N, bf16* const* u, bool drop, uint64_t seed, const int32_t* node, bf16* xd,
                         float* dxd, bf16* du, cudaStream_t s) {
  const LoraState& st = *L.host;
  const LoraGroupTargets gt = lora_group_targets(group);
  const int r = st.cfg.rank;
  const float sc = st.cfg.scale();
  for (int t = gt.first; t < gt.first + gt.count; t++) {
    const int si = st.site_of[layer][t];
    if (si < 0) continue;
    const LoraSite& site = st.sites[si];
    const uint64_t sseed = LoraState::site_seed(seed, si);
    const uint32_t thr = lora_dropout_threshold(st.cfg.dropout);
    const float keep = 1.0f / (1.0f - st.cfg.dropout);
    const bf16* in = x;
    if (drop) {
      lora_dropout_forward(xd, x, node, N, site.in, thr, keep, sseed, s);  // the forward's mask, regenerated
      in = xd;
    }
    const Mat dys{dy + site.col, DType::BF16, site.ldy};
    // dB[O,r] += s * dy^T @ u
    g.tn_acc_scaled(L.g32 + site.b, dys, {u[si], DType::BF16, r}, N, r, site.out, sc);
    // du[N,r] = s * dy @ B[O,r]
    g.nn_strided(du, DType::BF16, r, dys, {L.p16 + site.b, DType::BF16, r}, N, r, site.out, sc, 0.0f);
    // dA[r,I] += du^T @ in
    g.tn_acc(L.g32 + site.a, {du, DType::BF16, r}, {in, DType::BF16, site.in}, N, site.in, r);
    // dx[N,I] += du @ A[r,I] (through the mask when there was dropout)
    if (!drop) {
      g.nn_strided(dx, dxt, site.in, {du, DType::BF16, r}, {L.p16 + site.a, DType::BF16, site.in}, N, site.in, r, 1.0f, 1.0f);
    } else {
      g.nn_strided(dxd, DType::F32, site.in, {du, DType::BF16, r}, {L.p16 + site.a, DType::BF16, site.in}, N, site.in, r, 1.0f,
                   0.0f);
      if (dxt == DType::F32)
        lora_dropout_backward(static_cast<float*>(dx), dxd, node, N, site.in, thr, keep, sseed, s);
      else
        lora_dropout_backward(static_cast<bf16*>(dx), dxd, node, N, site.in, thr, keep, sseed, s);
    }
  }
}

}  // namespace cuda
}  // namespace anvil
