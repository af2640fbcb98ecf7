// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include <cblas.h>
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "generate.h"
#include "lora.h"
#include "model.h"
#ifdef ANVIL_WITH_CUDA
#include "cuda/addon_exports.h"
#include "cuda/device_model.h"
#include "cuda/generate_cuda.h"
#endif

namespace anvil {
namespace {

// ---------- argument helpers, shared state and the promise worker base ----------
int get_int(const Napi::Object& o, const char* key, int lo, int hi) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw Error(std::string("config.") + key + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < lo || d > hi)
    throw Error(std::string("config.") + key + " must be an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], got " + std::to_string(d));
  return (int)d;
}

double get_num(const Napi::Object& o, const char* key, double def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return def;
  if (!v.IsNumber()) throw Error(std::string(key) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d)) throw Error(std::string(key) + " must be finite");
  return d;
}

template <typename T, napi_typedarray_type K>
Napi::TypedArrayOf<T> get_typed(const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != K)
    throw Error(std::string(what) + " must be a " +
                (K == napi_int32_array ? "Int32Array" : K == napi_float32_array ? "Float32Array" : "Uint8Array"));
  return v.As<Napi::TypedArrayOf<T>>();
}

// An ArrayBuffer over one tensor of an arena without copying; the buffer co-owns the arena, so a
// view stays valid even after the model is disposed. One buffer per tensor rather than one per
// arena: a whole arena of a >1B-parameter model is over the 4 GiB that Node 20 handles in one
// external ArrayBuffer (it crashed with a double free), while single tensors stay well under it.
Napi::ArrayBuffer tensor_buffer(Napi::Env env, const std::shared_ptr<FloatArena>& arena, const ParamTensor& t) {
  if (t.numel * sizeof(float) >= (size_t(1) << 32))
    throw Error("tensor " + t.name + " is over 4 GiB, more than one JavaScript ArrayBuffer can view here");
  auto* hold = new std::shared_ptr<FloatArena>(arena);
  return Napi::ArrayBuffer::New(env, arena->data() + t.offset, t.numel * sizeof(float),
                                [](Napi::Env, void*, std::shared_ptr<FloatArena>* h) { delete h; }, hold);
}

// Promise-returning worker base.

class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  virtual Napi::Value Result(Napi::Env env) { return env.Undefined(); }
  void OnOK() override { deferred_.Resolve(Result(Env())); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }
  Napi::Promise::Deferred deferred_;
};

struct AddonData {
  Napi::FunctionReference handle_ctor;
  Napi::FunctionReference model_ctor;
};

}  // namespace
}  // namespace anvil
