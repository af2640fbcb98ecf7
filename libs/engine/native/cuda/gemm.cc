// cuBLASLt through dlopen (see gemm.h). Row-major X[R,K] is column-major X^T with ld = K, so every
// row-major product is issued as the transposed column-major one:
//   nt: out^T[O,N] = W^T'[O,I] * inp^T[I,N]   -> opA = T (W is I x O col-major), opB = N
//   nn: dinp^T[I,N] = W[I,O] * dout^T[O,N]    -> opA = N, opB = N
//   tn: dW^T[I,O] += inp^T[I,N] * dout[N,O]   -> opA = N, opB = T
// bf16 operands compute in fp32 (CUBLAS_COMPUTE_32F); fp32 operands (the LM head) in TF32 on the
// tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32).
#include "gemm.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "../common.h"

namespace anvil {
namespace cuda {

namespace {

struct LtApi {
  void* lib = nullptr;
  std::string path, error;
  size_t version = 0;
#define ANVIL_LT_FN(name) decltype(&::name) name = nullptr;
  ANVIL_LT_FN(cublasLtCreate)
  ANVIL_LT_FN(cublasLtDestroy)
  ANVIL_LT_FN(cublasLtGetVersion)
  ANVIL_LT_FN(cublasLtMatmul)
  ANVIL_LT_FN(cublasLtMatmulDescCreate)
  ANVIL_LT_FN(cublasLtMatmulDescDestroy)
  ANVIL_LT_FN(cublasLtMatmulDescSetAttribute)
  ANVIL_LT_FN(cublasLtMatrixLayoutCreate)
  ANVIL_LT_FN(cublasLtMatrixLayoutDestroy)
  ANVIL_LT_FN(cublasLtMatmulPreferenceCreate)
  ANVIL_LT_FN(cublasLtMatmulPreferenceDestroy)
  ANVIL_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  ANVIL_LT_FN(cublasLtMatmulAlgoGetHeuristic)
#undef ANVIL_LT_FN
};

std::vector<std::string> candidate_paths() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("ANVIL_CUBLASLT_PATH")) c.push_back(p);
  c.push_back("libcublasLt.so.13");  // LD_LIBRARY_PATH, ldconfig
  for (const char* home : {(const char*)std::getenv("CUDA_HOME"), (const char*)std::getenv("CUDA_PATH"), "/usr/local/cuda"})
    if (home) c.push_back(std::string(home) + "/lib64/libcublasLt.so.13");
  // the nvidia-cublas wheel that pip installs with PyTorch or JAX: system, user and virtualenv
  // site-packages of any Python 3 (patterns, not one machine's paths)
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  const std::string wheel = "/nvidia/cu13/lib/libcublasLt.so.13";
  for (const std::string& pattern :
       {std::string("/usr/local/lib/python3*/*-packages") + wheel, std::string("/usr/lib/python3*/*-packages") + wheel,
        std::string("/usr/lib/python3/dist-packages") + wheel, std::string("/opt/*/lib/python3*/site-packages") + wheel,
        std::string("/opt/*/.venv/lib/python3*/site-packages") + wheel,
        home + "/.local/lib/python3*/site-packages" + wheel}) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; i++) c.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return c;
}

LtApi& api() {
  static LtApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& p : candidate_paths()) {
      a.lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (a.lib) {
        a.path = p;
        break;
      }
      tried += "\n    " + p + ": " + dlerror();
    }
    if (!a.lib) {
      a.error = "cannot open cuBLASLt (libcublasLt.so.13); set ANVIL_CUBLASLT_PATH to its path. Tried:" + tried;
      return;
    }
#define ANVIL_LT_SYM(name)                                                    \
  a.name = reinterpret_cast<decltype(a.name)>(dlsym(a.lib, #name));           \
  if (!a.name) {                                                              \
    a.error = std::string("cuBLASLt at ") + a.path + " lacks the symbol " #name; \
    return;                                                                   \
  }
    ANVIL_LT_SYM(cublasLtCreate)
    ANVIL_LT_SYM(cublasLtDestroy)
    ANVIL_LT_SYM(cublasLtGetVersion)
    ANVIL_LT_SYM(cublasLtMatmul)
    ANVIL_LT_SYM(cublasLtMatmulDescCreate)
    ANVIL_LT_SYM(cublasLtMatmulDescDestroy)
    ANVIL_LT_SYM(cublasLtMatmulDescSetAttribute)
    ANVIL_LT_SYM(cublasLtMatrixLayoutCreate)
    ANVIL_LT_SYM(cublasLtMatrixLayoutDestroy)
    ANVIL_LT_SYM(cublasLtMatmulPreferenceCreate)
    ANVIL_LT_SYM(cublasLtMatmulPreferenceDestroy)
    ANVIL_LT_SYM(cublasLtMatmulPreferenceSetAttribute)
    ANVIL_LT_SYM(cublasLtMatmulAlgoGetHeuristic)
#undef ANVIL_LT_SYM
    a.version = a.cublasLtGetVersion();
  });
  if (!a.error.empty()) throw Error(a.error);
  return a;
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLASLt ") + what + " failed with status " + std::to_string((int)s));
}

cudaDataType_t cuda_type(DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by alignment.
uint32_t alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// One cached plan per (shape, types, transposes, alignments): descriptors and the chosen algo.
struct PlanKey {
  int opA, opB, m, n, k, lda, ldb, ldc, ldd;
  int ta, tb, tc, td;
  uint32_t alA, alB, alC, alD;
  bool operator<(const PlanKey& o) const {
    return std::tie(opA, opB, m, n, k, lda, ldb, ldc, ldd, ta, tb, tc, td, alA, alB, alC, alD) <
           std::tie(o.opA, o.opB, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ldd, o.ta, o.tb, o.tc, o.td, o.alA, o.alB, o.alC,
                    o.alD);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

constexpr size_t kWorkspaceBytes = size_t(64) << 20;

}  // namespace

struct Gemm::Impl {
  cudaStream_t stream;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, Plan> plans;

  ~Impl() {
    LtApi& a = api();
    for (auto& kv : plans) {
      Plan& p = kv.second;
      a.cublasLtMatrixLayoutDestroy(p.a);
      a.cublasLtMatrixLayoutDestroy(p.b);
      a.cublasLtMatrixLayoutDestroy(p.c);
      a.cublasLtMatrixLayoutDestroy(p.d);
      a.cublasLtMatmulDescDestroy(p.desc);
    }
    if (workspace) cudaFree(workspace);
    if (handle) a.cublasLtDestroy(handle);
  }

  // Column-major D[m,n] = op(A)[m,k] * op(B)[k,n] + beta * C[m,n]
  void run(bool transA, bool transB, int m, int n, int k, const void* A, DType ta, int lda, const void* B, DType tb,
           int ldb, const void* C, DType tc, int ldc, void* D, DType td, int ldd, float beta, float alpha = 1.0f) {
    if (m <= 0 || n <= 0 || k <= 0) return;
    LtApi& a = api();
    const bool f32 = ta == DType::F32;
    if ((tb == DType::F32) != f32) throw Error("gemm: A and B must have the same dtype");
    PlanKey key{transA, transB, m, n, k, lda, ldb, ldc, ldd, (int)ta, (int)tb, (int)tc, (int)td,
                alignment(A), alignment(B), alignment(C), alignment(D)};
    auto it = plans.find(key);
    if (it == plans.end()) {
      Plan p;
      check(a.cublasLtMatmulDescCreate(&p.desc, f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "MatmulDescCreate");
      cublasOperation_t oa = transA ? CUBLAS_OP_T : CUBLAS_OP_N, ob = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
      check(a.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)), "set TRANSA");
      check(a.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)), "set TRANSB");
      // stored shapes (before op): A is m x k (or k x m when transposed), B is k x n (or n x k)
      check(a.cublasLtMatrixLayoutCreate(&p.a, cuda_type(ta), transA ? k : m, transA ? m : k, lda), "layout A");
      check(a.cublasLtMatrixLayoutCreate(&p.b, cuda_type(tb), transB ? n : k, transB ? k : n, ldb), "layout B");
      check(a.cublasLtMatrixLayoutCreate(&p.c, cuda_type(tc), m, n, ldc), "layout C");
      check(a.cublasLtMatrixLayoutCreate(&p.d, cuda_type(td), m, n, ldd), "layout D");
      cublasLtMatmulPreference_t pref;
      check(a.cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
      size_t ws = kWorkspaceBytes;
      a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
      uint32_t al[4] = {key.alA, key.alB, key.alC, key.alD};
      a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(uint32_t));
      a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(uint32_t));
      a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(uint32_t));
      a.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof(uint32_t));
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      cublasStatus_t st = a.cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.d, pref, 1, &res, &found);
      a.cublasLtMatmulPreferenceDestroy(pref);
      if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        a.cublasLtMatrixLayoutDestroy(p.a);
        a.cublasLtMatrixLayoutDestroy(p.b);
        a.cublasLtMatrixLayoutDestroy(p.c);
        a.cublasLtMatrixLayoutDestroy(p.d);
        a.cublasLtMatmulDescDestroy(p.desc);
        throw Error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                    std::to_string(k) + " GEMM (status " + std::to_string((int)st) + ")");
      }
      p.algo = res.algo;
      it = plans.emplace(key, p).first;
    }
    Plan& p = it->second;
    check(a.cublasLtMatmul(handle, p.desc, &alpha, A, p.a, B, p.b, &beta, C ? C : D, p.c, D, p.d, &p.algo, workspace,
                           kWorkspaceBytes, stream),
          "Matmul");
  }
};

Gemm::Gemm(cudaStream_t stream) : impl_(new Impl()) {
  impl_->stream = stream;
  LtApi& a = api();
  try {
    check(a.cublasLtCreate(&impl_->handle), "Create");
    cudaError_t e = cudaMalloc(&impl_->workspace, kWorkspaceBytes);
    if (e != cudaSuccess) throw Error(std::string("cudaMalloc of the cuBLASLt workspace: ") + cudaGetErrorString(e));
  } catch (...) {
    delete impl_;
    throw;
  }
}

Gemm::~Gemm() { delete impl_; }

std::string Gemm::library() {
  LtApi& a = api();
  return a.path + " (version " + std::to_string(a.version) + ")";
}

void Gemm::nt(void* out, DType out_t, Mat inp, Mat w, int N, int I, int O, Mat add) {
  // out^T[O,N] = op_T(W stored I x O, ld w.ld) * inp^T (I x N, ld inp.ld)
  impl_->run(true, false, O, N, I, w.p, w.t, w.ld, inp.p, inp.t, inp.ld, add.p, add.p ? add.t : out_t,
             add.p ? add.ld : O, out, out_t, O, add.p ? 1.0f : 0.0f);
}

void Gemm::nn(void* dinp, DType dinp_t, Mat dout, Mat w, int N, int I, int O, bool accumulate) {
  // dinp^T[I,N] = W (I x O col-major, ld w.ld) * dout^T (O x N, ld dout.ld)
  impl_->run(false, false, I, N, O, w.p, w.t, w.ld, dout.p, dout.t, dout.ld, accumulate ? dinp : nullptr, dinp_t, I,
             dinp, dinp_t, I, accumulate ? 1.0f : 0.0f);
}

void Gemm::nt_strided(void* out, DType out_t, int ldo, Mat inp, Mat w, int N, int I, int O, float alpha, float beta) {
  impl_->run(true, false, O, N, I, w.p, w.t, w.ld, inp.p, inp.t, inp.ld, beta != 0.0f ? out : nullptr, out_t, ldo, out, out_t,
             ldo, beta, alpha);
}

void Gemm::nn_strided(void* dinp, DType dinp_t, int ldi, Mat dout, Mat w, int N, int I, int O, float alpha, float beta) {
  impl_->run(false, false, I, N, O, w.p, w.t, w.ld, dout.p, dout.t, dout.ld, beta != 0.0f ? dinp : nullptr, dinp_t, ldi, dinp,
             dinp_t, ldi, beta, alpha);
}

void Gemm::tn_acc_scaled(float* dw, Mat dout, Mat inp, int N, int I, int O, float alpha) {
  impl_->run(false, true, I, O, N, inp.p, inp.t, inp.ld, dout.p, dout.t, dout.ld, dw, DType::F32, I, dw, DType::F32, I, 1.0f,
             alpha);
}

void Gemm::tn_acc(float* dw, Mat dout, Mat inp, int N, int I, int O) {
  // dW^T[I,O] += inp^T (I x N, ld inp.ld) * op_T(dout stored O x N, ld dout.ld)
  impl_->run(false, true, I, O, N, inp.p, inp.t, inp.ld, dout.p, dout.t, dout.ld, dw, DType::F32, I, dw, DType::F32, I,
             1.0f);
}

}  // namespace cuda
}  // namespace anvil
