// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include "addon_workers.h"

namespace anvil {
namespace {

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
  // On the CUDA backend the moments live on the device: they are copied through the host arenas
  // (allocated at the first call), under the model's lock, which no queued step holds between steps.
  Napi::Value OptimizerState(const Napi::CallbackInfo& info) {
    Model& m = model();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
#ifdef ANVIL_WITH_CUDA
    if (m.device) {
      std::lock_guard<std::mutex> lock(m.mu);
      auto hm = m.adam_m ? m.adam_m : std::make_shared<FloatArena>(m.num_params);
      auto hv = m.adam_v ? m.adam_v : std::make_shared<FloatArena>(m.num_params);
      if (m.device->pull_moments(hm->data(), hv->data())) {
        m.adam_m = hm;
        m.adam_v = hv;
      }
    }
#endif
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
#ifdef ANVIL_WITH_CUDA
    if (m.device) {
      std::lock_guard<std::mutex> lock(m.mu);
      m.device->push_moments(m.adam_m->data(), m.adam_v->data());
    }
#endif
    m.step = (int)step;
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    model_.reset();
    return info.Env().Undefined();
  }
};

}  // namespace
}  // namespace anvil
