// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include "addon_args.h"

namespace anvil {
namespace {

// ---------- forward handle ----------
class ModelWrap;

// ---------- forward handle ----------

class HandleWrap : public Napi::ObjectWrap<HandleWrap> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "NativeHandle",
                       {InstanceMethod("dispose", &HandleWrap::Dispose),
                        InstanceAccessor("disposed", &HandleWrap::Disposed, nullptr),
                        InstanceAccessor("activationBytes", &HandleWrap::ActivationBytes, nullptr),
                        InstanceAccessor("forwardScratchBytes", &HandleWrap::ForwardScratchBytes, nullptr),
                        InstanceAccessor("backwardScratchBytes", &HandleWrap::BackwardScratchBytes, nullptr),
                        InstanceAccessor("numNodes", &HandleWrap::NumNodes, nullptr)});
  }
  explicit HandleWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<HandleWrap>(info) {}
  // The activation arena is freed on dispose() or, failing that, when the handle is garbage
  // collected (ObjectWrap's finalizer destroys this object and the shared_ptr with it). A
  // backward in flight holds its own reference, so dispose() never pulls memory from under it.
  std::shared_ptr<Activations> acts;

 private:
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    acts.reset();
    return info.Env().Undefined();
  }
  Napi::Value Disposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !acts); }
  Napi::Value ActivationBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), acts ? (double)acts->kept_bytes : 0.0);
  }
  Napi::Value ForwardScratchBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), acts ? (double)acts->forward_scratch_bytes : 0.0);
  }
  Napi::Value BackwardScratchBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), acts ? (double)acts->backward_scratch_bytes : 0.0);
  }
  Napi::Value NumNodes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), acts ? acts->tree.n : 0);
  }
};

}  // namespace
}  // namespace anvil
