// Tree attention, FlashAttention-2 path for D = 64 and 128 (contract: kernels.cuh; the mask, the
// tile summaries and the dispatch: attention.cu; shared bits: attention_common.cuh).
//
// Raw mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX inline) with bf16 fragments loaded
// by ldmatrix from shared memory, tiles of 64 queries x 64 keys, 4 warps per block, each warp
// owning 16 rows of the block's tile. Fragment layouts (PTX ISA "Matrix Fragments for
// mma.m16n8k16", g = lane >> 2, t = lane & 3):
//   A (16x16, row): reg0 = (row g, cols 2t, 2t+1), reg1 = (g+8, 2t..), reg2 = (g, 2t+8..),
//                   reg3 = (g+8, 2t+8..)
//   B (16x8, col):  reg0 = (k 2t, 2t+1; n g), reg1 = (k 2t+8, 2t+9; n g)
//   C (16x8, f32):  c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, cols 2t, 2t+1)
// so the accumulators of two adjacent 16x8 C tiles, packed to bf16 pairs, are exactly the A
// fragment of the 16x16 block they cover: P (forward) and P^T, dS^T (backward) feed the next
// MMA from registers. ldmatrix (x4) addressing, lane -> row address, m = lane >> 3:
//   A from a row-major [row][k] tile: row = lane & 15, k = (lane >> 4) * 8  -> reg0..3 as above
//   B pair from an [n][k] tile (K for S = Q K^T): n = (lane & 7) + (lane >> 4) * 8,
//     k = ((lane >> 3) & 1) * 8 -> {b0, b1} of n-tile 0, {b0, b1} of n-tile 1
//   B pair from a [k][n] tile (.trans; V for O = P V): k = lane & 15, n = (lane >> 4) * 8
//   A from a [k][row] tile (.trans; dS^T for dQ = dS K): k = (lane & 7) + (lane >> 4) * 8,
//     row = ((lane >> 3) & 1) * 8
// Shared tiles have a row pitch of D + 8 (64 + 8) bf16, 16 bytes of padding: the 8 rows an
// ldmatrix phase reads start 4 banks apart, no conflicts.
//
// Forward: one block per (query tile, query head), heaviest (last) query tiles first, heads of a
//  query tile adjacent (a GQA group's K/V tiles are read from L2). The warp's Q fragments stay in
//  registers (loaded once by ldmatrix), its O (16 x D) in D/8 C tiles. The visible key tiles
//  (tile summaries: skip when maxEnd <= q0) are streamed through a double buffer with cp.async:
//  the barrier at the top of iteration i both publishes tile i and retires tile i-1's buffer, into
//  which tile i+1 is then prefetched, overlapping its load with tile i's MMAs. Per tile: S = Q K^T
//  in registers (8 C tiles), mask only on boundary tiles (per element i <= j < end[i] from an
//  end[] copy of the key tile in smem), online softmax in the log2 domain on the thread's two
//  rows (row max over the 4 lanes of a group by shuffles; the running sum stays per lane and is
//  reduced once at the end), O rescaled by alpha, O += P V with P taken from the S registers.
//  out = O / l (bf16), lse = (m + log2 l) ln 2.
// Backward: one block per (key tile, query head), key tile 0 first; each warp owns 16 keys and
//  keeps dK, dV (16 x D each) in registers. It loops over the query tiles q0 = k0 .. maxEnd
//  (double-buffered Q, dO, lse, Di with cp.async as in the forward), each in two halves of 32
//  queries: S^T = K Q^T and dP^T = V dO^T (keys as rows), P^T = exp2(S^T scale log2e - lse log2e)
//  (masked on boundary tiles), dS^T = P^T (dP^T - Di); dV += P^T dO and dK += dS^T Q with P^T,
//  dS^T as A operands from registers; dS^T is also stored (bf16) to smem. After a barrier each
//  warp computes dQ for 16 queries = dS K (dS via ldmatrix.trans from dS^T) and adds scale * dQ
//  into dqkv with 16-byte vector reductions (red.global.add.v4.f32, sm_90: a shuffle between
//  lane pairs gathers 4 consecutive columns). At the end dK * scale and dV are added the same way
//  (the G = H / KVH query heads of a kv group add into the same rows).
// Shared memory: forward Q + 2 x (K, V) + 2 x 64 ints = 85.5 KiB at D = 128 (46 KiB at 64);
//  backward K, V + 2 x (Q, dO) + dS^T + 2 x (lse, Di) = 112 KiB at D = 128 (65.5 KiB at 64).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention_common.cuh"
#include "common.cuh"
#include "kernels.cuh"

namespace anvil {
namespace cuda {
namespace attn {

namespace {

constexpr int NW = 4;          // warps per block
constexpr int NTHR = NW * 32;  // threads per block
constexpr int LDST = BT + 8;   // pitch (bf16) of the backward's dS^T tile

// ---------------------------------------------------------------------------------------------
// PTX helpers

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 zero-fills the destination
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c += a * b  (m16n8k16, bf16 inputs, fp32 accumulators)
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

__device__ __forceinline__ void red_add_v4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}

// Adds s * C (one 16x8 accumulator tile, rows row0 and row0 + 8 of a row-major fp32 matrix at
// rows p0 / p8, columns col8 .. col8 + 7) with 16-byte reductions: lanes t and t^1 swap halves
// so that an even lane holds row g, columns 2t .. 2t+3 and an odd lane row g+8, 2t-2 .. 2t+1.
// ok0 / ok8: whether the rows exist. All 32 lanes must call it (shuffles).
__device__ __forceinline__ void red_tile(float* p0, float* p8, int col8, const float (&c)[4], float s, bool ok0,
                                         bool ok8) {
  const int t = threadIdx.x & 3;
  const bool odd = t & 1;
  const float x = odd ? c[0] : c[2], y = odd ? c[1] : c[3];
  const float rx = __shfl_xor_sync(0xffffffffu, x, 1), ry = __shfl_xor_sync(0xffffffffu, y, 1);
  if (!odd) {
    if (ok0) red_add_v4(p0 + col8 + 2 * t, c[0] * s, c[1] * s, rx * s, ry * s);
  } else {
    if (ok8) red_add_v4(p8 + col8 + 2 * t - 2, rx * s, ry * s, c[2] * s, c[3] * s);
  }
}

// rows [0, rows) of a [BT, D] bf16 tile at src (row stride `stride` elements) -> dst (pitch
// D + 8) with cp.async; rows >= rows are zero-filled (their source address is row 0's, not read)
template <int D>
__device__ __forceinline__ void load_tile_async(bf16* dst, const bf16* src, size_t stride, int rows) {
  constexpr int VPR = D / 8;  // 16-byte vectors per row
  static_assert(BT * VPR % NTHR == 0, "whole vectors per thread");
#pragma unroll
  for (int it = 0; it < BT * VPR / NTHR; it++) {
    const int idx = (int)threadIdx.x + it * NTHR;
    const int r = idx / VPR, c = idx - r * VPR;
    const bool in = r < rows;
    cp_async16(dst + r * (D + 8) + c * 8, src + (in ? (size_t)r * stride : 0) + c * 8, in ? 16 : 0);
  }
}

// ---------------------------------------------------------------------------------------------
// forward

template <int D>
struct FwdLayout {
  static constexpr int LD = D + 8;
  static constexpr int TILE = BT * LD;  // bf16 elements
  // Q, K[2], V[2] tiles, then kend[2][BT] ints
  static constexpr size_t OFF_KEND = (size_t)5 * TILE * sizeof(bf16);
  static constexpr size_t TOTAL = OFF_KEND + 2 * BT * sizeof(int);
};

template <int D>
__global__ void __launch_bounds__(NTHR, D == 64 ? 4 : 2)
    fa2_fwd_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv,
                   const int32_t* __restrict__ end, const int* __restrict__ tmax, const int* __restrict__ tmin, int N,
                   int H, int KVH, float scale_log2) {
  using L = FwdLayout<D>;
  constexpr int LD = L::LD, TILE = L::TILE, NK = D / 16, NN = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = Qs + TILE;      // buffer b at Ks + b * TILE
  bf16* Vs = Qs + 3 * TILE;  // buffer b at Vs + b * TILE
  int* kend_s = reinterpret_cast<int*>(smem + L::OFF_KEND);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.x;
  const int qt = (int)gridDim.y - 1 - (int)blockIdx.y;  // heaviest query tiles first
  const int q0 = qt * BT, qn = min(BT, N - q0), q1 = q0 + qn;
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D, HD = (size_t)H * D;
  const bf16* kbase = qkv + (size_t)(H + kvh) * D;
  const bf16* vbase = qkv + (size_t)(H + KVH + kvh) * D;

  auto next_visible = [&](int kt) {  // first visible key tile >= kt, or qt + 1
    while (kt <= qt && __ldg(tmax + kt) <= q0) kt++;
    return kt;
  };
  auto issue_kv = [&](int kt, int b) {
    const int k0 = kt * BT, kn = min(BT, N - k0);
    load_tile_async<D>(Ks + b * TILE, kbase + (size_t)k0 * QKV, QKV, kn);
    load_tile_async<D>(Vs + b * TILE, vbase + (size_t)k0 * QKV, QKV, kn);
    if (tid < BT) kend_s[b * BT + tid] = tid < kn ? __ldg(end + k0 + tid) : 0;  // padded keys: never visible
  };

  // the diagonal tile is always visible (end[q0] > q0), so there is at least one key tile
  int kt = next_visible(0);
  load_tile_async<D>(Qs, qkv + (size_t)q0 * QKV + (size_t)h * D, QKV, qn);
  issue_kv(kt, 0);
  cp_async_commit();

  const int jr0 = q0 + 16 * warp + g, jr1 = jr0 + 8;  // the thread's two query rows
  uint32_t qf[NK][4];
  float o[NN][4];
#pragma unroll
  for (int n = 0; n < NN; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of the log2-scaled scores (rows jr0, jr1)
  float l0 = 0.f, l1 = 0.f;              // running sums, this lane's columns only

  bool first = true;
  for (int b = 0;; b ^= 1) {
    const int k0 = kt * BT, kn = min(BT, N - k0);
    const int nkt = next_visible(kt + 1);
    cp_async_wait_all();
    __syncthreads();  // tile kt (and Q) landed for all threads; everyone is done with buffer b ^ 1
    if (first) {  // Q fragments into registers (Qs is not written again)
#pragma unroll
      for (int kk = 0; kk < NK; kk++) ldsm_x4(qf[kk], Qs + (16 * warp + (lane & 15)) * LD + 16 * kk + (lane >> 4) * 8);
      first = false;
    }
    if (nkt <= qt) {
      issue_kv(nkt, b ^ 1);
      cp_async_commit();
    }
    const bf16* Kb = Ks + b * TILE;
    const bf16* Vb = Vs + b * TILE;

    // S = Q K^T: 16 rows x 64 keys in 8 C tiles
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
#pragma unroll
      for (int np = 0; np < 4; np++) {
        uint32_t kb[4];
        ldsm_x4(kb, Kb + (16 * np + (lane & 7) + (lane >> 4) * 8) * LD + 16 * kk + ((lane >> 3) & 1) * 8);
        mma(s[2 * np], qf[kk], kb[0], kb[1]);
        mma(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    }

    // mask (boundary tiles only): key k0 + col visible to query j iff k0 + col <= j < end
    const bool full = kn == BT && qn == BT && k0 + BT - 1 <= q0 && __ldg(tmin + kt) >= q1;
    if (!full) {
      const int* ke = kend_s + b * BT;
#pragma unroll
      for (int n = 0; n < 8; n++) {
        const int col = 8 * n + 2 * t;
        const int2 e = *reinterpret_cast<const int2*>(ke + col);
        const int i0 = k0 + col, i1 = i0 + 1;
        if (!(i0 <= jr0 && jr0 < e.x)) s[n][0] = -INFINITY;
        if (!(i1 <= jr0 && jr0 < e.y)) s[n][1] = -INFINITY;
        if (!(i0 <= jr1 && jr1 < e.x)) s[n][2] = -INFINITY;
        if (!(i1 <= jr1 && jr1 < e.y)) s[n][3] = -INFINITY;
      }
    }

    // online softmax (log2 domain) on rows jr0 (c0, c1) and jr1 (c2, c3)
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; n++) {
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);  // scale > 0
    const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;  // no NaN
    const float a0 = exp2f(m0 - mu0), a1 = exp2f(m1 - mu1);  // 0 while a row has seen nothing
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int n = 0; n < 8; n++) {
      s[n][0] = exp2f(fmaf(s[n][0], scale_log2, -mu0));  // masked: exp2(-inf) = 0
      s[n][1] = exp2f(fmaf(s[n][1], scale_log2, -mu0));
      s[n][2] = exp2f(fmaf(s[n][2], scale_log2, -mu1));
      s[n][3] = exp2f(fmaf(s[n][3], scale_log2, -mu1));
      ps0 += s[n][0] + s[n][1];
      ps1 += s[n][2] + s[n][3];
    }
    l0 = l0 * a0 + ps0;
    l1 = l1 * a1 + ps1;
#pragma unroll
    for (int n = 0; n < NN; n++) {
      o[n][0] *= a0;
      o[n][1] *= a0;
      o[n][2] *= a1;
      o[n][3] *= a1;
    }

    // O += P V, P (16 x 64) as four A fragments straight from the S registers
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < D / 16; np++) {
        uint32_t vb[4];
        ldsm_x4_t(vb, Vb + (16 * kk + (lane & 15)) * LD + 16 * np + (lane >> 4) * 8);
        mma(o[2 * np], pa, vb[0], vb[1]);
        mma(o[2 * np + 1], pa, vb[2], vb[3]);
      }
    }

    if (nkt > qt) break;
    kt = nkt;
  }

  // O / l; the row sums are completed over the 4 lanes of the group first
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  if (jr0 < N) {
    bf16* orow = out + (size_t)jr0 * HD + (size_t)h * D + 2 * t;
#pragma unroll
    for (int n = 0; n < NN; n++)
      *reinterpret_cast<__nv_bfloat162*>(orow + 8 * n) = __floats2bfloat162_rn(o[n][0] * inv0, o[n][1] * inv0);
    if (t == 0) lse[(size_t)jr0 * H + h] = l0 > 0.f ? (m0 + log2f(l0)) * LN2 : -INFINITY;
  }
  if (jr1 < N) {
    bf16* orow = out + (size_t)jr1 * HD + (size_t)h * D + 2 * t;
#pragma unroll
    for (int n = 0; n < NN; n++)
      *reinterpret_cast<__nv_bfloat162*>(orow + 8 * n) = __floats2bfloat162_rn(o[n][2] * inv1, o[n][3] * inv1);
    if (t == 0) lse[(size_t)jr1 * H + h] = l1 > 0.f ? (m1 + log2f(l1)) * LN2 : -INFINITY;
  }
}

// ---------------------------------------------------------------------------------------------
// backward

template <int D>
struct BwdLayout {
  static constexpr int LD = D + 8;
  static constexpr int TILE = BT * LD;  // bf16 elements
  // K, V, Q[2], dO[2] tiles, dS^T [BT][LDST] bf16, then lse2[2][BT], di[2][BT] floats
  static constexpr size_t OFF_DST = (size_t)6 * TILE * sizeof(bf16);
  static constexpr size_t OFF_LSE = OFF_DST + (size_t)BT * LDST * sizeof(bf16);
  static constexpr size_t OFF_DI = OFF_LSE + 2 * BT * sizeof(float);
  static constexpr size_t TOTAL = OFF_DI + 2 * BT * sizeof(float);
};

template <int D>
__global__ void __launch_bounds__(NTHR, D == 64 ? 3 : 2)
    fa2_bwd_kernel(float* __restrict__ dqkv, const bf16* __restrict__ dout, const float* __restrict__ lse,
                   const float* __restrict__ di, const bf16* __restrict__ qkv, const int32_t* __restrict__ end,
                   const int* __restrict__ tmax, const int* __restrict__ tmin, int N, int H, int KVH, float scale,
                   float scale_log2) {
  using L = BwdLayout<D>;
  constexpr int LD = L::LD, TILE = L::TILE, NK = D / 16, NN = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + TILE;
  bf16* Qs = Ks + 2 * TILE;   // buffer b at Qs + b * TILE
  bf16* dOs = Ks + 4 * TILE;  // buffer b at dOs + b * TILE
  bf16* dST = reinterpret_cast<bf16*>(smem + L::OFF_DST);
  float* lse2_s = reinterpret_cast<float*>(smem + L::OFF_LSE);
  float* di_s = reinterpret_cast<float*>(smem + L::OFF_DI);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.x, kt = blockIdx.y;  // key tile 0 (the most queries) first
  const int k0 = kt * BT, kn = min(BT, N - k0);
  const int kvh = h / (H / KVH);
  const size_t QKV = (size_t)(H + 2 * KVH) * D, HD = (size_t)H * D;
  const int maxEnd = __ldg(tmax + kt), minEnd = __ldg(tmin + kt);
  const int ir0 = k0 + 16 * warp + g, ir1 = ir0 + 8;  // the thread's two key rows
  const int ke0 = ir0 < N ? __ldg(end + ir0) : 0, ke1 = ir1 < N ? __ldg(end + ir1) : 0;  // padded: never visible

  auto issue_q = [&](int q0, int b) {
    const int qn = min(BT, N - q0);
    load_tile_async<D>(Qs + b * TILE, qkv + (size_t)q0 * QKV + (size_t)h * D, QKV, qn);
    load_tile_async<D>(dOs + b * TILE, dout + (size_t)q0 * HD + (size_t)h * D, HD, qn);
    if (tid < BT) {
      const int jq = q0 + tid;
      float l2 = INFINITY, dd = 0.f;  // padded query: P = 0
      if (jq < N) {
        const float l = __ldg(lse + (size_t)jq * H + h);
        l2 = isfinite(l) ? l * LOG2E : INFINITY;
        dd = __ldg(di + (size_t)jq * H + h);
      }
      lse2_s[b * BT + tid] = l2;
      di_s[b * BT + tid] = dd;
    }
  };

  load_tile_async<D>(Ks, qkv + (size_t)k0 * QKV + (size_t)(H + kvh) * D, QKV, kn);
  load_tile_async<D>(Vs, qkv + (size_t)k0 * QKV + (size_t)(H + KVH + kvh) * D, QKV, kn);
  issue_q(k0, 0);  // maxEnd > k0: key k0 sees itself
  cp_async_commit();

  float dk[NN][4], dv[NN][4];
#pragma unroll
  for (int n = 0; n < NN; n++) {
    dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.f;
    dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.f;
  }

  int b = 0;
  for (int q0 = k0; q0 < maxEnd; q0 += BT, b ^= 1) {
    const int qn = min(BT, N - q0), q1 = q0 + qn;
    const bool full = kn == BT && qn == BT && k0 + BT - 1 <= q0 && minEnd >= q1;
    cp_async_wait_all();
    __syncthreads();  // tile q0 landed; everyone is done with buffer b ^ 1 and with the last dQ step
    if (q0 + BT < maxEnd) {
      issue_q(q0 + BT, b ^ 1);
      cp_async_commit();
    }
    const bf16* Qb = Qs + b * TILE;
    const bf16* dOb = dOs + b * TILE;
    const float* lse2b = lse2_s + b * BT;
    const float* dib = di_s + b * BT;

#pragma unroll 1
    for (int hq = 0; hq < 2; hq++) {  // 32 queries at a time
      // S^T = K Q^T, dP^T = V dO^T: 16 keys x 32 queries, 4 C tiles each
      float st[4][4], dpt[4][4];
#pragma unroll
      for (int n = 0; n < 4; n++) {
        st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.f;
        dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < NK; kk++) {
        uint32_t ka[4], va[4];
        const int aoff = (16 * warp + (lane & 15)) * LD + 16 * kk + (lane >> 4) * 8;
        ldsm_x4(ka, Ks + aoff);
        ldsm_x4(va, Vs + aoff);
#pragma unroll
        for (int np = 0; np < 2; np++) {
          const int boff = (32 * hq + 16 * np + (lane & 7) + (lane >> 4) * 8) * LD + 16 * kk + ((lane >> 3) & 1) * 8;
          uint32_t qb[4], ob[4];
          ldsm_x4(qb, Qb + boff);
          ldsm_x4(ob, dOb + boff);
          mma(st[2 * np], ka, qb[0], qb[1]);
          mma(st[2 * np + 1], ka, qb[2], qb[3]);
          mma(dpt[2 * np], va, ob[0], ob[1]);
          mma(dpt[2 * np + 1], va, ob[2], ob[3]);
        }
      }

      // P^T (into st) and dS^T (into dpt); columns are queries 32 hq + 8 n + 2 t + e
#pragma unroll
      for (int n = 0; n < 4; n++) {
        const int qc = 32 * hq + 8 * n + 2 * t;
        const float2 l2 = *reinterpret_cast<const float2*>(lse2b + qc);
        const float2 dd = *reinterpret_cast<const float2*>(dib + qc);
        const int j0 = q0 + qc, j1 = j0 + 1;
        const bool v00 = full || (ir0 <= j0 && j0 < ke0), v01 = full || (ir0 <= j1 && j1 < ke0);
        const bool v10 = full || (ir1 <= j0 && j0 < ke1), v11 = full || (ir1 <= j1 && j1 < ke1);
        const float p00 = v00 ? exp2f(fmaf(st[n][0], scale_log2, -l2.x)) : 0.f;
        const float p01 = v01 ? exp2f(fmaf(st[n][1], scale_log2, -l2.y)) : 0.f;
        const float p10 = v10 ? exp2f(fmaf(st[n][2], scale_log2, -l2.x)) : 0.f;
        const float p11 = v11 ? exp2f(fmaf(st[n][3], scale_log2, -l2.y)) : 0.f;
        st[n][0] = p00;
        st[n][1] = p01;
        st[n][2] = p10;
        st[n][3] = p11;
        dpt[n][0] = p00 * (dpt[n][0] - dd.x);
        dpt[n][1] = p01 * (dpt[n][1] - dd.y);
        dpt[n][2] = p10 * (dpt[n][2] - dd.x);
        dpt[n][3] = p11 * (dpt[n][3] - dd.y);
      }

      // dS^T (bf16) to smem for the dQ step; key rows 16 warp + g (+8), query columns qc, qc + 1
#pragma unroll
      for (int n = 0; n < 4; n++) {
        const int qc = 32 * hq + 8 * n + 2 * t;
        *reinterpret_cast<uint32_t*>(dST + (16 * warp + g) * LDST + qc) = pack_bf16(dpt[n][0], dpt[n][1]);
        *reinterpret_cast<uint32_t*>(dST + (16 * warp + g + 8) * LDST + qc) = pack_bf16(dpt[n][2], dpt[n][3]);
      }

      // dV += P^T dO, dK += dS^T Q over the 32 queries (two k-steps of 16)
#pragma unroll
      for (int kq = 0; kq < 2; kq++) {
        uint32_t pa[4], da[4];
        pa[0] = pack_bf16(st[2 * kq][0], st[2 * kq][1]);
        pa[1] = pack_bf16(st[2 * kq][2], st[2 * kq][3]);
        pa[2] = pack_bf16(st[2 * kq + 1][0], st[2 * kq + 1][1]);
        pa[3] = pack_bf16(st[2 * kq + 1][2], st[2 * kq + 1][3]);
        da[0] = pack_bf16(dpt[2 * kq][0], dpt[2 * kq][1]);
        da[1] = pack_bf16(dpt[2 * kq][2], dpt[2 * kq][3]);
        da[2] = pack_bf16(dpt[2 * kq + 1][0], dpt[2 * kq + 1][1]);
        da[3] = pack_bf16(dpt[2 * kq + 1][2], dpt[2 * kq + 1][3]);
        const int roff = (32 * hq + 16 * kq + (lane & 15)) * LD + (lane >> 4) * 8;
#pragma unroll
        for (int np = 0; np < D / 16; np++) {
          uint32_t ob[4], qb[4];
          ldsm_x4_t(ob, dOb + roff + 16 * np);
          ldsm_x4_t(qb, Qb + roff + 16 * np);
          mma(dv[2 * np], pa, ob[0], ob[1]);
          mma(dv[2 * np + 1], pa, ob[2], ob[3]);
          mma(dk[2 * np], da, qb[0], qb[1]);
          mma(dk[2 * np + 1], da, qb[2], qb[3]);
        }
      }
    }
    __syncthreads();  // all of dS^T is written

    // dQ rows q0 + 16 warp + (g, g + 8) += scale * dS K, 32 columns at a time
    const int jq0 = q0 + 16 * warp + g, jq1 = jq0 + 8;
    if (q0 + 16 * warp < N) {
      uint32_t dsa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        ldsm_x4_t(dsa[kk], dST + (16 * kk + (lane & 7) + (lane >> 4) * 8) * LDST + 16 * warp + ((lane >> 3) & 1) * 8);
      float* p0 = dqkv + (size_t)jq0 * QKV + (size_t)h * D;
      float* p8 = dqkv + (size_t)jq1 * QKV + (size_t)h * D;
#pragma unroll
      for (int c = 0; c < D / 32; c++) {
        float acc[4][4];
#pragma unroll
        for (int n = 0; n < 4; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
#pragma unroll
          for (int np = 0; np < 2; np++) {
            uint32_t kb[4];
            ldsm_x4_t(kb, Ks + (16 * kk + (lane & 15)) * LD + 32 * c + 16 * np + (lane >> 4) * 8);
            mma(acc[2 * np], dsa[kk], kb[0], kb[1]);
            mma(acc[2 * np + 1], dsa[kk], kb[2], kb[3]);
          }
        }
#pragma unroll
        for (int n = 0; n < 4; n++) red_tile(p0, p8, 32 * c + 8 * n, acc[n], scale, jq0 < N, jq1 < N);
      }
    }
  }

  // dK * scale and dV into dqkv (the query heads of a kv group add into the same rows)
  {
    float* pk0 = dqkv + (size_t)ir0 * QKV + (size_t)(H + kvh) * D;
    float* pk8 = dqkv + (size_t)ir1 * QKV + (size_t)(H + kvh) * D;
    float* pv0 = dqkv + (size_t)ir0 * QKV + (size_t)(H + KVH + kvh) * D;
    float* pv8 = dqkv + (size_t)ir1 * QKV + (size_t)(H + KVH + kvh) * D;
#pragma unroll
    for (int n = 0; n < NN; n++) {
      red_tile(pk0, pk8, 8 * n, dk[n], scale, ir0 < N, ir1 < N);
      red_tile(pv0, pv8, 8 * n, dv[n], 1.f, ir0 < N, ir1 < N);
    }
  }
}

template <int D>
void launch_fwd(bf16* out, float* lse, const bf16* qkv, const int32_t* end, const Workspace& w, int N, int H, int KVH,
                cudaStream_t s) {
  constexpr size_t smem = FwdLayout<D>::TOTAL;
  ANVIL_CUDA(cudaFuncSetAttribute(fa2_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)H, (unsigned)num_tiles(N));
  fa2_fwd_kernel<D><<<grid, NTHR, smem, s>>>(out, lse, qkv, end, w.tmax, w.tmin, N, H, KVH, LOG2E / sqrtf((float)D));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, "tree_attention_forward (FlashAttention-2)", __FILE__, __LINE__);
}

template <int D>
void launch_bwd(float* dqkv, const bf16* dout, const float* lse, const bf16* qkv, const int32_t* end,
                const Workspace& w, int N, int H, int KVH, cudaStream_t s) {
  constexpr size_t smem = BwdLayout<D>::TOTAL;
  ANVIL_CUDA(cudaFuncSetAttribute(fa2_bwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)H, (unsigned)num_tiles(N));
  const float scale = 1.f / sqrtf((float)D);
  fa2_bwd_kernel<D><<<grid, NTHR, smem, s>>>(dqkv, dout, lse, w.di, qkv, end, w.tmax, w.tmin, N, H, KVH, scale,
                                             scale * LOG2E);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, "tree_attention_backward (FlashAttention-2)", __FILE__, __LINE__);
}

int g_impl = kAuto;

}  // namespace

void set_impl(int impl) { g_impl = impl; }
int get_impl() { return g_impl; }

bool use_fa2(int D) {
  if (!fa2_supports(D)) return false;
  if (g_impl == kWmma) return false;
  if (g_impl == kFa2) return true;
  static const bool env_wmma = [] {
    const char* v = std::getenv("ANVIL_ATTENTION_IMPL");
    return v != nullptr && std::strcmp(v, "wmma") == 0;
  }();
  return !env_wmma;
}

void fa2_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* end, const Workspace& w, int N, int H,
                 int KVH, int D, cudaStream_t s) {
  if (D == 64) return launch_fwd<64>(out, lse, qkv, end, w, N, H, KVH, s);
  if (D == 128) return launch_fwd<128>(out, lse, qkv, end, w, N, H, KVH, s);
  throw Error("fa2_forward: unsupported D = " + std::to_string(D));
}

void fa2_backward(float* dqkv, const bf16* dout, const float* lse, const bf16* qkv, const int32_t* end,
                  const Workspace& w, int N, int H, int KVH, int D, cudaStream_t s) {
  if (D == 64) return launch_bwd<64>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
  if (D == 128) return launch_bwd<128>(dqkv, dout, lse, qkv, end, w, N, H, KVH, s);
  throw Error("fa2_backward: unsupported D = " + std::to_string(D));
}

}  // namespace attn

// ---------------------------------------------------------------------------------------------
// benchmark helper (kernels.cuh)

namespace {

// deterministic pseudo-random bf16 in [-amp, amp)
__global__ void bench_fill_kernel(bf16* x, size_t n, uint32_t seed, float amp) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t z = (uint32_t)i * 0x9e3779b9u ^ seed;
    z ^= z >> 16;
    z *= 0x7feb352du;
    z ^= z >> 15;
    z *= 0x846ca68bu;
    z ^= z >> 16;
    x[i] = __float2bfloat16(amp * ((float)(z >> 8) * (2.f / 16777216.f) - 1.f));
  }
}

}  // namespace

double bench_tree_attention(int impl, int N, int H, int KVH, int D, int seqs, bool backward) {
  if (N <= 0 || seqs <= 0 || seqs > N) throw Error("bench_tree_attention: need 0 < seqs <= N");
  const size_t QKV = (size_t)(H + 2 * KVH) * D, HD = (size_t)H * D;
  std::vector<int32_t> hend(N);
  const int per = N / seqs;
  for (int q = 0, start = 0; q < seqs; q++) {
    const int stop = q == seqs - 1 ? N : start + per;
    for (int i = start; i < stop; i++) hend[i] = stop;
    start = stop;
  }
  bf16 *qkv = nullptr, *out = nullptr, *dout = nullptr;
  float *lse = nullptr, *dqkv = nullptr;
  int32_t* end = nullptr;
  void* ws = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  const int prev = attn::get_impl();
  double best = 1e30;
  auto cleanup = [&] {
    attn::set_impl(prev);
    cudaFree(qkv);
    cudaFree(out);
    cudaFree(dout);
    cudaFree(lse);
    cudaFree(dqkv);
    cudaFree(end);
    cudaFree(ws);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  };
  try {
    ANVIL_CUDA(cudaMalloc(&qkv, (size_t)N * QKV * sizeof(bf16)));
    ANVIL_CUDA(cudaMalloc(&out, (size_t)N * HD * sizeof(bf16)));
    ANVIL_CUDA(cudaMalloc(&dout, (size_t)N * HD * sizeof(bf16)));
    ANVIL_CUDA(cudaMalloc(&lse, (size_t)N * H * sizeof(float)));
    ANVIL_CUDA(cudaMalloc(&dqkv, (size_t)N * QKV * sizeof(float)));
    ANVIL_CUDA(cudaMalloc(&end, (size_t)N * sizeof(int32_t)));
    ANVIL_CUDA(cudaMalloc(&ws, tree_attention_workspace_bytes(N, H)));
    ANVIL_CUDA(cudaMemcpy(end, hend.data(), (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice));
    bench_fill_kernel<<<1024, 256>>>(qkv, (size_t)N * QKV, 12345u, 2.f);
    bench_fill_kernel<<<1024, 256>>>(dout, (size_t)N * HD, 777u, 1.f);
    ANVIL_CUDA(cudaEventCreate(&e0));
    ANVIL_CUDA(cudaEventCreate(&e1));
    attn::set_impl(impl);
    cudaStream_t s = 0;
    tree_attention_forward(out, lse, qkv, end, N, H, KVH, D, ws, s);  // out, lse for the backward
    for (int it = 0; it < 8; it++) {  // 2 warm-up runs, best of 6
      if (backward) ANVIL_CUDA(cudaMemsetAsync(dqkv, 0, (size_t)N * QKV * sizeof(float), s));
      ANVIL_CUDA(cudaEventRecord(e0, s));
      if (backward)
        tree_attention_backward(dqkv, dout, out, lse, qkv, end, N, H, KVH, D, ws, s);
      else
        tree_attention_forward(out, lse, qkv, end, N, H, KVH, D, ws, s);
      ANVIL_CUDA(cudaEventRecord(e1, s));
      ANVIL_CUDA(cudaEventSynchronize(e1));
      float ms = 0.f;
      ANVIL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 2) best = std::min(best, (double)ms * 1e-3);
    }
    check_launch("bench_tree_attention");
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return best;
}

}  // namespace cuda
}  // namespace anvil
