// Node-API binding (node-addon-api). Every argument is validated here or inside the worker;
// every failure is a JavaScript Error (NODE_ADDON_API_CPP_EXCEPTIONS_ALL turns any
// std::exception from a synchronous call into a thrown Error, and AsyncWorker turns one from
// Execute into a rejected promise). Heavy calls run on the libuv pool and return promises.
#include <cblas.h>
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "generate.h"
#include "model.h"
#ifdef ANVIL_WITH_CUDA
#include "cuda/addon_exports.h"
#include "cuda/device_model.h"
#include "cuda/generate_cuda.h"
#endif

namespace anvil {

namespace {

// ---------- argument helpers ----------

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

// ---------- promise-returning worker base ----------

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

struct AddonData {
  Napi::FunctionReference handle_ctor;
  Napi::FunctionReference model_ctor;
};

// ---------- workers ----------

class ForwardWorker : public PromiseWorker {
 public:
  ForwardWorker(Napi::Env env, std::shared_ptr<Model> model, Napi::Int32Array tokens, Napi::Int32Array parents,
                Napi::Float32Array logp, Napi::Float32Array entropy, double max_tokens, double max_bytes, int logits_mode)
      : PromiseWorker(env), model_(std::move(model)), max_tokens_(max_tokens), max_bytes_(max_bytes),
        logits_mode_(logits_mode) {
    n_ = (int)tokens.ElementLength();
    tokens_ = tokens.Data();
    parents_ = parents.Data();
    logp_ = logp.Data();
    entropy_ = entropy.Data();
    // keep the caller's typed arrays alive while the pool thread reads and writes them in place
    refs_.push_back(Napi::Persistent(tokens.As<Napi::Object>()));
    refs_.push_back(Napi::Persistent(parents.As<Napi::Object>()));
    refs_.push_back(Napi::Persistent(logp.As<Napi::Object>()));
    refs_.push_back(Napi::Persistent(entropy.As<Napi::Object>()));
  }
  void Execute() override {
    if (max_tokens_ > 0 && n_ > max_tokens_)
      throw Error("pack has " + std::to_string(n_) + " tokens, over the limit maxTokens = " +
                  std::to_string((int64_t)max_tokens_));
    auto acts = std::make_shared<Activations>();
    acts->model = model_;
    acts->tree = analyze_tree(parents_, n_);
    const int V = model_->cfg.vocab;
    for (int i = 0; i < n_; i++)
      if (tokens_[i] < 0 || tokens_[i] >= V)
        throw Error("token out of range: tokens[" + std::to_string(i) + "] = " + std::to_string(tokens_[i]) +
                    " (vocab size " + std::to_string(V) + ")");
    acts->tokens.assign(tokens_, tokens_ + n_);
#ifdef ANVIL_WITH_CUDA
    if (model_->device) {
      cuda::ForwardBytes fb;
      std::lock_guard<std::mutex> lock(model_->mu);
      acts->dev = model_->device->forward(acts->tree, tokens_, logp_, entropy_, (LogitsMode)logits_mode_, max_bytes_, &fb);
      acts->kept_bytes = fb.kept;
      acts->forward_scratch_bytes = fb.forward_scratch;
      acts->backward_scratch_bytes = fb.backward_scratch;
      acts_ = acts;
      return;
    }
#endif
    acts->plan = plan_memory(model_->cfg, acts->tree, (LogitsMode)logits_mode_, max_bytes_);
    if (max_bytes_ > 0) {
      const double need = (double)acts->plan.peak_bytes();
      if (need > max_bytes_)
        throw Error("pack needs " + std::to_string((int64_t)need) + " bytes of activations and scratch, over the limit maxBytes = " +
                    std::to_string((int64_t)max_bytes_));
    }
    std::lock_guard<std::mutex> lock(model_->mu);
    model_forward(*acts, logp_, entropy_);
    acts_ = acts;
  }
  Napi::Value Result(Napi::Env env) override {
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object h = data->handle_ctor.New({});
    HandleWrap::Unwrap(h)->acts = acts_;
    acts_.reset();
    return h;
  }

 private:
  std::shared_ptr<Model> model_;
  std::shared_ptr<Activations> acts_;
  int n_;
  const int32_t* tokens_;
  const int32_t* parents_;
  float* logp_;
  float* entropy_;
  double max_tokens_, max_bytes_;
  int logits_mode_;
  std::vector<Napi::ObjectReference> refs_;
};

class BackwardWorker : public PromiseWorker {
 public:
  BackwardWorker(Napi::Env env, std::shared_ptr<Activations> acts, Napi::Float32Array dlogp, Napi::Value dent)
      : PromiseWorker(env), acts_(std::move(acts)) {
    dlogp_ = dlogp.Data();
    refs_.push_back(Napi::Persistent(dlogp.As<Napi::Object>()));
    if (!dent.IsUndefined() && !dent.IsNull()) {
      auto d = get_typed<float, napi_float32_array>(dent, "dLdEntropy");
      if ((int)d.ElementLength() != acts_->tree.n)
        throw Error("dLdEntropy has length " + std::to_string(d.ElementLength()) + " but the pack has " +
                    std::to_string(acts_->tree.n) + " nodes");
      dent_ = d.Data();
      refs_.push_back(Napi::Persistent(d.As<Napi::Object>()));
    }
  }
  void Execute() override {
    const TreeInfo& t = acts_->tree;
    for (int i = 0; i < t.n; i++) {
      if (!std::isfinite(dlogp_[i]) || (dent_ && !std::isfinite(dent_[i])))
        throw Error("non-finite loss coefficient (NaN or Inf) at node " + std::to_string(i));
      if (t.parent[i] < 0 && (dlogp_[i] != 0.f || (dent_ && dent_[i] != 0.f)))
        throw Error("node " + std::to_string(i) +
                    " is a root: it has no prediction (no log-prob, no entropy), so its coefficient must be 0");
    }
    std::lock_guard<std::mutex> lock(acts_->model->mu);
#ifdef ANVIL_WITH_CUDA
    if (acts_->dev) {
      acts_->model->device->backward(*acts_->dev, dlogp_, dent_);
      return;
    }
#endif
    model_backward(*acts_, dlogp_, dent_);
  }

 private:
  std::shared_ptr<Activations> acts_;
  const float* dlogp_ = nullptr;
  const float* dent_ = nullptr;
  std::vector<Napi::ObjectReference> refs_;
};

// Runs a closure on the pool under the model lock; resolves with the number it returns.
class ModelTaskWorker : public PromiseWorker {
 public:
  ModelTaskWorker(Napi::Env env, std::shared_ptr<Model> model, std::function<double(Model&)> fn)
      : PromiseWorker(env), model_(std::move(model)), fn_(std::move(fn)) {}
  void Execute() override {
    std::lock_guard<std::mutex> lock(model_->mu);
    result_ = fn_(*model_);
  }
  Napi::Value Result(Napi::Env env) override { return Napi::Number::New(env, result_); }

 private:
  std::shared_ptr<Model> model_;
  std::function<double(Model&)> fn_;
  double result_ = 0;
};

class SgemmBenchWorker : public PromiseWorker {
 public:
  SgemmBenchWorker(Napi::Env env, int M, int N, int K, int trans_b, double min_seconds)
      : PromiseWorker(env), M_(M), N_(N), K_(K), tb_(trans_b), min_s_(min_seconds) {}
  void Execute() override {
    FloatArena a((size_t)M_ * K_), b((size_t)K_ * N_), c((size_t)M_ * N_);
    for (size_t i = 0; i < a.size(); i++) a.data()[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < b.size(); i++) b.data()[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    // mode 0: C = A[M,K] @ B[N,K]^T (forward), 1: A[M,K] @ B[K,N] (input grad), 2: A[K,M]^T @ B[K,N] (weight grad)
    auto run = [&]() {
      if (tb_ == 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M_, N_, K_, 1.0f, a.data(), K_, b.data(), K_, 0.0f, c.data(), N_);
      else if (tb_ == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M_, N_, K_, 1.0f, a.data(), K_, b.data(), N_, 0.0f, c.data(),
                    N_);
      else
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M_, N_, K_, 1.0f, a.data(), M_, b.data(), N_, 1.0f, c.data(),
                    N_);
    };
    run();  // warm-up
    // best single run over the time window: the machine may be shared, and the minimum is the
    // estimate least disturbed by other processes (the model benchmark reports minima too)
    auto t0 = std::chrono::steady_clock::now();
    double el = 0, best = 1e30;
    do {
      auto t1 = std::chrono::steady_clock::now();
      run();
      auto t2 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double>(t2 - t1).count());
      el = std::chrono::duration<double>(t2 - t0).count();
    } while (el < min_s_);
    seconds_ = best;
  }
  Napi::Value Result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("seconds", seconds_);
    o.Set("gflops", 2.0 * M_ * N_ * K_ / seconds_ * 1e-9);
    return o;
  }

 private:
  int M_, N_, K_, tb_;
  double min_s_, seconds_ = 0;
};

// ---------- model ----------

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "NativeModel",
                       {InstanceMethod("layout", &ModelWrap::Layout),
                        InstanceMethod("tensorBuffers", &ModelWrap::TensorBuffers),
                        InstanceMethod("initRandom", &ModelWrap::InitRandom),
                        InstanceMethod("forward", &ModelWrap::Forward),
                        InstanceMethod("backward", &ModelWrap::Backward),
                        InstanceMethod("zeroGrad", &ModelWrap::ZeroGrad),
                        InstanceMethod("gradNorm", &ModelWrap::GradNorm),
                        InstanceMethod("clipGradNorm", &ModelWrap::ClipGradNorm),
                        InstanceMethod("adamwStep", &ModelWrap::AdamwStep),
                        InstanceMethod("memory", &ModelWrap::Memory),
                        InstanceMethod("stepCount", &ModelWrap::StepCount),
                        InstanceMethod("optimizerState", &ModelWrap::OptimizerState),
                        InstanceMethod("setOptimizerState", &ModelWrap::SetOptimizerState),
                        InstanceMethod("trimCache", &ModelWrap::TrimCache),
                        InstanceMethod("pushParams", &ModelWrap::PushParams),
                        InstanceMethod("pullParams", &ModelWrap::PullParams),
                        InstanceMethod("pullGrads", &ModelWrap::PullGrads),
                        InstanceMethod("dispose", &ModelWrap::Dispose)});
  }

  explicit ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {
    if (!info[0].IsObject()) throw Error("NativeModel(config): config must be an object");
    Napi::Object o = info[0].As<Napi::Object>();
    ModelConfig c;
    c.vocab = get_int(o, "vocabSize", 1, 1 << 24);
    c.hidden = get_int(o, "hiddenSize", 1, 1 << 16);
    c.inter = get_int(o, "intermediateSize", 1, 1 << 18);
    c.layers = get_int(o, "numLayers", 1, 1024);
    c.heads = get_int(o, "numHeads", 1, 1024);
    c.kv_heads = get_int(o, "numKvHeads", 1, 1024);
    c.head_dim = get_int(o, "headDim", 2, 4096);
    c.eps = (float)get_num(o, "rmsNormEps", 1e-6);
    c.qkv_bias = o.Get("qkvBias").ToBoolean();
    c.tied = o.Get("tieWordEmbeddings").ToBoolean();
    c.rope_attention_scaling = (float)get_num(o, "ropeAttentionScaling", 1.0);
    auto inv = get_typed<float, napi_float32_array>(o.Get("invFreq"), "config.invFreq");
    c.inv_freq.assign(inv.Data(), inv.Data() + inv.ElementLength());
    model_ = std::make_shared<Model>(c);
#ifdef ANVIL_WITH_CUDA
    model_->device = std::make_shared<cuda::DeviceModel>(*model_);
#endif
  }

  std::shared_ptr<Model> shared_model() const { return model_; }

 private:
  std::shared_ptr<Model> model_;

  Model& model() {
    if (!model_) throw Error("model is disposed");
    return *model_;
  }

  Napi::Value Layout(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Model& m = model();
    Napi::Array arr = Napi::Array::New(env, m.tensors.size());
    for (size_t i = 0; i < m.tensors.size(); i++) {
      const ParamTensor& t = m.tensors[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", t.name);
      Napi::Array shape = Napi::Array::New(env, t.shape.size());
      for (size_t k = 0; k < t.shape.size(); k++) shape.Set((uint32_t)k, (double)t.shape[k]);
      o.Set("shape", shape);
      o.Set("offset", (double)t.offset);
      o.Set("numel", (double)t.numel);
      arr.Set((uint32_t)i, o);
    }
    return arr;
  }
  // tensorBuffers(): {params: ArrayBuffer[], grads: ArrayBuffer[]}, one per tensor in layout order
  Napi::Value TensorBuffers(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Model& m = model();
    Napi::Array params = Napi::Array::New(env, m.tensors.size()), grads = Napi::Array::New(env, m.tensors.size());
    for (size_t i = 0; i < m.tensors.size(); i++) {
      params.Set((uint32_t)i, tensor_buffer(env, m.params, m.tensors[i]));
      grads.Set((uint32_t)i, tensor_buffer(env, m.grads, m.tensors[i]));
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("params", params);
    o.Set("grads", grads);
    return o;
  }

  Napi::Value InitRandom(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!info[0].IsNumber() || !info[1].IsNumber()) throw Error("initRandom(seed, std): seed and std must be numbers");
    double seed = info[0].As<Napi::Number>().DoubleValue(), sd = info[1].As<Napi::Number>().DoubleValue();
    if (!std::isfinite(seed) || !std::isfinite(sd) || sd < 0) throw Error("initRandom: seed must be finite and std >= 0");
    std::lock_guard<std::mutex> lock(m.mu);
    m.init_random((uint64_t)(int64_t)seed, (float)sd);
    if (m.device) push_device(m);
    return info.Env().Undefined();
  }

  // The CUDA build keeps the weights on the device; the arenas behind tensorBuffers()
  // are then a host mirror. pushParams() uploads what JavaScript wrote there (after a load),
  // pullParams()/pullGrads() refresh the mirror (before a save). No-ops in the CPU build.
  static void push_device(Model& m) {
#ifdef ANVIL_WITH_CUDA
    m.device->push_params();
#else
    (void)m;
#endif
  }
  Napi::Value PushParams(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) {
      if (m.device) push_device(m);
      return 0.0;
    });
  }
  Napi::Value PullParams(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) m.device->pull_params();
#endif
      (void)m;
      return 0.0;
    });
  }
  Napi::Value PullGrads(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) m.device->pull_grads();
#endif
      (void)m;
      return 0.0;
    });
  }

  // forward(tokens: Int32Array, parents: Int32Array, logp: Float32Array, entropy: Float32Array,
  //         maxTokens: number, maxBytes: number, logitsMode: 0 auto | 1 keep | 2 recompute): Promise<NativeHandle>
  Napi::Value Forward(const Napi::CallbackInfo& info) {
    model();
    auto tokens = get_typed<int32_t, napi_int32_array>(info[0], "tokens");
    auto parents = get_typed<int32_t, napi_int32_array>(info[1], "parents");
    auto logp = get_typed<float, napi_float32_array>(info[2], "logp output");
    auto ent = get_typed<float, napi_float32_array>(info[3], "entropy output");
    size_t n = tokens.ElementLength();
    if (parents.ElementLength() != n)
      throw Error("tokens and parents must have the same length (" + std::to_string(n) + " vs " +
                  std::to_string(parents.ElementLength()) + ")");
    if (n == 0) throw Error("empty pack: a pack needs at least one node");
    if (n > (size_t)INT32_MAX / 2) throw Error("pack too large");
    if (logp.ElementLength() != n || ent.ElementLength() != n) throw Error("logp/entropy outputs must have one entry per node");
    double max_tokens = info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 0;
    double max_bytes = info[5].IsNumber() ? info[5].As<Napi::Number>().DoubleValue() : 0;
    int logits_mode = info[6].IsNumber() ? info[6].As<Napi::Number>().Int32Value() : 0;
    if (logits_mode < 0 || logits_mode > 2) throw Error("forward: logits mode must be 0 (auto), 1 (keep) or 2 (recompute)");
    auto* w = new ForwardWorker(info.Env(), model_, tokens, parents, logp, ent, max_tokens, max_bytes, logits_mode);
    w->Queue();
    return w->Promise();
  }

  // backward(handle, dLdlogp: Float32Array, dLdEntropy?: Float32Array): Promise<void>
  Napi::Value Backward(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!info[0].IsObject()) throw Error("backward: the first argument must be a forward handle");
    Napi::Object ho = info[0].As<Napi::Object>();
    AddonData* data = info.Env().GetInstanceData<AddonData>();
    if (!ho.InstanceOf(data->handle_ctor.Value())) throw Error("backward: the first argument must be a forward handle");
    HandleWrap* h = HandleWrap::Unwrap(ho);
    if (!h->acts) throw Error("backward: the forward handle is disposed");
    if (h->acts->model.get() != &m) throw Error("backward: the handle belongs to another model");
    auto dlogp = get_typed<float, napi_float32_array>(info[1], "dLdlogp");
    if ((int)dlogp.ElementLength() != h->acts->tree.n)
      throw Error("dLdlogp has length " + std::to_string(dlogp.ElementLength()) + " but the pack has " +
                  std::to_string(h->acts->tree.n) + " nodes");
    auto* w = new BackwardWorker(info.Env(), h->acts, dlogp, info[2]);
    w->Queue();
    return w->Promise();
  }

  Napi::Value Queue(Napi::Env env, std::function<double(Model&)> fn) {
    auto* w = new ModelTaskWorker(env, model_, std::move(fn));
    w->Queue();
    return w->Promise();
  }

  Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) {
        m.device->zero_grad();
        return 0.0;
      }
#endif
      std::memset(m.grads->data(), 0, m.grads->bytes());  // (not x * 0: that keeps NaN)
      return 0.0;
    });
  }

  static double grad_norm(Model& m) {
#ifdef ANVIL_WITH_CUDA
    if (m.device) return m.device->grad_norm();
#endif
    return std::sqrt(sum_squares(m.grads->data(), m.num_params));
  }

  Napi::Value GradNorm(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) { return grad_norm(m); });
  }

  // clipGradNorm(maxNorm): scales all gradients so that their global L2 norm is at most maxNorm;
  // resolves with the norm before clipping.
  Napi::Value ClipGradNorm(const Napi::CallbackInfo& info) {
    model();
    if (!info[0].IsNumber()) throw Error("clipGradNorm(maxNorm): maxNorm must be a number");
    double max_norm = info[0].As<Napi::Number>().DoubleValue();
    if (!(max_norm > 0) || !std::isfinite(max_norm)) throw Error("clipGradNorm: maxNorm must be a positive finite number");
    return Queue(info.Env(), [max_norm](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) return m.device->clip_grad_norm(max_norm);
#endif
      double norm = grad_norm(m);
      if (!std::isfinite(norm)) throw Error("gradient norm is not finite (NaN or Inf in the gradients)");
      if (norm > max_norm) scale_inplace(m.grads->data(), m.num_params, (float)(max_norm / (norm + 1e-6)));
      return norm;
    });
  }

  // adamwStep({lr, beta1, beta2, eps, weightDecay, decayMask: Uint8Array per tensor}): Promise<step>
  Napi::Value AdamwStep(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!info[0].IsObject()) throw Error("adamwStep(options): options must be an object");
    Napi::Object o = info[0].As<Napi::Object>();
    const double lr = get_num(o, "lr", NAN), b1 = get_num(o, "beta1", 0.9), b2 = get_num(o, "beta2", 0.999),
                 eps = get_num(o, "eps", 1e-8), wd = get_num(o, "weightDecay", 0.0);
    if (!std::isfinite(lr) || lr < 0) throw Error("adamwStep: lr must be a finite number >= 0");
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) throw Error("adamwStep: beta1 and beta2 must be in [0, 1)");
    if (!(eps >= 0) || !(wd >= 0)) throw Error("adamwStep: eps and weightDecay must be >= 0");
    auto mask = get_typed<uint8_t, napi_uint8_array>(o.Get("decayMask"), "adamwStep: decayMask");
    if (mask.ElementLength() != m.tensors.size()) throw Error("adamwStep: decayMask needs one entry per tensor");
    std::vector<uint8_t> decay(mask.Data(), mask.Data() + mask.ElementLength());
    return Queue(info.Env(), [=](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) {
        m.step += 1;
        m.device->adamw(decay, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, m.step);
        return (double)m.step;
      }
#endif
      if (!m.adam_m) {
        m.adam_m = std::make_shared<FloatArena>(m.num_params);
        m.adam_v = std::make_shared<FloatArena>(m.num_params);
      }
      m.step += 1;
      for (size_t i = 0; i < m.tensors.size(); i++) {
        const ParamTensor& t = m.tensors[i];
        adamw_update(m.params->data() + t.offset, m.grads->data() + t.offset, m.adam_m->data() + t.offset,
                     m.adam_v->data() + t.offset, t.numel, (float)lr, (float)b1, (float)b2, (float)eps,
                     decay[i] ? (float)wd : 0.0f, m.step);
      }
      return (double)m.step;
    });
  }

  Napi::Value Memory(const Napi::CallbackInfo& info) {
    Model& m = model();
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("numParams", (double)m.num_params);
#ifdef ANVIL_WITH_CUDA
    if (m.device) {  // device bytes (the host mirror is not counted)
      o.Set("paramBytes", (double)m.device->param_bytes());
      o.Set("gradBytes", (double)m.device->grad_bytes());
      o.Set("optimizerBytes", (double)m.device->optimizer_bytes());
      o.Set("cachedBytes", (double)m.device->cached_bytes());
      return o;
    }
#endif
    o.Set("paramBytes", (double)m.params->bytes());
    o.Set("gradBytes", (double)m.grads->bytes());
    o.Set("optimizerBytes", m.adam_m ? (double)(m.adam_m->bytes() + m.adam_v->bytes()) : 0.0);
    o.Set("cachedBytes", (double)m.cached_bytes());
    return o;
  }
  Napi::Value TrimCache(const Napi::CallbackInfo& info) {
#ifdef ANVIL_WITH_CUDA
    if (model().device) model().device->trim_cache();
#endif
    model().trim_cache();
    return info.Env().Undefined();
  }
  Napi::Value StepCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), model().step); }

  // optimizerState(): {step, m: Float32Array [num_params] | null, v: ... } copies of AdamW's moments
  // (null before the first step), for checkpoints that resume training exactly. Call between
  // steps (the trainer never overlaps it with a queued step).
  Napi::Value OptimizerState(const Napi::CallbackInfo& info) {
    Model& m = model();
#ifdef ANVIL_WITH_CUDA
    if (m.device) throw Error("optimizerState: not available on the CUDA backend (moments live on the device)");
#endif
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("step", (double)m.step);
    if (!m.adam_m) {
      o.Set("m", env.Null());
      o.Set("v", env.Null());
      return o;
    }
    auto copy = [&](const FloatArena& a) {
      Napi::Float32Array out = Napi::Float32Array::New(env, m.num_params);
      std::memcpy(out.Data(), a.data(), m.num_params * sizeof(float));
      return out;
    };
    o.Set("m", copy(*m.adam_m));
    o.Set("v", copy(*m.adam_v));
    return o;
  }

  // setOptimizerState(step, m: Float32Array [num_params], v: Float32Array [num_params]): restores them.
  Napi::Value SetOptimizerState(const Napi::CallbackInfo& info) {
    Model& m = model();
#ifdef ANVIL_WITH_CUDA
    if (m.device) throw Error("setOptimizerState: not available on the CUDA backend (moments live on the device)");
#endif
    if (!info[0].IsNumber()) throw Error("setOptimizerState(step, m, v): step must be a number");
    const double step = info[0].As<Napi::Number>().DoubleValue();
    if (!(step >= 0) || step != std::floor(step) || step > 2e9) throw Error("setOptimizerState: step must be an integer >= 0");
    auto mm = get_typed<float, napi_float32_array>(info[1], "setOptimizerState: m");
    auto vv = get_typed<float, napi_float32_array>(info[2], "setOptimizerState: v");
    if (mm.ElementLength() != m.num_params || vv.ElementLength() != m.num_params)
      throw Error("setOptimizerState: m and v need one entry per parameter");
    if (!m.adam_m) {
      m.adam_m = std::make_shared<FloatArena>(m.num_params);
      m.adam_v = std::make_shared<FloatArena>(m.num_params);
    }
    std::memcpy(m.adam_m->data(), mm.Data(), m.num_params * sizeof(float));
    std::memcpy(m.adam_v->data(), vv.Data(), m.num_params * sizeof(float));
    m.step = (int)step;
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    model_.reset();
    return info.Env().Undefined();
  }
};

// ---------- generation ----------

class StepWorker : public PromiseWorker {
 public:
  StepWorker(Napi::Env env, std::shared_ptr<GeneratorBase> gen, std::vector<int64_t> ids)
      : PromiseWorker(env), gen_(std::move(gen)), ids_(std::move(ids)) {}
  void Execute() override {
    std::lock_guard<std::mutex> glock(gen_->mu);
    std::lock_guard<std::mutex> lock(gen_->model->mu);
    gen_->step(ids_, out_);
  }
  Napi::Value Result(Napi::Env env) override {
    const size_t B = out_.size();
    auto tokens = Napi::Int32Array::New(env, B);
    auto logprobs = Napi::Float32Array::New(env, B);
    auto raw = Napi::Float32Array::New(env, B);
    for (size_t b = 0; b < B; b++) {
      tokens[b] = out_[b].token;
      logprobs[b] = out_[b].logprob;
      raw[b] = out_[b].raw_logprob;
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("tokens", tokens);
    o.Set("logprobs", logprobs);
    o.Set("rawLogprobs", raw);
    // top alternatives, only when some sequence asked for them: row b holds topCounts[b] entries
    // of a [B, K] layout, K = the largest count
    int K = 0;
    for (size_t b = 0; b < B; b++) K = std::max(K, out_[b].n_top);
    if (K > 0) {
      auto counts = Napi::Int32Array::New(env, B);
      auto ids = Napi::Int32Array::New(env, B * K);
      auto lps = Napi::Float32Array::New(env, B * K);
      for (size_t b = 0; b < B; b++) {
        counts[b] = out_[b].n_top;
        for (int i = 0; i < out_[b].n_top; i++) {
          ids[b * K + i] = out_[b].top_ids[i];
          lps[b * K + i] = out_[b].top_logprobs[i];
        }
      }
      o.Set("topK", K);
      o.Set("topCounts", counts);
      o.Set("topIds", ids);
      o.Set("topLogprobs", lps);
    }
    return o;
  }

 private:
  std::shared_ptr<GeneratorBase> gen_;
  std::vector<int64_t> ids_;
  std::vector<StepOutput> out_;
};

// new NativeGenerator(model: NativeModel, maxPositions: number, prefixCacheBytes: number)
class GeneratorWrap : public Napi::ObjectWrap<GeneratorWrap> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "NativeGenerator",
                       {InstanceMethod("add", &GeneratorWrap::Add), InstanceMethod("remove", &GeneratorWrap::Remove),
                        InstanceMethod("step", &GeneratorWrap::Step),
                        InstanceMethod("clearCache", &GeneratorWrap::ClearCache),
                        InstanceMethod("stats", &GeneratorWrap::Stats)});
  }
  explicit GeneratorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<GeneratorWrap>(info) {
    AddonData* data = info.Env().GetInstanceData<AddonData>();
    if (!info[0].IsObject() || !info[0].As<Napi::Object>().InstanceOf(data->model_ctor.Value()))
      throw Error("NativeGenerator(model, maxPositions, prefixCacheBytes): model must be a NativeModel");
    std::shared_ptr<Model> m = ModelWrap::Unwrap(info[0].As<Napi::Object>())->shared_model();
    if (!m) throw Error("NativeGenerator: the model is disposed");
    if (!info[1].IsNumber() || !info[2].IsNumber()) throw Error("NativeGenerator: maxPositions and prefixCacheBytes must be numbers");
    double maxpos = info[1].As<Napi::Number>().DoubleValue(), bytes = info[2].As<Napi::Number>().DoubleValue();
    if (!(maxpos >= 2 && maxpos <= (1 << 24)) || maxpos != std::floor(maxpos))
      throw Error("NativeGenerator: maxPositions must be an integer in [2, 2^24]");
    if (!(bytes >= 0) || !std::isfinite(bytes)) throw Error("NativeGenerator: prefixCacheBytes must be a finite number >= 0");
#ifdef ANVIL_WITH_CUDA
    // CUDA build: generation runs on the device (paged KV cache, prefix cache) over the device
    // weights themselves, so an optimizer step is visible to the next step() with no copy
    // (in-flight sequences keep the KV computed with the old weights, as with the CPU generator).
    if (m->device) {
      gen_ = std::make_shared<cuda::GpuGenerator>(m, (int)maxpos, bytes);
      return;
    }
#endif
    gen_ = std::make_shared<Generator>(m, (int)maxpos, bytes);
  }

 private:
  std::shared_ptr<GeneratorBase> gen_;  // Generator (CPU) or cuda::GpuGenerator

  static int64_t get_id(const Napi::Value& v) {
    if (!v.IsNumber()) throw Error("sequence id must be a number");
    double d = v.As<Napi::Number>().DoubleValue();
    if (d != std::floor(d) || !std::isfinite(d)) throw Error("sequence id must be an integer");
    return (int64_t)d;
  }

  // add(id, prompt: Int32Array, temperature, topP, topK, seed, topLogprobs?): number of prompt tokens reused from the
  // prefix cache
  Napi::Value Add(const Napi::CallbackInfo& info) {
    const int64_t id = get_id(info[0]);
    auto prompt = get_typed<int32_t, napi_int32_array>(info[1], "prompt");
    for (int i = 2; i < 6; i++)
      if (!info[i].IsNumber()) throw Error("add(id, prompt, temperature, topP, topK, seed): sampling values must be numbers");
    SamplingConfig s;
    s.temperature = (float)info[2].As<Napi::Number>().DoubleValue();
    s.top_p = (float)info[3].As<Napi::Number>().DoubleValue();
    double k = info[4].As<Napi::Number>().DoubleValue(), seed = info[5].As<Napi::Number>().DoubleValue();
    if (!(k >= 0) || k != std::floor(k) || k > 1e9) throw Error("top_k must be an integer >= 0");
    if (!std::isfinite(seed)) throw Error("seed must be finite");
    s.top_k = (int)k;
    s.seed = (uint64_t)(int64_t)seed;
    if (info.Length() > 6 && !info[6].IsUndefined()) {  // topLogprobs (optional)
      if (!info[6].IsNumber()) throw Error("topLogprobs must be a number");
      const double t = info[6].As<Napi::Number>().DoubleValue();
      if (t != std::floor(t) || t < 0 || t > kMaxTopLogprobs)
        throw Error("topLogprobs must be an integer in [0, " + std::to_string(kMaxTopLogprobs) + "]");
      s.top_logprobs = (int)t;
    }
    std::lock_guard<std::mutex> lock(gen_->mu);
    return Napi::Number::New(info.Env(), gen_->add(id, prompt.Data(), (int)prompt.ElementLength(), s));
  }
  Napi::Value Remove(const Napi::CallbackInfo& info) {
    const int64_t id = get_id(info[0]);
    std::lock_guard<std::mutex> lock(gen_->mu);
    gen_->remove(id, info[1].ToBoolean());
    return info.Env().Undefined();
  }
  // step(ids: number[]): Promise<{tokens: Int32Array, logprobs: Float32Array, rawLogprobs: Float32Array}>
  Napi::Value Step(const Napi::CallbackInfo& info) {
    if (!info[0].IsArray()) throw Error("step(ids): ids must be an array");
    Napi::Array a = info[0].As<Napi::Array>();
    std::vector<int64_t> ids(a.Length());
    for (uint32_t i = 0; i < a.Length(); i++) ids[i] = get_id(a.Get(i));
    auto* w = new StepWorker(info.Env(), gen_, std::move(ids));
    w->Queue();
    return w->Promise();
  }
  Napi::Value ClearCache(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(gen_->mu);
    gen_->clear_cache();
    return info.Env().Undefined();
  }
  // lock-free (atomics): never waits for a step in flight
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("activeSequences", gen_->active.load());
    o.Set("prefixCacheHitTokens", (double)gen_->hit_tokens.load());
    o.Set("prefixCacheLookupTokens", (double)gen_->lookup_tokens.load());
    o.Set("prefixCacheBytes", (double)gen_->cache_bytes.load());
    o.Set("prefixCacheEntries", (double)gen_->entries.load());
    return o;
  }
};

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
