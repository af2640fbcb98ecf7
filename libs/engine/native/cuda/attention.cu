// Tree attention on the GPU (contract: kernels.cuh; reference: ../attention.cc).
//
// Nodes are in DFS pre-order, so key i is visible to query j iff i <= j < end[i]: a chain is
// causal attention, a forest is block-diagonal causal, a prefix tree masks the keys of sibling
// branches.
//
// Mask summaries. A pre-pass (tile_summary_kernel) stores, for every tile of BT = 64 consecutive
// keys [k0, k1), maxEnd = max end[i] and minEnd = min end[i] over the tile's keys in the
// workspace. For a query tile [q0, q1) the key tile is
//   * skipped          if k0 > q1 - 1 or maxEnd <= q0 (no key of the tile is an ancestor of any
//                      query of the tile: a sibling branch, or a finished earlier sequence);
//   * fully visible    if k1 - 1 <= q0 and minEnd >= q1 (and both tiles are complete, so that no
//                      padded row or key is involved): no per-element test;
//   * masked           otherwise: per element i <= j && j < end[i] (padded keys get end 0,
//                      padded queries j >= N fail j < end[i] <= N, so both are always masked).
// For a prompt with branches, a branch's query tiles see the prompt tiles fully and skip every
// other branch's tiles, so the work is close to sum over nodes of (depth + 1).
//
// Tensor-core path (D a multiple of 16, 32 <= D <= 128, 16-byte aligned rows): nvcuda::wmma
// bf16 16x16x16 fragments with fp32 accumulation, 4 warps (128 threads) per block, tiles of
// 64 queries x 64 keys, each warp owning 16 rows of the tile.
//  Forward: one block per (query tile, query head), heaviest (last) query tiles first. The warp's
//   Q fragments stay in registers, its O accumulator in D/16 accumulator fragments. Per visible
//   key tile: K and V tiles -> smem (bf16, row pitch D+8); S = Q K^T -> fp32 smem (the warp's
//   16 rows); two lanes per row do the mask and the online softmax in the log2 domain (running
//   max m, running sum l, rescale alpha), write P as bf16 to smem and alpha per row; O fragments
//   are rescaled by alpha[row] through a row map (an accumulator fragment loaded from a matrix
//   of row indices gives each fragment element's row; all accumulator fragments of one type
//   share that element mapping); O += P V. At the end O /= l, lse = (m + log2 l) * ln 2.
//   Shared memory: max(Q tile, S tile) + K + V + P + 1 KiB = 61 KiB at D = 128 (44 KiB at
//   D = 64); 168 registers (launch bounds for three blocks per SM).
//  Backward (FlashAttention-2 split): a pre-kernel writes Di = rowsum(dO * O) per (node, head)
//   into the workspace. One block per (key tile, query head), key tile 0 (the most queries)
//   first; each warp owns 16 keys and keeps dK, dV for them in accumulator fragments. The
//   block loops over the query tiles that can see the key tile: q0 from k0 while q0 < maxEnd,
//   masking as above. Per query tile: Q, dO tiles, lse and Di -> smem; per 16x16 sub-tile
//   S^T = K Q^T and dP^T = V dO^T go through a per-warp fp32 staging buffer where the lanes
//   compute P = exp2(S * scale * log2e - lse * log2e) (masked), dS = P * (dP - Di) and store
//   them as bf16; dV += P^T dO, dK += dS^T Q; after a block barrier each warp computes 16 rows
//   of dQ = dS K (dS^T read as a col-major A operand) and adds them, times scale, into dqkv's
//   q part with fp32 atomicAdd. At the end dK * scale and dV are atomically added into dqkv's
//   k and v parts (the G = H / KVH query heads of a kv group add into the same rows).
//   Shared memory: K, V, Q, dO tiles + P^T, dS^T (bf16) + 8 KiB staging + 768 B = 94.75 KiB at
//   D = 128 (two blocks per SM).
// FlashAttention-2 path (attention_fa2.cu): for D = 64 and 128 with 16-byte aligned pointers,
// tree_attention_forward/backward run raw mma.sync m16n8k16 kernels (softmax in registers,
// cp.async double buffering) instead of the wmma kernels below, unless the environment sets
// ANVIL_ATTENTION_IMPL=wmma or attn::set_impl(attn::kWmma) was called (attention_common.cuh).
// The summaries and Di above are computed here for both paths.
// SIMT fallback (any other D <= 256, or unaligned pointers): one warp per (query, head), fp32
// math; the warp walks the keys in chunks of 32 (one key per lane, the tile summaries skip
// invisible tiles), online softmax over the chunk, each lane owning D/32 output dims. The
// backward warp recomputes P, dS per key and adds dK, dV with atomics, dQ for its own row.
//
// No allocation: the workspace holds the two int arrays of tile summaries and Di[N, H].
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "attention_common.cuh"
#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

namespace wm = nvcuda::wmma;

using attn::BT;                // queries and keys per tile
using attn::LOG2E;
using attn::LN2;
using attn::align_up;
using attn::Workspace;
using attn::num_tiles;
using attn::carve;
constexpr int NW = 4;          // warps per tensor-core block
constexpr int NTHR = NW * 32;  // threads per block (all kernels)
constexpr int LDP = BT + 8;    // pitch (bf16 elements) of P / P^T / dS^T tiles
constexpr int LDS = BT + 4;    // pitch (floats) of the forward's S tile
constexpr int FB_MAXT = 8;     // SIMT fallback: up to 8 dims per lane, D <= 256

constexpr size_t cmax(size_t a, size_t b) { return a > b ? a : b; }

using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, bf16, wm::row_major>;
using FragAc = wm::fragment<wm::matrix_a, 16, 16, 16, bf16, wm::col_major>;
using FragBr = wm::fragment<wm::matrix_b, 16, 16, 16, bf16, wm::row_major>;
using FragBc = wm::fragment<wm::matrix_b, 16, 16, 16, bf16, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 16, float>;
constexpr int FRAG_ELEMS = FragC::num_elements;  // 8 on sm_80+

// Workspace carving (attention_common.cuh): [tile maxEnd nT ints][tile minEnd nT ints]
// (256-aligned) [Di N*H floats]

// ---------------------------------------------------------------------------------------------
// pre-passes

// One warp per key tile: maxEnd and minEnd over the tile's (valid) keys.
__global__ void tile_summary_kernel(int* tmax, int* tmin, const int32_t* end, int N, int nT) {
  const int t = blockIdx.x * NW + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (t >= nT) return;
  int mx = 0, mn = 0x7fffffff;
  for (int k = lane; k < BT; k += 32) {
    const int i = t * BT + k;
    if (i < N) {
      const int e = end[i];
      mx = max(mx, e);
      mn = min(mn, e);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, o));
  }
  if (lane == 0) {
    tmax[t] = mx;
    tmin[t] = mn;
  }
}

// One warp per (node, head): di[j*H + h] = sum_d dout[j,h,d] * out[j,h,d].
__global__ void rowdot_kernel(float* di, const bf16* dout, const bf16* out, int N, int H, int D) {
  const long long g = (long long)blockIdx.x * NW + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (g >= (long long)N * H) return;
  const size_t base = (size_t)g * D;  // row j, head h of an [N, H*D] matrix starts at (j*H + h)*D
  float acc = 0.f;
  for (int d = lane; d < D; d += 32) acc += __bfloat162float(dout[base + d]) * __bfloat162float(out[base + d]);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) di[g] = acc;
}

// ---------------------------------------------------------------------------------------------
// tensor-core path

// rows [0, rows) of a [BT, D] bf16 tile from global rows src + r * stride (16-byte vectors), zero
// rows after; dst pitch D + 8.
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, size_t stride, int rows) {
  constexpr int VPR = D / 8;  // uint4 per row
  for (int idx = threadIdx.x; idx < BT * VPR; idx += NTHR) {
    const int r = idx / VPR, c = idx - r * VPR;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < rows) v = *reinterpret_cast<const uint4*>(src + (size_t)r * stride + c * 8);
    *reinterpret_cast<uint4*>(dst + r * (D + 8) + c * 8) = v;
  }
}

template <int D>
struct FwdSmem {
  static constexpr int LDK = D + 8;
  static constexpr size_t TILE = align_up((size_t)BT * LDK * sizeof(bf16), 128);
  static constexpr size_t R0 = align_up(cmax(TILE, (size_t)BT * LDS * sizeof(float)), 128);  // Q tile, then S
  static constexpr size_t OFF_K = R0;
  static constexpr size_t OFF_V = OFF_K + TILE;
  static constexpr size_t OFF_P = OFF_V + TILE;
  static constexpr size_t OFF_ALPHA = OFF_P + align_up((size_t)BT * LDP * sizeof(bf16), 128);
  static constexpr size_t OFF_END = OFF_ALPHA + BT * sizeof(float) * 2;
  static constexpr size_t TOTAL = OFF_END + BT * sizeof(int) * 2;
};

template <int D>
__global__ void __launch_bounds__(NTHR, 3) attn_fwd_tc_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                                           const bf16* __restrict__ qkv, const int32_t* __restrict__ end,
                                                           const int* __restrict__ tmax, const int* __restrict__ tmin,
                                                           int N, int H, int KVH, float scale_log2) {
  using L = FwdSmem<D>;
  constexpr int LDK = L::LDK, ND = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  float* Ss = reinterpret_cast<float*>(smem);  // aliases Qs once the Q fragments are loaded
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::OFF_K);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::OFF_V);
  bf16* Ps = reinterpret_cast<bf16*>(smem + L::OFF_P);
  float* alpha_s = reinterpret_cast<float*>(smem + L::OFF_ALPHA);
  int* kend_s = reinterpret_cast<int*>(smem + L::OFF_END);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h = blockIdx.x;
  const int qt = (int)gridDim.y - 1 - (int)blockIdx.y;  // heaviest query tiles first
  const int q0 = qt * BT, qn = min(BT, N - q0), q1 = q0 + qn;
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D;

  load_tile<D>(Qs, qkv + (size_t)q0 * QKV + (size_t)h * D, QKV, qn);
  float* mapbuf = reinterpret_cast<float*>(Ps);  // 16x16 matrix of row indices
  for (int idx = tid; idx < 256; idx += NTHR) mapbuf[idx] = (float)(idx >> 4);
  __syncthreads();
  FragA qf[ND];
#pragma unroll
  for (int kk = 0; kk < ND; kk++) wm::load_matrix_sync(qf[kk], Qs + (16 * warp) * LDK + 16 * kk, LDK);
  int rm[FRAG_ELEMS];
  {
    FragC mf;
    wm::load_matrix_sync(mf, mapbuf, 16, wm::mem_row_major);
#pragma unroll
    for (int e = 0; e < FRAG_ELEMS; e++) rm[e] = 16 * warp + (int)mf.x[e];
  }
  __syncthreads();  // Q and the row map are read before S (aliasing Q) and P (aliasing the map) are written

  FragC of[ND];
#pragma unroll
  for (int n = 0; n < ND; n++) wm::fill_fragment(of[n], 0.f);

  const int r = lane >> 1, half = lane & 1;  // this lane's row of the warp's 16 and its column parity
  const int row = 16 * warp + r;              // row within the tile
  const int j = q0 + row;                     // query node
  float m_run = -INFINITY, l_run = 0.f;       // log2-domain running max, running sum (same in both lanes)

  for (int kt = 0; kt <= qt; kt++) {
    const int k0 = kt * BT;
    if (tmax[kt] <= q0) continue;  // no key of the tile is an ancestor of a query of the tile
    const int kn = min(BT, N - k0);
    const bool full = kn == BT && qn == BT && k0 + BT - 1 <= q0 && tmin[kt] >= q1;
    __syncthreads();  // every warp is done with the previous K, V tiles
    load_tile<D>(Ks, qkv + (size_t)k0 * QKV + (size_t)(H + kvh) * D, QKV, kn);
    load_tile<D>(Vs, qkv + (size_t)k0 * QKV + (size_t)(H + KVH + kvh) * D, QKV, kn);
    if (tid < BT) kend_s[tid] = tid < kn ? end[k0 + tid] : 0;
    __syncthreads();

    // S (warp's 16 rows x 64 keys) = Q K^T
#pragma unroll
    for (int c = 0; c < BT / 16; c++) {
      FragC acc;
      wm::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < ND; kk++) {
        FragBc b;
        wm::load_matrix_sync(b, Ks + (16 * c) * LDK + 16 * kk, LDK);
        wm::mma_sync(acc, qf[kk], b, acc);
      }
      wm::store_matrix_sync(Ss + (16 * warp) * LDS + 16 * c, acc, LDS, wm::mem_row_major);
    }
    __syncwarp();

    // mask + online softmax, two lanes per row (columns 2t + half)
    // (the masked, log2-scaled scores go back into the lane's own S elements, not registers)
    float* srow = Ss + row * LDS;
    float mt = -INFINITY;
#pragma unroll
    for (int t = 0; t < BT / 2; t++) {
      const int col = 2 * t + half;
      const bool vis = full || (k0 + col <= j && j < kend_s[col]);
      const float sc = vis ? srow[col] * scale_log2 : -INFINITY;
      srow[col] = sc;
      mt = fmaxf(mt, sc);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    const float m_new = fmaxf(m_run, mt);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // fully masked row so far: no NaN
    const float alpha = exp2f(m_run - m_use);              // 0 when m_run = -inf
    float ps = 0.f;
    bf16* prow = Ps + row * LDP;
#pragma unroll
    for (int t = 0; t < BT / 2; t++) {
      const float p = exp2f(srow[2 * t + half] - m_use);  // 0 for masked (-inf)
      ps += p;
      prow[2 * t + half] = __float2bfloat16(p);
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    l_run = l_run * alpha + ps;
    m_run = m_new;
    if (half == 0) alpha_s[row] = alpha;
    __syncwarp();

    // O = O * alpha[row] + P V
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
      for (int e = 0; e < FRAG_ELEMS; e++) of[n].x[e] *= alpha_s[rm[e]];
#pragma unroll
    for (int kk = 0; kk < BT / 16; kk++) {
      FragA a;
      wm::load_matrix_sync(a, Ps + (16 * warp) * LDP + 16 * kk, LDP);
#pragma unroll
      for (int n = 0; n < ND; n++) {
        FragBr b;
        wm::load_matrix_sync(b, Vs + (16 * kk) * LDK + 16 * n, LDK);
        wm::mma_sync(of[n], a, b, of[n]);
      }
    }
    __syncwarp();  // alpha_s and P of this warp are read before the next tile rewrites them
  }

  // O / l, then out (bf16) through the warp's rows of the S buffer, 16 columns at a time
  if (half == 0) alpha_s[row] = l_run > 0.f ? 1.f / l_run : 0.f;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < ND; n++)
#pragma unroll
    for (int e = 0; e < FRAG_ELEMS; e++) of[n].x[e] *= alpha_s[rm[e]];
  const size_t HD = (size_t)H * D;
  float* stg = Ss + (16 * warp) * LDS;
#pragma unroll
  for (int n = 0; n < ND; n++) {
    wm::store_matrix_sync(stg, of[n], LDS, wm::mem_row_major);
    __syncwarp();
    if (j < N) {
      const float* src = stg + r * LDS + 8 * half;
      union {
        uint4 u;
        __nv_bfloat162 b[4];
      } pack;
#pragma unroll
      for (int u = 0; u < 4; u++) pack.b[u] = __floats2bfloat162_rn(src[2 * u], src[2 * u + 1]);
      *reinterpret_cast<uint4*>(out + (size_t)j * HD + (size_t)h * D + 16 * n + 8 * half) = pack.u;
    }
    __syncwarp();
  }
  if (half == 0 && j < N) lse[(size_t)j * H + h] = l_run > 0.f ? (m_run + log2f(l_run)) * LN2 : -INFINITY;
}

template <int D>
struct BwdSmem {
  static constexpr int LDK = D + 8;
  static constexpr size_t TILE = align_up((size_t)BT * LDK * sizeof(bf16), 128);
  static constexpr size_t PTILE = align_up((size_t)BT * LDP * sizeof(bf16), 128);
  static constexpr size_t OFF_K = 0;
  static constexpr size_t OFF_V = OFF_K + TILE;
  static constexpr size_t OFF_Q = OFF_V + TILE;
  static constexpr size_t OFF_DO = OFF_Q + TILE;
  static constexpr size_t OFF_PT = OFF_DO + TILE;
  static constexpr size_t OFF_DST = OFF_PT + PTILE;
  static constexpr size_t OFF_STG = OFF_DST + PTILE;  // NW x 2 x 16x16 floats
  static constexpr size_t OFF_LSE = OFF_STG + (size_t)NW * 2 * 256 * sizeof(float);
  static constexpr size_t OFF_DI = OFF_LSE + BT * sizeof(float);
  static constexpr size_t OFF_END = OFF_DI + BT * sizeof(float);
  static constexpr size_t TOTAL = OFF_END + BT * sizeof(int);
};

template <int D>
__global__ void __launch_bounds__(NTHR, 2)
    attn_bwd_tc_kernel(float* __restrict__ dqkv, const bf16* __restrict__ dout, const float* __restrict__ lse,
                       const float* __restrict__ di, const bf16* __restrict__ qkv, const int32_t* __restrict__ end,
                       const int* __restrict__ tmax, const int* __restrict__ tmin, int N, int H, int KVH, float scale,
                       float scale_log2) {
  using L = BwdSmem<D>;
  constexpr int LDK = L::LDK, ND = D / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + L::OFF_K);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L::OFF_V);
  bf16* Qs = reinterpret_cast<bf16*>(smem + L::OFF_Q);
  bf16* dOs = reinterpret_cast<bf16*>(smem + L::OFF_DO);
  bf16* PT = reinterpret_cast<bf16*>(smem + L::OFF_PT);
  bf16* dST = reinterpret_cast<bf16*>(smem + L::OFF_DST);
  float* lse2_s = reinterpret_cast<float*>(smem + L::OFF_LSE);
  float* di_s = reinterpret_cast<float*>(smem + L::OFF_DI);
  int* kend_s = reinterpret_cast<int*>(smem + L::OFF_END);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float* stg0 = reinterpret_cast<float*>(smem + L::OFF_STG) + warp * 512;
  float* stg1 = stg0 + 256;
  const int h = blockIdx.x, kt = blockIdx.y;  // key tile 0 (the most queries) first
  const int k0 = kt * BT, kn = min(BT, N - k0);
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D, HD = (size_t)H * D;
  const int maxEnd = tmax[kt], minEnd = tmin[kt];

  load_tile<D>(Ks, qkv + (size_t)k0 * QKV + (size_t)(H + kvh) * D, QKV, kn);
  load_tile<D>(Vs, qkv + (size_t)k0 * QKV + (size_t)(H + KVH + kvh) * D, QKV, kn);
  if (tid < BT) kend_s[tid] = tid < kn ? end[k0 + tid] : 0;  // padded keys: never visible

  FragC dk[ND], dv[ND];
#pragma unroll
  for (int n = 0; n < ND; n++) {
    wm::fill_fragment(dk[n], 0.f);
    wm::fill_fragment(dv[n], 0.f);
  }

  for (int q0 = k0; q0 < maxEnd; q0 += BT) {  // the query tiles that can see a key of the tile
    const int qn = min(BT, N - q0), q1 = q0 + qn;
    const bool full = kn == BT && qn == BT && k0 + BT - 1 <= q0 && minEnd >= q1;
    __syncthreads();  // previous tile's Q, dO, P^T, dS^T reads done (and K, V, kend loaded)
    load_tile<D>(Qs, qkv + (size_t)q0 * QKV + (size_t)h * D, QKV, qn);
    load_tile<D>(dOs, dout + (size_t)q0 * HD + (size_t)h * D, HD, qn);
    if (tid < BT) {
      const int jq = q0 + tid;
      float l2 = INFINITY, dd = 0.f;  // padded query: P = 0
      if (jq < N) {
        const float l = lse[(size_t)jq * H + h];
        l2 = isfinite(l) ? l * LOG2E : INFINITY;
        dd = di[(size_t)jq * H + h];
      }
      lse2_s[tid] = l2;
      di_s[tid] = dd;
    }
    __syncthreads();

    // P^T, dS^T for the warp's 16 keys x 64 queries, one 16x16 sub-tile at a time
#pragma unroll 1
    for (int c = 0; c < BT / 16; c++) {
      FragC accS, accP;
      wm::fill_fragment(accS, 0.f);
      wm::fill_fragment(accP, 0.f);
#pragma unroll
      for (int kk = 0; kk < ND; kk++) {
        FragA a;
        FragBc b;
        wm::load_matrix_sync(a, Ks + (16 * warp) * LDK + 16 * kk, LDK);
        wm::load_matrix_sync(b, Qs + (16 * c) * LDK + 16 * kk, LDK);
        wm::mma_sync(accS, a, b, accS);
        wm::load_matrix_sync(a, Vs + (16 * warp) * LDK + 16 * kk, LDK);
        wm::load_matrix_sync(b, dOs + (16 * c) * LDK + 16 * kk, LDK);
        wm::mma_sync(accP, a, b, accP);
      }
      wm::store_matrix_sync(stg0, accS, 16, wm::mem_row_major);
      wm::store_matrix_sync(stg1, accP, 16, wm::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int t = 0; t < 8; t++) {
        const int e = lane + 32 * t, rr = e >> 4, cc = e & 15;
        const int kr = 16 * warp + rr, qc = 16 * c + cc;  // key row, query column within the tiles
        const int i = k0 + kr, jq = q0 + qc;
        const bool vis = full || (i <= jq && jq < kend_s[kr]);
        const float p = vis ? exp2f(stg0[e] * scale_log2 - lse2_s[qc]) : 0.f;
        const float ds = p * (stg1[e] - di_s[qc]);
        PT[kr * LDP + qc] = __float2bfloat16(p);
        dST[kr * LDP + qc] = __float2bfloat16(ds);
      }
      __syncwarp();
    }

    // dV += P^T dO, dK += dS^T Q  (the warp's own rows of P^T and dS^T)
#pragma unroll
    for (int kk = 0; kk < BT / 16; kk++) {
      FragA a;
      wm::load_matrix_sync(a, PT + (16 * warp) * LDP + 16 * kk, LDP);
#pragma unroll
      for (int n = 0; n < ND; n++) {
        FragBr b;
        wm::load_matrix_sync(b, dOs + (16 * kk) * LDK + 16 * n, LDK);
        wm::mma_sync(dv[n], a, b, dv[n]);
      }
      wm::load_matrix_sync(a, dST + (16 * warp) * LDP + 16 * kk, LDP);
#pragma unroll
      for (int n = 0; n < ND; n++) {
        FragBr b;
        wm::load_matrix_sync(b, Qs + (16 * kk) * LDK + 16 * n, LDK);
        wm::mma_sync(dk[n], a, b, dk[n]);
      }
    }
    __syncthreads();  // all of dS^T is written

    // dQ rows [q0 + 16 warp, +16) += scale * dS K, dS = (dS^T)^T read as a col-major A operand
    if (q0 + 16 * warp < N) {
#pragma unroll 1
      for (int n = 0; n < ND; n++) {
        FragC acc;
        wm::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < BT / 16; kk++) {
          FragAc a;
          FragBr b;
          wm::load_matrix_sync(a, dST + (16 * kk) * LDP + 16 * warp, LDP);
          wm::load_matrix_sync(b, Ks + (16 * kk) * LDK + 16 * n, LDK);
          wm::mma_sync(acc, a, b, acc);
        }
        wm::store_matrix_sync(stg0, acc, 16, wm::mem_row_major);
        __syncwarp();
#pragma unroll
        for (int t = 0; t < 8; t++) {
          const int e = lane + 32 * t, rr = e >> 4, cc = e & 15;
          const int jq = q0 + 16 * warp + rr;
          if (jq < N) atomicAdd(dqkv + (size_t)jq * QKV + (size_t)h * D + 16 * n + cc, stg0[e] * scale);
        }
        __syncwarp();
      }
    }
  }

  // dK * scale and dV into dqkv (the query heads of a kv group add into the same rows); fully
  // unrolled so that dk[] and dv[] stay in registers
#pragma unroll
  for (int n = 0; n < ND; n++) {
    wm::store_matrix_sync(stg0, dk[n], 16, wm::mem_row_major);
    wm::store_matrix_sync(stg1, dv[n], 16, wm::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int t = 0; t < 8; t++) {
      const int e = lane + 32 * t, rr = e >> 4, cc = e & 15;
      const int i = k0 + 16 * warp + rr;
      if (i < N) {
        float* rowp = dqkv + (size_t)i * QKV + 16 * n + cc;
        atomicAdd(rowp + (size_t)(H + kvh) * D, stg0[e] * scale);
        atomicAdd(rowp + (size_t)(H + KVH + kvh) * D, stg1[e]);
      }
    }
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------------------------
// SIMT fallback: one warp per (query node, head)

__global__ void __launch_bounds__(NTHR) attn_fwd_simt_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                                             const bf16* __restrict__ qkv,
                                                             const int32_t* __restrict__ end,
                                                             const int* __restrict__ tmax, int N, int H, int KVH,
                                                             int D, float scale) {
  __shared__ float qsh[NW][32 * FB_MAXT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long g = (long long)blockIdx.x * NW + warp;
  if (g >= (long long)N * H) return;  // whole warps only: no block barriers below
  const int j = (int)(g / H), h = (int)(g % H);
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D;
  float* q = qsh[warp];
  const bf16* qrow = qkv + (size_t)j * QKV + (size_t)h * D;
  for (int d = lane; d < D; d += 32) q[d] = __bfloat162float(qrow[d]) * scale;
  __syncwarp();
  const bf16* kbase = qkv + (size_t)(H + kvh) * D;
  const bf16* vbase = qkv + (size_t)(H + KVH + kvh) * D;
  float m = -INFINITY, l = 0.f, o[FB_MAXT];
#pragma unroll
  for (int t = 0; t < FB_MAXT; t++) o[t] = 0.f;
  for (int kt = 0; kt * BT <= j; kt++) {
    if (tmax[kt] <= j) continue;
    for (int c0 = kt * BT; c0 < kt * BT + BT && c0 <= j; c0 += 32) {
      const int i = c0 + lane;
      const bool vis = i <= j && j < end[i];  // i <= j < N: in bounds
      unsigned mask = __ballot_sync(0xffffffffu, vis);
      if (mask == 0u) continue;
      float s = -INFINITY;
      if (vis) {
        const bf16* kr = kbase + (size_t)i * QKV;
        float acc = 0.f;
        for (int d = 0; d < D; d++) acc += q[d] * __bfloat162float(kr[d]);
        s = acc;
      }
      float mt = s;
      for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float mn = fmaxf(m, mt);  // finite: at least one key is visible
      const float alpha = expf(m - mn);
      const float p = vis ? expf(s - mn) : 0.f;
      float ps = p;
      for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
      l = l * alpha + ps;
      m = mn;
#pragma unroll
      for (int t = 0; t < FB_MAXT; t++) o[t] *= alpha;
      while (mask) {
        const int k = __ffs(mask) - 1;
        mask &= mask - 1u;
        const float pk = __shfl_sync(0xffffffffu, p, k);
        const bf16* vr = vbase + (size_t)(c0 + k) * QKV;
#pragma unroll
        for (int t = 0; t < FB_MAXT; t++) {
          const int d = lane + 32 * t;
          if (d < D) o[t] += pk * __bfloat162float(vr[d]);
        }
      }
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  bf16* orow = out + (size_t)j * H * D + (size_t)h * D;
#pragma unroll
  for (int t = 0; t < FB_MAXT; t++) {
    const int d = lane + 32 * t;
    if (d < D) orow[d] = __float2bfloat16(o[t] * inv);
  }
  if (lane == 0) lse[(size_t)j * H + h] = l > 0.f ? m + logf(l) : -INFINITY;
}

__global__ void __launch_bounds__(NTHR) attn_bwd_simt_kernel(float* __restrict__ dqkv, const bf16* __restrict__ dout,
                                                             const float* __restrict__ lse,
                                                             const float* __restrict__ di,
                                                             const bf16* __restrict__ qkv,
                                                             const int32_t* __restrict__ end,
                                                             const int* __restrict__ tmax, int N, int H, int KVH,
                                                             int D, float scale) {
  __shared__ float qsh[NW][32 * FB_MAXT];
  __shared__ float dosh[NW][32 * FB_MAXT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long g = (long long)blockIdx.x * NW + warp;
  if (g >= (long long)N * H) return;
  const int j = (int)(g / H), h = (int)(g % H);
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D;
  const float L = lse[(size_t)j * H + h], dj = di[(size_t)j * H + h];
  if (!isfinite(L)) return;  // cannot happen (every node sees itself)
  float* q = qsh[warp];
  float* dy = dosh[warp];
  const bf16* qrow = qkv + (size_t)j * QKV + (size_t)h * D;
  const bf16* dyrow = dout + (size_t)j * H * D + (size_t)h * D;
  for (int d = lane; d < D; d += 32) {
    q[d] = __bfloat162float(qrow[d]);
    dy[d] = __bfloat162float(dyrow[d]);
  }
  __syncwarp();
  const bf16* kbase = qkv + (size_t)(H + kvh) * D;
  const bf16* vbase = qkv + (size_t)(H + KVH + kvh) * D;
  float dq[FB_MAXT];
#pragma unroll
  for (int t = 0; t < FB_MAXT; t++) dq[t] = 0.f;
  for (int kt = 0; kt * BT <= j; kt++) {
    if (tmax[kt] <= j) continue;
    for (int c0 = kt * BT; c0 < kt * BT + BT && c0 <= j; c0 += 32) {
      const int i = c0 + lane;
      const bool vis = i <= j && j < end[i];
      unsigned mask = __ballot_sync(0xffffffffu, vis);
      if (mask == 0u) continue;
      float p = 0.f, ds = 0.f;
      if (vis) {
        const bf16* kr = kbase + (size_t)i * QKV;
        const bf16* vr = vbase + (size_t)i * QKV;
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < D; d++) {
          s += q[d] * __bfloat162float(kr[d]);
          dp += dy[d] * __bfloat162float(vr[d]);
        }
        p = expf(s * scale - L);
        ds = p * (dp - dj) * scale;
      }
      while (mask) {
        const int k = __ffs(mask) - 1;
        mask &= mask - 1u;
        const float pk = __shfl_sync(0xffffffffu, p, k);
        const float dsk = __shfl_sync(0xffffffffu, ds, k);
        const size_t ik = (size_t)(c0 + k) * QKV;
        const bf16* kr = kbase + ik;
#pragma unroll
        for (int t = 0; t < FB_MAXT; t++) {
          const int d = lane + 32 * t;
          if (d < D) {
            atomicAdd(dqkv + ik + (size_t)(H + KVH + kvh) * D + d, pk * dy[d]);
            atomicAdd(dqkv + ik + (size_t)(H + kvh) * D + d, dsk * q[d]);
            dq[t] += dsk * __bfloat162float(kr[d]);
          }
        }
      }
    }
  }
  float* dqrow = dqkv + (size_t)j * QKV + (size_t)h * D;
#pragma unroll
  for (int t = 0; t < FB_MAXT; t++) {
    const int d = lane + 32 * t;
    if (d < D) atomicAdd(dqrow + d, dq[t]);
  }
}

// ---------------------------------------------------------------------------------------------
// host side

void attn_launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

void validate(int N, int H, int KVH, int D, const char* what) {
  if (N < 0 || H <= 0 || KVH <= 0 || H % KVH != 0 || D <= 0 || D > 32 * FB_MAXT)
    throw Error(std::string(what) + ": unsupported shape N=" + std::to_string(N) + " H=" + std::to_string(H) +
                " KVH=" + std::to_string(KVH) + " D=" + std::to_string(D) +
                " (need H % KVH == 0 and 0 < D <= " + std::to_string(32 * FB_MAXT) + ")");
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline bool use_tensor_cores(int D) { return D % 16 == 0 && D >= 32 && D <= 128; }

void summaries(const Workspace& w, const int32_t* end, int N, cudaStream_t s) {
  const int nT = num_tiles(N);
  if (nT > 65535) throw Error("tree attention: N = " + std::to_string(N) + " exceeds the grid limit (65535 tiles of 64)");
  tile_summary_kernel<<<ceil_div(nT, NW), NTHR, 0, s>>>(w.tmax, w.tmin, end, N, nT);
  attn_launched("tree_attention tile_summary_kernel");
}

template <int D>
void launch_fwd_tc(bf16* out, float* lse, const bf16* qkv, const int32_t* end, const Workspace& w, int N, int H,
                   int KVH, cudaStream_t s) {
  constexpr size_t smem = FwdSmem<D>::TOTAL;
  ANVIL_CUDA(cudaFuncSetAttribute(attn_fwd_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)H, (unsigned)num_tiles(N));
  attn_fwd_tc_kernel<D><<<grid, NTHR, smem, s>>>(out, lse, qkv, end, w.tmax, w.tmin, N, H, KVH,
                                                 LOG2E / sqrtf((float)D));
  attn_launched("tree_attention_forward (tensor cores)");
}

template <int D>
void launch_bwd_tc(float* dqkv, const bf16* dout, const float* lse, const bf16* qkv, const int32_t* end,
                   const Workspace& w, int N, int H, int KVH, cudaStream_t s) {
  constexpr size_t smem = BwdSmem<D>::TOTAL;
  ANVIL_CUDA(cudaFuncSetAttribute(attn_bwd_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)H, (unsigned)num_tiles(N));
  const float scale = 1.f / sqrtf((float)D);
  attn_bwd_tc_kernel<D><<<grid, NTHR, smem, s>>>(dqkv, dout, lse, w.di, qkv, end, w.tmax, w.tmin, N, H, KVH, scale,
                                                 scale * LOG2E);
  attn_launched("tree_attention_backward (tensor cores)");
}

}  // namespace

size_t tree_attention_workspace_bytes(int N, int H) {
  const size_t nT = (size_t)num_tiles(std::max(N, 1));
  return align_up(2 * nT * sizeof(int), 256) + align_up((size_t)std::max(N, 1) * std::max(H, 1) * sizeof(float), 256);
}

void tree_attention_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* end, int N, int H, int KVH, int D,
                            void* workspace, cudaStream_t s) {
  validate(N, H, KVH, D, "tree_attention_forward");
  if (N == 0) return;
  const Workspace w = carve(workspace, N);
  summaries(w, end, N, s);
  if (attn::use_fa2(D) && aligned16(qkv) && aligned16(out))
    return attn::fa2_forward(out, lse, qkv, end, w, N, H, KVH, D, s);
  if (use_tensor_cores(D) && aligned16(qkv) && aligned16(out)) {
    switch (D) {
      case 32: return launch_fwd_tc<32>(out, lse, qkv, end, w, N, H, KVH, s);
      case 48: return launch_fwd_tc<48>(out, lse, qkv, end, w, N, H, KVH, s);
      case 64: return launch_fwd_tc<64>(out, lse, qkv, end, w, N, H, KVH, s);
      case 80: return launch_fwd_tc<80>(out, lse, qkv, end, w, N, H, KVH, s);
      case 96: return launch_fwd_tc<96>(out, lse, qkv, end, w, N, H, KVH, s);
      case 112: return launch_fwd_tc<112>(out, lse, qkv, end, w, N, H, KVH, s);
      case 128: return launch_fwd_tc<128>(out, lse, qkv, end, w, N, H, KVH, s);
      default: break;
    }
  }
  const long long warps = (long long)N * H;
  attn_fwd_simt_kernel<<<ceil_div((size_t)warps, NW), NTHR, 0, s>>>(out, lse, qkv, end, w.tmax, N, H, KVH, D,
                                                                     1.f / sqrtf((float)D));
  attn_launched("tree_attention_forward (SIMT)");
}

void tree_attention_backward(float* dqkv, const bf16* dout, const bf16* out, const float* lse, const bf16* qkv,
                             const int32_t* end, int N, int H, int KVH, int D, void* workspace, cudaStream_t s) {
  validate(N, H, KVH, D, "tree_attention_backward");
  if (N == 0) return;
  const Workspace w = carve(workspace, N);
  summaries(w, end, N, s);
  const long long warps = (long long)N * H;
  rowdot_kernel<<<ceil_div((size_t)warps, NW), NTHR, 0, s>>>(w.di, dout, out, N, H, D);
  attn_launched("tree_attention_backward rowdot_kernel");
  if (attn::use_fa2(D) && aligned16(qkv) && aligned16(dout) && aligned16(dqkv))
    return attn::fa2_backward(dqkv, dout, lse, qkv, end, w, N, H, KVH, D, s);
  if (use_tensor_cores(D) && aligned16(qkv) && aligned16(dout)) {
    switch (D) {
      case 32: return launch_bwd_tc<32>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 48: return launch_bwd_tc<48>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 64: return launch_bwd_tc<64>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 80: return launch_bwd_tc<80>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 96: return launch_bwd_tc<96>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 112: return launch_bwd_tc<112>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      case 128: return launch_bwd_tc<128>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
      default: break;
    }
  }
  attn_bwd_simt_kernel<<<ceil_div((size_t)warps, NW), NTHR, 0, s>>>(dqkv, dout, lse, w.di, qkv, end, w.tmax, N, H,
                                                                     KVH, D, 1.f / sqrtf((float)D));
  attn_launched("tree_attention_backward (SIMT)");
}

}  // namespace cuda
}  // namespace anvil
