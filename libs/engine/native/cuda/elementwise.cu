// CUDA kernels of kernels.cuh other than tree attention: conversions and row moves, embedding,
// RMSNorm, bias + RoPE, SwiGLU, the LM head's log-softmax, AdamW and the gradient utilities.
// Each computes the same math as its CPU reference in ../{embedding,rmsnorm,rope,swiglu,logprob,
// adamw}.cc (checked by checks_elementwise.cu). Conventions:
//   - row kernels (rmsnorm, logprob) run one block per row and reduce with warp shuffles plus one
//     shared slot per warp; block sizes are multiples of 32 and no thread leaves before a reduction;
//   - elementwise kernels use size_t grid-stride loops (n may exceed 2^31);
//   - every launcher only enqueues on `s`, returns at once for empty shapes, and checks the launch
//     itself (cudaGetLastError, no synchronisation) so a bad configuration names its kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

// ---------------------------------------------------------------------------------------------
// helpers

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Block-wide sum / max, returned to every thread. `sh` holds >= 32 values in shared memory. The
// leading barrier makes back-to-back calls with the same `sh` safe (the previous call's readers
// are done before this call's writers start). Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : T(0);
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* sh) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ size_t global_tid() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t global_stride() { return (size_t)gridDim.x * blockDim.x; }

bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

int sm_count() {
  int dev = 0, n = 0;
  ANVIL_CUDA(cudaGetDevice(&dev));
  ANVIL_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n > 0 ? n : 1;
}

// Blocks for a grid-stride loop over n items: enough for every SM to hold several blocks,
// never more than the items need.
unsigned grid_stride_blocks(size_t n, int block) {
  const size_t need = (n + block - 1) / block;
  const size_t cap = (size_t)sm_count() * 16;
  return (unsigned)std::max<size_t>(1, std::min(need, cap));
}

// Launch-configuration errors surface here, named after the kernel; execution errors surface at
// the caller's check_launch or at the next synchronising call.
void launched(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

// ---------------------------------------------------------------------------------------------
// conversions and row moves

// in 16-byte aligned, out 4-byte aligned: 4 floats -> 2 x bf16x2 per step, scalar tail
__global__ void f32_to_bf16_vec_kernel(bf16* out, const float* in, size_t n) {
  const size_t n4 = n / 4;
  const float4* in4 = reinterpret_cast<const float4*>(in);
  __nv_bfloat162* out2 = reinterpret_cast<__nv_bfloat162*>(out);
  for (size_t i = global_tid(); i < n4; i += global_stride()) {
    const float4 f = in4[i];
    out2[2 * i] = __floats2bfloat162_rn(f.x, f.y);
    out2[2 * i + 1] = __floats2bfloat162_rn(f.z, f.w);
  }
  for (size_t i = n4 * 4 + global_tid(); i < n; i += global_stride()) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void f32_to_bf16_kernel(bf16* out, const float* in, size_t n) {
  for (size_t i = global_tid(); i < n; i += global_stride()) out[i] = __float2bfloat16_rn(in[i]);
}

// One block per row r: out[dst(r), :] = in[src(r), :], with (src, dst) = (idx[r], r) when
// GATHER (gather, embedding lookup) and (r, idx[r]) otherwise (scatter). VEC: C % 4 == 0 and
// both bases 16-byte aligned, so every row start is too.
template <bool GATHER, bool VEC>
__global__ void copy_rows_kernel(float* out, const float* in, const int32_t* idx, int C) {
  const size_t r = blockIdx.x;
  const size_t src = GATHER ? (size_t)idx[r] : r;
  const size_t dst = GATHER ? r : (size_t)idx[r];
  const float* s = in + src * C;
  float* d = out + dst * C;
  if (VEC) {
    const int C4 = C / 4;
    const float4* s4 = reinterpret_cast<const float4*>(s);
    float4* d4 = reinterpret_cast<float4*>(d);
    for (int c = threadIdx.x; c < C4; c += blockDim.x) d4[c] = s4[c];
  } else {
    for (int c = threadIdx.x; c < C; c += blockDim.x) d[c] = s[c];
  }
}

template <bool GATHER>
void copy_rows(float* out, const float* in, const int32_t* idx, int R, int C, cudaStream_t s, const char* what) {
  if (R <= 0 || C <= 0) return;
  const int block = 256;
  if (C % 4 == 0 && aligned(out, 16) && aligned(in, 16))
    copy_rows_kernel<GATHER, true><<<R, block, 0, s>>>(out, in, idx, C);
  else
    copy_rows_kernel<GATHER, false><<<R, block, 0, s>>>(out, in, idx, C);
  launched(what);
}

// ---------------------------------------------------------------------------------------------
// embedding backward: one block per node row, fp32 atomics into the token's row (tokens repeat)

__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* tokens, int C) {
  const size_t n = blockIdx.x;
  float* d = dwte + (size_t)tokens[n] * C;
  const float* g = dout + n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(d + c, g[c]);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

// One block per row: rstd = 1 / sqrt(mean(x^2) + eps); out = w * (x * rstd)  (as ../rmsnorm.cc)
template <typename OutT>
__global__ void rmsnorm_forward_kernel(OutT* out, float* rstd, const float* inp, const float* w, int C, float eps) {
  __shared__ float sh[32];
  const size_t n = blockIdx.x;
  const float* x = inp + n * C;
  float ss = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  ss = block_sum(ss, sh);
  const float r = 1.0f / sqrtf(ss / C + eps);
  if (threadIdx.x == 0) rstd[n] = r;
  OutT* y = out + n * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) store_out(y + c, w[c] * (x[c] * r));
}

// Blocks stride over rows. Per row: m = mean(dy * w * xhat); dinp += rstd * (dy * w - xhat * m).
// dw partial sums live in dynamic shared memory dw_sh[C]; thread t only ever touches columns
// c = t (mod blockDim.x), so dw_sh needs no barriers, and it is flushed with one atomicAdd per
// column per block at the end.
__global__ void rmsnorm_backward_kernel(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                        const float* rstd, int N, int C) {
  extern __shared__ float dw_sh[];  // [C], or none when dw is null (a frozen norm weight)
  __shared__ float sh[32];
  const bool want_dw = dw != nullptr;  // uniform across the grid
  if (want_dw)
    for (int c = threadIdx.x; c < C; c += blockDim.x) dw_sh[c] = 0.f;
  for (int n = blockIdx.x; n < N; n += gridDim.x) {  // uniform across the block
    const float* x = inp + (size_t)n * C;
    const float* dy = dout + (size_t)n * C;
    float* dx = dinp + (size_t)n * C;
    const float r = rstd[n];
    float m = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) m += dy[c] * w[c] * x[c] * r;
    m = block_sum(m, sh) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = x[c] * r;
      dx[c] += r * (dy[c] * w[c] - xhat * m);
      if (want_dw) dw_sh[c] += dy[c] * xhat;
    }
  }
  if (want_dw)
    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(dw + c, dw_sh[c]);
}

// ---------------------------------------------------------------------------------------------
// bias + RoPE. A "unit" is the pair (i, i + D/2) of one head; a row has (heads) * D/2 units,
// unit u = head * (D/2) + i, so consecutive threads read consecutive elements of a head.
// Heads [0, H + KVH) are q and k (rotated); [H + KVH, H + 2 KVH) are v (bias only).
// Grid: x over chunks of kRopeRows rows, y over blocks of units.

constexpr int kRopeRows = 32;
constexpr int kRopeBlock = 128;

// in place on qkv (bf16): x = qkv + bias in fp32, rotated at depth[n], rounded once to bf16
__global__ void rope_forward_kernel(bf16* qkv, const float* bias, const int32_t* depth, const float* cos_t,
                                    const float* sin_t, int N, int H, int KVH, int D, int units, int rows) {
  const int u = blockIdx.y * blockDim.x + threadIdx.x;
  if (u >= units) return;  // no barriers in this kernel
  const int half = D / 2, QKV = (H + 2 * KVH) * D;
  const int head = u / half, i = u - head * half;
  const int col = head * D + i;
  const bool rotate = head < H + KVH;
  const float b1 = bias ? bias[col] : 0.f, b2 = bias ? bias[col + half] : 0.f;
  const int n0 = blockIdx.x * rows, n1 = min(N, n0 + rows);
  for (int n = n0; n < n1; n++) {
    bf16* x = qkv + (size_t)n * QKV + col;
    const float x1 = __bfloat162float(x[0]) + b1, x2 = __bfloat162float(x[half]) + b2;
    float y1 = x1, y2 = x2;
    if (rotate) {
      const size_t t = (size_t)depth[n] * half + i;
      const float c = cos_t[t], s = sin_t[t];
      y1 = x1 * c - x2 * s;
      y2 = x2 * c + x1 * s;
    }
    x[0] = __float2bfloat16_rn(y1);
    x[half] = __float2bfloat16_rn(y2);
  }
}

// dqkv_out (bf16) = inverse rotation of dqkv (fp32) on q and k, copy on v; dbias += column sums of
// the fp32 results, accumulated over the block's rows in registers, one atomicAdd per column.
__global__ void rope_backward_kernel(bf16* dqkv_out, float* dbias, const float* dqkv, const int32_t* depth,
                                     const float* cos_t, const float* sin_t, int N, int H, int KVH, int D, int units,
                                     int rows) {
  const int u = blockIdx.y * blockDim.x + threadIdx.x;
  if (u >= units) return;  // no barriers in this kernel
  const int half = D / 2, QKV = (H + 2 * KVH) * D;
  const int head = u / half, i = u - head * half;
  const int col = head * D + i;
  const bool rotate = head < H + KVH;
  const int n0 = blockIdx.x * rows, n1 = min(N, n0 + rows);
  float s1 = 0.f, s2 = 0.f;
  for (int n = n0; n < n1; n++) {
    const size_t off = (size_t)n * QKV + col;
    const float x1 = dqkv[off], x2 = dqkv[off + half];
    float y1 = x1, y2 = x2;
    if (rotate) {  // transpose of the forward rotation: sin -> -sin
      const size_t t = (size_t)depth[n] * half + i;
      const float c = cos_t[t], s = sin_t[t];
      y1 = x1 * c + x2 * s;
      y2 = x2 * c - x1 * s;
    }
    dqkv_out[off] = __float2bfloat16_rn(y1);
    dqkv_out[off + half] = __float2bfloat16_rn(y2);
    s1 += y1;
    s2 += y2;
  }
  if (dbias && n1 > n0) {
    atomicAdd(dbias + col, s1);
    atomicAdd(dbias + col + half, s2);
  }
}

void rope_grid(int N, int units, int* rows, dim3* grid) {
  // gridDim.y <= 65535: units / kRopeBlock is tiny for real models; checked anyway
  const unsigned gy = ceil_div((size_t)units, kRopeBlock);
  if (gy > 65535u) throw Error("rope: too many heads x head_dim for the launch grid");
  *rows = kRopeRows;
  *grid = dim3(ceil_div((size_t)N, kRopeRows), gy);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: h = silu(g) * u, silu(g) = g * sigmoid(g); d silu / dg = sig * (1 + g * (1 - sig))

__device__ __forceinline__ float sigmoidf_(float g) { return 1.0f / (1.0f + expf(-g)); }

// element e = n * F + i (scalar path)
__global__ void swiglu_forward_kernel(bf16* h, const bf16* gu, int F, size_t total) {
  for (size_t e = global_tid(); e < total; e += global_stride()) {
    const size_t n = e / F, i = e - n * F;
    const bf16* row = gu + n * 2 * F;
    const float g = __bfloat162float(row[i]), u = __bfloat162float(row[i + F]);
    h[e] = __float2bfloat16_rn(g * sigmoidf_(g) * u);
  }
}

// pair path (F even, pointers 4-byte aligned): element pair e covers (n, 2j), (n, 2j + 1)
__global__ void swiglu_forward_kernel2(bf16* h, const bf16* gu, int F, size_t pairs) {
  const int F2 = F / 2;
  for (size_t e = global_tid(); e < pairs; e += global_stride()) {
    const size_t n = e / F2, j = e - n * F2;
    const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(gu + n * 2 * F);
    const float2 g = __bfloat1622float2(row[j]), u = __bfloat1622float2(row[j + F2]);
    reinterpret_cast<__nv_bfloat162*>(h)[e] =
        __floats2bfloat162_rn(g.x * sigmoidf_(g.x) * u.x, g.y * sigmoidf_(g.y) * u.y);
  }
}

__device__ __forceinline__ void swiglu_grad(float d, float g, float u, float* dg, float* du) {
  const float sg = sigmoidf_(g);
  *dg = d * u * sg * (1.0f + g * (1.0f - sg));
  *du = d * (g * sg);
}

__global__ void swiglu_backward_kernel(bf16* dgu, const float* dh, const bf16* gu, int F, size_t total) {
  for (size_t e = global_tid(); e < total; e += global_stride()) {
    const size_t n = e / F, i = e - n * F;
    const bf16* row = gu + n * 2 * F;
    float dg, du;
    swiglu_grad(dh[e], __bfloat162float(row[i]), __bfloat162float(row[i + F]), &dg, &du);
    bf16* drow = dgu + n * 2 * F;
    drow[i] = __float2bfloat16_rn(dg);
    drow[i + F] = __float2bfloat16_rn(du);
  }
}

// pair path: F even, gu/dgu 4-byte aligned, dh 8-byte aligned
__global__ void swiglu_backward_kernel2(bf16* dgu, const float* dh, const bf16* gu, int F, size_t pairs) {
  const int F2 = F / 2;
  for (size_t e = global_tid(); e < pairs; e += global_stride()) {
    const size_t n = e / F2, j = e - n * F2;
    const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(gu + n * 2 * F);
    const float2 g = __bfloat1622float2(row[j]), u = __bfloat1622float2(row[j + F2]);
    const float2 d = reinterpret_cast<const float2*>(dh)[e];
    float dg0, du0, dg1, du1;
    swiglu_grad(d.x, g.x, u.x, &dg0, &du0);
    swiglu_grad(d.y, g.y, u.y, &dg1, &du1);
    __nv_bfloat162* drow = reinterpret_cast<__nv_bfloat162*>(dgu + n * 2 * F);
    drow[j] = __floats2bfloat162_rn(dg0, dg1);
    drow[j + F2] = __floats2bfloat162_rn(du0, du1);
  }
}

// ---------------------------------------------------------------------------------------------
// LM-head log-softmax, one block per chunk row. VEC: V % 4 == 0 and logits 16-byte aligned.

constexpr int kLogprobBlock = 1024;

template <bool VEC>
__global__ void __launch_bounds__(kLogprobBlock) logprob_forward_kernel(
    float* logp, float* entropy, float* lse, float* ent, const float* logits, const int32_t* tokens,
    const int32_t* internal, const int32_t* child_start, const int32_t* children, int r0, int V) {
  __shared__ float sh[32];
  const int r = blockIdx.x;
  const float* l = logits + (size_t)r * V;
  const float4* l4 = reinterpret_cast<const float4*>(l);
  const int V4 = V / 4;
  // pass 1: max
  float mx = -INFINITY;
  if (VEC) {
    for (int k = threadIdx.x; k < V4; k += blockDim.x) {
      const float4 f = l4[k];
      mx = fmaxf(mx, fmaxf(fmaxf(f.x, f.y), fmaxf(f.z, f.w)));
    }
  } else {
    for (int k = threadIdx.x; k < V; k += blockDim.x) mx = fmaxf(mx, l[k]);
  }
  mx = block_max(mx, sh);
  // pass 2: S = sum e^(l - mx), T = sum e^(l - mx) (l - mx)
  float S = 0.f, T = 0.f;
  if (VEC) {
    for (int k = threadIdx.x; k < V4; k += blockDim.x) {
      const float4 f = l4[k];
      const float z0 = f.x - mx, z1 = f.y - mx, z2 = f.z - mx, z3 = f.w - mx;
      const float e0 = expf(z0), e1 = expf(z1), e2 = expf(z2), e3 = expf(z3);
      S += (e0 + e1) + (e2 + e3);
      T += (e0 * z0 + e1 * z1) + (e2 * z2 + e3 * z3);
    }
  } else {
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
      const float z = l[k] - mx, e = expf(z);
      S += e;
      T += e * z;
    }
  }
  S = block_sum(S, sh);
  T = block_sum(T, sh);
  const float logsum = logf(S);
  const float L = mx + logsum;
  const float Hent = logsum - T / S;  // -sum p log p = log S - E_p[l - mx]
  if (threadIdx.x == 0) {
    lse[r0 + r] = L;
    ent[r0 + r] = Hent;
  }
  const int node = internal[r0 + r];
  for (int c = child_start[node] + threadIdx.x; c < child_start[node + 1]; c += blockDim.x) {
    const int ch = children[c];
    logp[ch] = l[tokens[ch]] - L;
    entropy[ch] = Hent;
  }
}

// dz_k = -p_k (A + E (lp_k + H)) + sum_c dlogp[c] 1[k == tok_c],  A = sum_c dlogp[c], E = sum_c dent[c].
// dlogits may alias logits: every element is read and then written by the same thread, and the
// one-hot additions (thread 0, serial, so repeated sibling tokens are summed without races and
// in the CPU's order) come after a barrier that orders them after all of the row's writes.
template <bool VEC>
__global__ void __launch_bounds__(kLogprobBlock) logprob_backward_kernel(
    float* dlogits, const float* logits, const float* lse, const float* ent, const float* dlogp,
    const float* dentropy, const int32_t* tokens, const int32_t* internal, const int32_t* child_start,
    const int32_t* children, int r0, int V) {
  __shared__ float sh[32];
  const int r = blockIdx.x;
  const int node = internal[r0 + r];
  const int c0 = child_start[node], c1 = child_start[node + 1];
  float a = 0.f, e = 0.f;
  for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    const int ch = children[c];
    a += dlogp[ch];
    if (dentropy) e += dentropy[ch];
  }
  const float A = block_sum(a, sh);
  const float E = dentropy ? block_sum(e, sh) : 0.f;  // uniform branch
  const float L = lse[r0 + r], Hent = ent[r0 + r];
  const float* l = logits + (size_t)r * V;
  float* g = dlogits + (size_t)r * V;
  if (VEC) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    float4* g4 = reinterpret_cast<float4*>(g);
    const int V4 = V / 4;
    for (int k = threadIdx.x; k < V4; k += blockDim.x) {
      const float4 f = l4[k];
      const float lp0 = f.x - L, lp1 = f.y - L, lp2 = f.z - L, lp3 = f.w - L;
      float4 o;
      o.x = -expf(lp0) * (A + E * (lp0 + Hent));
      o.y = -expf(lp1) * (A + E * (lp1 + Hent));
      o.z = -expf(lp2) * (A + E * (lp2 + Hent));
      o.w = -expf(lp3) * (A + E * (lp3 + Hent));
      g4[k] = o;
    }
  } else {
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
      const float lp = l[k] - L;
      g[k] = -expf(lp) * (A + E * (lp + Hent));
    }
  }
  __syncthreads();  // the row's writes above are visible to thread 0 below
  if (threadIdx.x == 0) {
    for (int c = c0; c < c1; c++) {
      const int ch = children[c];
      g[tokens[ch]] += dlogp[ch];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// AdamW and gradient utilities

__global__ void adamw_kernel(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float inv_bc1, float inv_bc2,
                             const float* grad_scale) {
  const float gs = grad_scale ? *grad_scale : 1.0f;
  for (size_t i = global_tid(); i < n; i += global_stride()) {
    const float gi = grad_scale ? g[i] * gs : g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    const float pi = p[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
    p[i] = pi;
    if (p16) p16[i] = __float2bfloat16_rn(pi);
  }
}

__global__ void sum_squares_kernel(double* acc, const float* x, size_t n) {
  __shared__ double sh[32];
  double s = 0.0;
  for (size_t i = global_tid(); i < n; i += global_stride()) {
    const double xi = x[i];
    s += xi * xi;  // exact product of two floats in double
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) atomicAdd(acc, s);
}

__global__ void scale_kernel(float* x, size_t n, const float* scale) {
  const float sc = *scale;
  for (size_t i = global_tid(); i < n; i += global_stride()) x[i] *= sc;
}

}  // namespace

// =============================================================================================
// launchers

void f32_to_bf16(bf16* out, const float* in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  const int block = 256;
  if (aligned(in, 16) && aligned(out, 4))
    f32_to_bf16_vec_kernel<<<grid_stride_blocks((n + 3) / 4, block), block, 0, s>>>(out, in, n);
  else
    f32_to_bf16_kernel<<<grid_stride_blocks(n, block), block, 0, s>>>(out, in, n);
  launched("f32_to_bf16");
}

void gather_rows(float* out, const float* in, const int32_t* idx, int R, int C, cudaStream_t s) {
  copy_rows<true>(out, in, idx, R, C, s, "gather_rows");
}

void scatter_rows(float* out, const float* in, const int32_t* idx, int R, int C, cudaStream_t s) {
  copy_rows<false>(out, in, idx, R, C, s, "scatter_rows");
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C, cudaStream_t s) {
  copy_rows<true>(out, wte, tokens, N, C, s, "embedding_forward");
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  embedding_backward_kernel<<<N, 256, 0, s>>>(dwte, dout, tokens, C);
  launched("embedding_backward");
}

void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* w, int N, int C, float eps,
                     cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<bf16><<<N, 256, 0, s>>>(out, rstd, inp, w, C, eps);
  launched("rmsnorm_forward (bf16 out)");
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps,
                     cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<float><<<N, 256, 0, s>>>(out, rstd, inp, w, C, eps);
  launched("rmsnorm_forward (fp32 out)");
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int N, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  const size_t smem = dw ? sizeof(float) * (size_t)C : 0;
  if (smem > 48 * 1024 - 256) {  // beyond the default dynamic shared memory limit: opt in
    if (smem > 200 * 1024) throw Error("rmsnorm_backward: C = " + std::to_string(C) + " is too large for shared dw");
    ANVIL_CUDA(cudaFuncSetAttribute(rmsnorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  }
  // as many blocks as fit on the device at once (each flushes C atomics at the end)
  int per_sm = 0;
  ANVIL_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_backward_kernel, 256, smem));
  const int blocks = std::min(N, std::max(1, per_sm) * sm_count());
  rmsnorm_backward_kernel<<<blocks, 256, smem, s>>>(dinp, dw, dout, inp, w, rstd, N, C);
  launched("rmsnorm_backward");
}

void rope_forward(bf16* qkv, const float* bias, const int32_t* depth, const float* cos_t, const float* sin_t, int N,
                  int H, int KVH, int D, cudaStream_t s) {
  if (N <= 0 || D <= 0) return;
  if (D % 2 != 0) throw Error("rope_forward: head dim must be even, got " + std::to_string(D));
  // without a bias the v heads are left untouched, so only q and k units are launched
  const int units = (H + KVH + (bias ? KVH : 0)) * (D / 2);
  if (units <= 0) return;
  int rows;
  dim3 grid;
  rope_grid(N, units, &rows, &grid);
  rope_forward_kernel<<<grid, kRopeBlock, 0, s>>>(qkv, bias, depth, cos_t, sin_t, N, H, KVH, D, units, rows);
  launched("rope_forward");
}

void rope_backward(bf16* dqkv_out, float* dbias, const float* dqkv, const int32_t* depth, const float* cos_t,
                   const float* sin_t, int N, int H, int KVH, int D, cudaStream_t s) {
  if (N <= 0 || D <= 0) return;
  if (D % 2 != 0) throw Error("rope_backward: head dim must be even, got " + std::to_string(D));
  const int units = (H + 2 * KVH) * (D / 2);
  if (units <= 0) return;
  int rows;
  dim3 grid;
  rope_grid(N, units, &rows, &grid);
  rope_backward_kernel<<<grid, kRopeBlock, 0, s>>>(dqkv_out, dbias, dqkv, depth, cos_t, sin_t, N, H, KVH, D, units,
                                                   rows);
  launched("rope_backward");
}

void swiglu_forward(bf16* h, const bf16* gu, int N, int F, cudaStream_t s) {
  if (N <= 0 || F <= 0) return;
  const int block = 256;
  const size_t total = (size_t)N * F;
  if (F % 2 == 0 && aligned(h, 4) && aligned(gu, 4))
    swiglu_forward_kernel2<<<grid_stride_blocks(total / 2, block), block, 0, s>>>(h, gu, F, total / 2);
  else
    swiglu_forward_kernel<<<grid_stride_blocks(total, block), block, 0, s>>>(h, gu, F, total);
  launched("swiglu_forward");
}

void swiglu_backward(bf16* dgu, const float* dh, const bf16* gu, int N, int F, cudaStream_t s) {
  if (N <= 0 || F <= 0) return;
  const int block = 256;
  const size_t total = (size_t)N * F;
  if (F % 2 == 0 && aligned(dgu, 4) && aligned(gu, 4) && aligned(dh, 8))
    swiglu_backward_kernel2<<<grid_stride_blocks(total / 2, block), block, 0, s>>>(dgu, dh, gu, F, total / 2);
  else
    swiglu_backward_kernel<<<grid_stride_blocks(total, block), block, 0, s>>>(dgu, dh, gu, F, total);
  launched("swiglu_backward");
}

void logprob_forward(float* logp, float* entropy, float* lse, float* ent, const float* logits, const int32_t* tokens,
                     const int32_t* internal, const int32_t* child_start, const int32_t* children, int r0, int R,
                     int V, cudaStream_t s) {
  if (R <= 0 || V <= 0) return;
  if (V % 4 == 0 && aligned(logits, 16))
    logprob_forward_kernel<true><<<R, kLogprobBlock, 0, s>>>(logp, entropy, lse, ent, logits, tokens, internal,
                                                             child_start, children, r0, V);
  else
    logprob_forward_kernel<false><<<R, kLogprobBlock, 0, s>>>(logp, entropy, lse, ent, logits, tokens, internal,
                                                              child_start, children, r0, V);
  launched("logprob_forward");
}

void logprob_backward(float* dlogits, const float* logits, const float* lse, const float* ent, const float* dlogp,
                      const float* dentropy, const int32_t* tokens, const int32_t* internal,
                      const int32_t* child_start, const int32_t* children, int r0, int R, int V, cudaStream_t s) {
  if (R <= 0 || V <= 0) return;
  if (V % 4 == 0 && aligned(logits, 16) && aligned(dlogits, 16))
    logprob_backward_kernel<true><<<R, kLogprobBlock, 0, s>>>(dlogits, logits, lse, ent, dlogp, dentropy, tokens,
                                                              internal, child_start, children, r0, V);
  else
    logprob_backward_kernel<false><<<R, kLogprobBlock, 0, s>>>(dlogits, logits, lse, ent, dlogp, dentropy, tokens,
                                                               internal, child_start, children, r0, V);
  launched("logprob_backward");
}

void adamw_update(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, const float* grad_scale, cudaStream_t s) {
  if (n == 0) return;
  // bias corrections in double on the host, exactly as ../adamw.cc
  const float inv_bc1 = (float)(1.0 / (1.0 - std::pow((double)beta1, t)));
  const float inv_bc2 = (float)(1.0 / (1.0 - std::pow((double)beta2, t)));
  const float decay = 1.0f - lr * weight_decay;
  const int block = 256;
  adamw_kernel<<<grid_stride_blocks(n, block), block, 0, s>>>(p, p16, g, m, v, n, lr, beta1, beta2, eps, decay,
                                                              inv_bc1, inv_bc2, grad_scale);
  launched("adamw_update");
}

void sum_squares(double* acc, const float* x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  const int block = 256;
  sum_squares_kernel<<<grid_stride_blocks(n, block), block, 0, s>>>(acc, x, n);
  launched("sum_squares");
}

void scale_inplace(float* x, size_t n, const float* scale, cudaStream_t s) {
  if (n == 0) return;
  const int block = 256;
  scale_kernel<<<grid_stride_blocks(n, block), block, 0, s>>>(x, n, scale);
  launched("scale_inplace");
}

void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
  // ANVIL_CUDA_SYNC_CHECK=1: wait for the work so that an execution error is reported here,
  // against the launch that caused it (slow; for debugging)
  static const bool sync_check = [] {
    const char* v = std::getenv("ANVIL_CUDA_SYNC_CHECK");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (sync_check) {
    e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda(e, (std::string(what) + " (ANVIL_CUDA_SYNC_CHECK)").c_str(), __FILE__, __LINE__);
  }
}

}  // namespace cuda
}  // namespace anvil
