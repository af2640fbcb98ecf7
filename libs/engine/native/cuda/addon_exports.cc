#include "addon_exports.h"

#include <cmath>
#include <vector>

#include "checks.cuh"
#include "device_model.h"
#include "kernels.cuh"

namespace anvil {
namespace cuda {

namespace {

class ChecksWorker : public Napi::AsyncWorker {
 public:
  ChecksWorker(Napi::Env env, uint64_t seed)
      : Napi::AsyncWorker(env), seed_(seed), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    DeviceProbe p = probe_device();
    if (!p.ok) throw Error("checkKernels: " + p.why);
    results_ = check_elementwise_kernels(seed_);
    auto att = check_attention_kernels(seed_);
    results_.insert(results_.end(), att.begin(), att.end());
  }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Array arr = Napi::Array::New(env, results_.size());
    for (size_t i = 0; i < results_.size(); i++) {
      const KernelCheck& k = results_[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", k.name);
      o.Set("maxAbsErr", k.max_abs_err);
      o.Set("maxRef", k.max_ref);
      o.Set("atol", k.atol);
      o.Set("rtol", k.rtol);
      o.Set("failures", (double)k.failures);
      o.Set("passed", k.passed);
      o.Set("detail", k.detail);
      arr.Set((uint32_t)i, o);
    }
    deferred_.Resolve(arr);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  uint64_t seed_;
  std::vector<KernelCheck> results_;
  Napi::Promise::Deferred deferred_;
};

class GemmBenchWorker : public Napi::AsyncWorker {
 public:
  GemmBenchWorker(Napi::Env env, int M, int N, int K, double min_s)
      : Napi::AsyncWorker(env), M_(M), N_(N), K_(K), min_s_(min_s), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override { seconds_ = bench_gemm_bf16(M_, N_, K_, min_s_); }
  void OnOK() override {
    Napi::Object o = Napi::Object::New(Env());
    o.Set("seconds", seconds_);
    o.Set("tflops", 2.0 * M_ * N_ * K_ / seconds_ * 1e-12);
    deferred_.Resolve(o);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  int M_, N_, K_;
  double min_s_, seconds_ = 0;
  Napi::Promise::Deferred deferred_;
};

class AttentionBenchWorker : public Napi::AsyncWorker {
 public:
  AttentionBenchWorker(Napi::Env env, int impl, int N, int H, int KVH, int D, int seqs, bool backward)
      : Napi::AsyncWorker(env), impl_(impl), N_(N), H_(H), KVH_(KVH), D_(D), seqs_(seqs), backward_(backward),
        deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override { seconds_ = bench_tree_attention(impl_, N_, H_, KVH_, D_, seqs_, backward_); }
  void OnOK() override { deferred_.Resolve(Napi::Number::New(Env(), seconds_)); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  int impl_, N_, H_, KVH_, D_, seqs_;
  bool backward_;
  double seconds_ = 0;
  Napi::Promise::Deferred deferred_;
};

// benchAttention(impl: 0 default | 1 wmma | 2 fa2, N, H, KVH, D, seqs, backward): Promise<seconds>
// (seqs causal chains totalling N nodes; best of several event-timed runs)
Napi::Value BenchAttention(const Napi::CallbackInfo& info) {
  for (int i = 0; i < 6; i++)
    if (!info[i].IsNumber()) throw Error("benchAttention(impl, N, H, KVH, D, seqs, backward): numbers expected");
  int v[6];
  for (int i = 0; i < 6; i++) v[i] = info[i].As<Napi::Number>().Int32Value();
  if (v[0] < 0 || v[0] > 2 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[2] % v[3] || v[4] < 2 || v[5] < 1 || v[5] > v[1])
    throw Error("benchAttention: impl in 0..2, N >= seqs >= 1, H a multiple of KVH, D >= 2");
  auto* w = new AttentionBenchWorker(info.Env(), v[0], v[1], v[2], v[3], v[4], v[5], info[6].ToBoolean());
  w->Queue();
  return w->Promise();
}

// checkKernels(seed?: number): Promise<KernelCheck[]>
Napi::Value CheckKernels(const Napi::CallbackInfo& info) {
  double seed = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 1;
  auto* w = new ChecksWorker(info.Env(), (uint64_t)seed);
  w->Queue();
  return w->Promise();
}

// benchGemmBf16(M, N, K, minSeconds?): Promise<{seconds, tflops}>
Napi::Value BenchGemmBf16(const Napi::CallbackInfo& info) {
  for (int i = 0; i < 3; i++)
    if (!info[i].IsNumber()) throw Error("benchGemmBf16(M, N, K, minSeconds): M, N, K must be numbers");
  int M = info[0].As<Napi::Number>().Int32Value(), N = info[1].As<Napi::Number>().Int32Value(),
      K = info[2].As<Napi::Number>().Int32Value();
  if (M < 1 || N < 1 || K < 1 || (double)M * K > 2e9 || (double)N * K > 2e9 || (double)M * N > 2e9)
    throw Error("benchGemmBf16: dimensions must be positive and each matrix under 2e9 elements");
  double min_s = info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : 0.5;
  auto* w = new GemmBenchWorker(info.Env(), M, N, K, min_s);
  w->Queue();
  return w->Promise();
}

}  // namespace

void add_info(Napi::Env env, Napi::Object& o) {
  DeviceProbe p = probe_device();
  Napi::Object d = Napi::Object::New(env);
  d.Set("ok", p.ok);
  d.Set("why", p.why);
  d.Set("name", p.name);
  d.Set("computeCapability", std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor));
  d.Set("multiprocessors", p.sm_count);
  d.Set("totalBytes", (double)p.total_bytes);
  d.Set("driverVersion", p.driver_version);
  d.Set("runtimeVersion", p.runtime_version);
  o.Set("device", d);
  o.Set("gemm", p.ok ? gemm_library() : std::string("not opened (no device)"));
  o.Set("generation", "cpu (over a host copy of the weights; GPU generation is not built yet)");
}

void add_exports(Napi::Env env, Napi::Object& exports) {
  exports.Set("checkKernels", Napi::Function::New(env, CheckKernels));
  exports.Set("benchGemmBf16", Napi::Function::New(env, BenchGemmBf16));
  exports.Set("benchAttention", Napi::Function::New(env, BenchAttention));
}

}  // namespace cuda
}  // namespace anvil
