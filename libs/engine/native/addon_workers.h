// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include "addon_handle.h"

namespace anvil {
namespace {

// ---------- workers (forward, backward, model tasks, SGEMM bench) ----------
class ForwardWorker : public PromiseWorker {
 public:
  ForwardWorker(Napi::Env env, std::shared_ptr<Model> model, Napi::Int32Array tokens, Napi::Int32Array parents,
                Napi::Float32Array logp, Napi::Float32Array entropy, double max_tokens, double max_bytes, int logits_mode,
                bool train, double dropout_seed)
      : PromiseWorker(env), model_(std::move(model)), max_tokens_(max_tokens), max_bytes_(max_bytes),
        logits_mode_(logits_mode), train_(train), dropout_seed_(dropout_seed) {
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
    std::lock_guard<std::mutex> lock(model_->mu);
    // the adapters this forward runs with; a training forward draws fresh dropout masks
    acts->lora = model_->lora;
    acts->drop = train_ && acts->lora && acts->lora->cfg.dropout > 0.f;
    if (acts->drop)
      acts->dropout_seed = dropout_seed_ >= 0 ? (uint64_t)dropout_seed_ : acts->lora->next_dropout_seed();
#ifdef ANVIL_WITH_CUDA
    if (model_->device) {
      cuda::ForwardBytes fb;
      acts->dev = model_->device->forward(acts->tree, tokens_, logp_, entropy_, (LogitsMode)logits_mode_, max_bytes_, &fb,
                                          acts->lora.get(), acts->drop, acts->dropout_seed);
      acts->kept_bytes = fb.kept;
      acts->forward_scratch_bytes = fb.forward_scratch;
      acts->backward_scratch_bytes = fb.backward_scratch;
      acts_ = acts;
      return;
    }
#endif
    acts->plan = plan_memory(model_->cfg, acts->tree, (LogitsMode)logits_mode_, max_bytes_, acts->lora.get(), acts->drop);
    if (max_bytes_ > 0) {
      const double need = (double)acts->plan.peak_bytes();
      if (need > max_bytes_)
        throw Error("pack needs " + std::to_string((int64_t)need) + " bytes of activations and scratch, over the limit maxBytes = " +
                    std::to_string((int64_t)max_bytes_));
    }
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
  bool train_;
  double dropout_seed_;
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
    if (acts_->lora != acts_->model->lora)
      throw Error("backward: the model's LoRA adapters were enabled, replaced or merged after this forward; run the forward again");
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

}  // namespace
}  // namespace anvil
