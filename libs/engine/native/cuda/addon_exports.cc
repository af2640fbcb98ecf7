#include "addon_exports.h"

#include <cmath>
#include <vector>

#include "checks.cuh"
#include "device_model.h"
#include "generate_cuda.h"
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
    auto gen = check_generation(seed_);
    results_.insert(results_.end(), gen.begin(), gen.end());
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

class DecodeBenchWorker : public Napi::AsyncWorker {
 public:
  DecodeBenchWorker(Napi::Env env, ModelConfig cfg, int batch, int prompt_len, int steps, float temperature)
      : Napi::AsyncWorker(env), cfg_(std::move(cfg)), batch_(batch), prompt_len_(prompt_len), steps_(steps),
        temperature_(temperature), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    DeviceProbe p = probe_device();
    if (!p.ok) throw Error("benchDecodeCuda: " + p.why);
    r_ = bench_decode(cfg_, batch_, prompt_len_, steps_, temperature_, 1234);
  }
  void OnOK() override {
    Napi::Object o = Napi::Object::New(Env());
    o.Set("tokensPerSecond", r_.tokens_per_second);
    o.Set("stepMs", r_.step_ms);
    o.Set("decodeSeconds", r_.decode_seconds);
    o.Set("prefillSeconds", r_.prefill_seconds);
    o.Set("kvPoolBytes", (double)r_.kv_pool_bytes);
    o.Set("batch", batch_);
    o.Set("promptLen", prompt_len_);
    o.Set("steps", steps_);
    deferred_.Resolve(o);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  ModelConfig cfg_;
  int batch_, prompt_len_, steps_;
  float temperature_;
  DecodeBench r_;
  Napi::Promise::Deferred deferred_;
};

int config_int(const Napi::Object& o, const char* key, int lo, int hi) {
  Napi::Value v = o.Get(key);
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!(d >= lo && d <= hi) || d != std::floor(d))
    throw Error(std::string("benchDecodeCuda: config.") + key + " must be an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return (int)d;
}

// benchDecodeCuda(config, batch, promptLen, steps, temperature?): Promise<{tokensPerSecond, stepMs,
// decodeSeconds, prefillSeconds, kvPoolBytes, batch, promptLen, steps}>. config: {vocabSize,
// hiddenSize, intermediateSize, numLayers, numHeads, numKvHeads, headDim, qkvBias?,
// tieWordEmbeddings?, ropeTheta? (1e6), rmsNormEps? (1e-6)}; random weights ~ N(0, 0.02).
// `batch` sequences of `promptLen` random tokens are prefilled in one step, then `steps` decode
// steps run (the first is a warm-up; the rest are timed); temperature 1 by default (0 = greedy).
Napi::Value BenchDecodeCuda(const Napi::CallbackInfo& info) {
  if (!info[0].IsObject()) throw Error("benchDecodeCuda(config, batch, promptLen, steps, temperature?): config must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  ModelConfig c;
  c.vocab = config_int(o, "vocabSize", 1, 1 << 24);
  c.hidden = config_int(o, "hiddenSize", 1, 1 << 16);
  c.inter = config_int(o, "intermediateSize", 1, 1 << 18);
  c.layers = config_int(o, "numLayers", 1, 1024);
  c.heads = config_int(o, "numHeads", 1, 1024);
  c.kv_heads = config_int(o, "numKvHeads", 1, 1024);
  c.head_dim = config_int(o, "headDim", 2, 256);
  c.qkv_bias = o.Get("qkvBias").ToBoolean();
  c.tied = o.Get("tieWordEmbeddings").ToBoolean();
  const double theta = o.Get("ropeTheta").IsNumber() ? o.Get("ropeTheta").As<Napi::Number>().DoubleValue() : 1e6;
  c.eps = o.Get("rmsNormEps").IsNumber() ? (float)o.Get("rmsNormEps").As<Napi::Number>().DoubleValue() : 1e-6f;
  for (int i = 0; i < c.head_dim / 2; i++) c.inv_freq.push_back((float)std::pow(theta, -2.0 * i / c.head_dim));
  for (int i = 1; i < 4; i++)
    if (!info[i].IsNumber()) throw Error("benchDecodeCuda(config, batch, promptLen, steps, temperature?): batch, promptLen and steps must be numbers");
  const int batch = info[1].As<Napi::Number>().Int32Value(), prompt_len = info[2].As<Napi::Number>().Int32Value(),
            steps = info[3].As<Napi::Number>().Int32Value();
  if (batch < 1 || batch > 65536 || prompt_len < 1 || prompt_len > (1 << 20) || steps < 1 || steps > 100000)
    throw Error("benchDecodeCuda: batch in [1, 65536], promptLen in [1, 2^20] and steps in [1, 100000] please");
  const double temperature = info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 1.0;
  if (!(temperature >= 0) || !std::isfinite(temperature)) throw Error("benchDecodeCuda: temperature must be >= 0");
  auto* w = new DecodeBenchWorker(info.Env(), std::move(c), batch, prompt_len, steps, (float)temperature);
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
  o.Set("generation", "cuda (paged KV cache, prefix cache)");
}

void add_exports(Napi::Env env, Napi::Object& exports) {
  exports.Set("checkKernels", Napi::Function::New(env, CheckKernels));
  exports.Set("benchGemmBf16", Napi::Function::New(env, BenchGemmBf16));
  exports.Set("benchDecodeCuda", Napi::Function::New(env, BenchDecodeCuda));
  exports.Set("benchAttention", Napi::Function::New(env, BenchAttention));
}

}  // namespace cuda
}  // namespace anvil
