// Node-API binding (node-addon-api). Every argument is validated here or inside the worker;
// every failure is a JavaScript Error (NODE_ADDON_API_CPP_EXCEPTIONS_ALL turns any
// std::exception from a synchronous call into a thrown Error, and AsyncWorker turns one from
// Execute into a rejected promise). Heavy calls run on the libuv pool and return promises.
//
// Split by what it wraps: addon_args.h (argument helpers, the promise worker base),
// addon_handle.h (forward handles), addon_workers.h (pool workers), addon_model.h
// (NativeModel), addon_generator.h (NativeGenerator); this file holds the free
// functions and the module's Init.
#include <cblas.h>
#include <napi.h>

#include "addon_generator.h"

namespace anvil {

namespace {

// ---------- free functions ----------

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Error("setThreads(n): n must be a number");
  double n = info[0].As<Napi::Number>().DoubleValue();
  if (n != std::floor(n) || n < 1 || n > 1024) throw Error("setThreads(n): n must be an integer in [1, 1024]");
  set_threads((int)n);
  return info.Env().Undefined();
}

Napi::Value GetThreads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), nthreads()); }

Napi::Value AnalyzeTree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto parents = get_typed<int32_t, napi_int32_array>(info[0], "parents");
  TreeInfo t = analyze_tree(parents.Data(), (int)parents.ElementLength());
  auto out = [&](const std::vector<int32_t>& v) {
    auto a = Napi::Int32Array::New(env, v.size());
    std::copy(v.begin(), v.end(), a.Data());
    return a;
  };
  Napi::Object o = Napi::Object::New(env);
  o.Set("depth", out(t.depth));
  o.Set("pre", out(t.pre));
  o.Set("end", out(t.end));
  o.Set("order", out(t.order));
  o.Set("internal", out(t.internal));
  o.Set("maxDepth", t.max_depth);
  o.Set("sumPathLength", (double)t.sum_len);
  return o;
}

Napi::Value BenchSgemm(const Napi::CallbackInfo& info) {
  for (int i = 0; i < 3; i++)
    if (!info[i].IsNumber()) throw Error("benchSgemm(M, N, K, mode, minSeconds): M, N, K must be numbers");
  int M = info[0].As<Napi::Number>().Int32Value(), N = info[1].As<Napi::Number>().Int32Value(),
      K = info[2].As<Napi::Number>().Int32Value();
  if (M < 1 || N < 1 || K < 1 || (double)M * K > 4e8 || (double)K * N > 4e8 || (double)M * N > 4e8)
    throw Error("benchSgemm: dimensions must be positive and each matrix under 4e8 elements");
  std::string mode = info[3].IsString() ? info[3].As<Napi::String>().Utf8Value() : "nt";
  if (mode != "nt" && mode != "nn" && mode != "tn") throw Error("benchSgemm: mode must be \"nt\", \"nn\" or \"tn\"");
  int tb = mode == "nt" ? 0 : mode == "nn" ? 1 : 2;
  double min_s = info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 0.5;
  auto* w = new SgemmBenchWorker(info.Env(), M, N, K, tb, min_s);
  w->Queue();
  return w->Promise();
}

Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
#ifdef ANVIL_WITH_CUDA
  o.Set("backend", "cuda");
  cuda::add_info(env, o);
#else
  o.Set("backend", "cpu");
  o.Set("generation", "cpu");
#endif
  o.Set("blas", std::string(openblas_get_config()));
  o.Set("threads", nthreads());
#if defined(__AVX512F__)
  o.Set("simd", "avx512");
#elif defined(__AVX2__)
  o.Set("simd", "avx2+fma");
#else
  o.Set("simd", "baseline");
#endif
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData(data);
  Napi::Function handle = HandleWrap::Init(env);
  data->handle_ctor = Napi::Persistent(handle);
  exports.Set("NativeHandle", handle);
  Napi::Function model = ModelWrap::Init(env);
  data->model_ctor = Napi::Persistent(model);
  exports.Set("NativeModel", model);
  exports.Set("NativeGenerator", GeneratorWrap::Init(env));
  exports.Set("setThreads", Napi::Function::New(env, SetThreads));
  exports.Set("getThreads", Napi::Function::New(env, GetThreads));
  exports.Set("analyzeTree", Napi::Function::New(env, AnalyzeTree));
  exports.Set("benchSgemm", Napi::Function::New(env, BenchSgemm));
  exports.Set("info", Napi::Function::New(env, Info));
#ifdef ANVIL_WITH_CUDA
  cuda::add_exports(env, exports);
#endif
  // Default thread count: ANVIL_ENGINE_THREADS, else 2 (the loader may override via setThreads).
  int n = 2;
  if (const char* s = std::getenv("ANVIL_ENGINE_THREADS")) {
    int v = std::atoi(s);
    if (v >= 1 && v <= 1024) n = v;
  }
  set_threads(n);
  return exports;
}

}  // namespace

}  // namespace anvil

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return anvil::Init(env, exports); }

NODE_API_MODULE(anvil_engine, InitModule)
