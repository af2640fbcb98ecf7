// Kernels of GPU generation over the paged KV cache (see kernels.cuh for the block layout): the
// write of each new token's K and V into its slot, and the attention of each new token over its
// sequence's positions. Both are plain SIMT kernels with fp32 math; the CPU reference is the
// attention loop of ../generate.cc (scores q . k / sqrt(D), softmax, weighted sum of v).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kAttnWarps = 4;     // warps per (row, head) block; each takes every 4th position
constexpr int kMaxHeadDim = 256;  // 8 values per lane

void launched(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// One block per row: its K and V (2 * KVD contiguous bf16 after the q heads) into the slot.
__global__ void paged_kv_write_kernel(bf16* const* block_ptr, const bf16* qkv, const int32_t* row_pos,
                                      const int32_t* row_bt, const int32_t* block_table, int layer, int H, int KVH,
                                      int D) {
  const int r = blockIdx.x;
  const int KVD = KVH * D, QKV = (H + 2 * KVH) * D;
  const int pos = row_pos[r];
  bf16* dst = block_ptr[block_table[row_bt[r] + pos / kKvBlock]] +
              ((size_t)layer * 2 * kKvBlock + (size_t)(pos % kKvBlock)) * KVD;
  const bf16* src = qkv + (size_t)r * QKV + (size_t)H * D;  // k [KVD] then v [KVD]
  for (int j = threadIdx.x; j < 2 * KVD; j += blockDim.x) {
    const int kv = j >= KVD ? 1 : 0, c = j - kv * KVD;
    dst[(size_t)kv * kKvBlock * KVD + c] = src[j];
  }
}

// One block per (row, head), kAttnWarps warps. Warp w runs an online softmax over positions
// t = w, w + kAttnWarps, ... <= row_pos[r]: the score is one warp reduction of the lanes' partial
// dots (lane holds dims lane + 32 i); the running (max, sum, acc) of the warps are merged at the
// end through shared memory. DPL = values per lane (D <= 32 * DPL).
template <int DPL>
__global__ void paged_attention_kernel(bf16* out, const bf16* qkv, bf16* const* block_ptr, const int32_t* row_pos,
                                       const int32_t* row_bt, const int32_t* block_table, int layer, int H, int KVH,
                                       int D, float scale) {
  __shared__ float sh_m[kAttnWarps], sh_l[kAttnWarps];
  __shared__ float sh_acc[kAttnWarps][32 * DPL];
  const size_t bid = blockIdx.x;
  const int r = (int)(bid / H), h = (int)(bid % H);
  const int KVD = KVH * D, QKV = (H + 2 * KVH) * D;
  const int kvh = h / (H / KVH);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const bf16* q = qkv + (size_t)r * QKV + (size_t)h * D;
  float qr[DPL], acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; i++) {
    const int d = lane + 32 * i;
    qr[i] = d < D ? __bfloat162float(q[d]) : 0.f;
    acc[i] = 0.f;
  }
  const int T = row_pos[r] + 1;
  const int32_t* bt = block_table + row_bt[r];
  const size_t koff = (size_t)layer * 2 * kKvBlock * KVD + (size_t)kvh * D;
  const size_t voff = koff + (size_t)kKvBlock * KVD;
  float m = -INFINITY, l = 0.f;
  for (int t = w; t < T; t += kAttnWarps) {
    const bf16* base = block_ptr[bt[t / kKvBlock]] + (size_t)(t % kKvBlock) * KVD;
    const bf16* k = base + koff;
    const bf16* v = base + voff;
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
      const int d = lane + 32 * i;
      if (d < D) part += qr[i] * __bfloat162float(k[d]);
    }
    const float sc = warp_sum(part) * scale;  // identical in every lane
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn);  // 0 at the first position (m = -inf)
    const float p = expf(sc - mn);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * corr + (d < D ? p * __bfloat162float(v[d]) : 0.f);
    }
    m = mn;
  }
  if (lane == 0) {
    sh_m[w] = m;
    sh_l[w] = l;
  }
#pragma unroll
  for (int i = 0; i < DPL; i++) sh_acc[w][lane + 32 * i] = acc[i];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int j = 0; j < kAttnWarps; j++) M = fmaxf(M, sh_m[j]);
  float e[kAttnWarps], Lsum = 0.f;
#pragma unroll
  for (int j = 0; j < kAttnWarps; j++) {
    e[j] = sh_m[j] == -INFINITY ? 0.f : expf(sh_m[j] - M);  // a warp without positions (T < 4)
    Lsum += sh_l[j] * e[j];
  }
  const float inv = 1.0f / Lsum;
  bf16* o = out + (size_t)r * H * D + (size_t)h * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc_d = 0.f;
#pragma unroll
    for (int j = 0; j < kAttnWarps; j++) acc_d += sh_acc[j][d] * e[j];
    o[d] = __float2bfloat16_rn(acc_d * inv);
  }
}

}  // namespace

void paged_kv_write(bf16* const* block_ptr, const bf16* qkv, const int32_t* row_pos, const int32_t* row_bt,
                    const int32_t* block_table, int N, int layer, int H, int KVH, int D, cudaStream_t s) {
  if (N <= 0) return;
  const int threads = std::min(256, ((2 * KVH * D + 31) / 32) * 32);
  paged_kv_write_kernel<<<N, threads, 0, s>>>(block_ptr, qkv, row_pos, row_bt, block_table, layer, H, KVH, D);
  launched("paged_kv_write");
}

void paged_attention(bf16* out, const bf16* qkv, bf16* const* block_ptr, const int32_t* row_pos,
                     const int32_t* row_bt, const int32_t* block_table, int N, int layer, int H, int KVH, int D,
                     cudaStream_t s) {
  if (N <= 0) return;
  if (D > kMaxHeadDim) throw Error("paged_attention: head_dim " + std::to_string(D) + " is over 256");
  if (H % KVH != 0) throw Error("paged_attention: heads must be a multiple of kv heads");
  const size_t blocks = (size_t)N * H;
  if (blocks > 0x7fffffffu) throw Error("paged_attention: too many rows x heads for one launch");
  const float scale = 1.0f / std::sqrt((float)D);
  const dim3 grid((unsigned)blocks), block(32 * kAttnWarps);
  if (D <= 32)
    paged_attention_kernel<1><<<grid, block, 0, s>>>(out, qkv, block_ptr, row_pos, row_bt, block_table, layer, H, KVH, D, scale);
  else if (D <= 64)
    paged_attention_kernel<2><<<grid, block, 0, s>>>(out, qkv, block_ptr, row_pos, row_bt, block_table, layer, H, KVH, D, scale);
  else if (D <= 128)
    paged_attention_kernel<4><<<grid, block, 0, s>>>(out, qkv, block_ptr, row_pos, row_bt, block_table, layer, H, KVH, D, scale);
  else
    paged_attention_kernel<8><<<grid, block, 0, s>>>(out, qkv, block_ptr, row_pos, row_bt, block_table, layer, H, KVH, D, scale);
  launched("paged_attention");
}

}  // namespace cuda
}  // namespace anvil
