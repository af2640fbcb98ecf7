// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include "addon_lora.h"

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
                        InstanceMethod("enableLora", &ModelWrap::EnableLora),
                        InstanceMethod("disableLora", &ModelWrap::DisableLora),
                        InstanceMethod("mergeLora", &ModelWrap::MergeLora),
                        InstanceMethod("loraConfig", &ModelWrap::LoraConfigOf),
                        InstanceMethod("loraLayout", &ModelWrap::LoraLayout),
                        InstanceMethod("loraBuffers", &ModelWrap::LoraBuffers),
                        InstanceMethod("copyMergedTensor", &ModelWrap::CopyMergedTensor),
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

  Napi::Value Layout(const Napi::CallbackInfo& info) { return layout_array(info.Env(), model().tensors); }

  static Napi::Object buffers(Napi::Env env, const std::vector<ParamTensor>& tensors, const std::shared_ptr<FloatArena>& p,
                              const std::shared_ptr<FloatArena>& g) {
    Napi::Array params = Napi::Array::New(env, tensors.size());
    Napi::Value grads = env.Null();
    for (size_t i = 0; i < tensors.size(); i++) params.Set((uint32_t)i, tensor_buffer(env, p, tensors[i]));
    if (g) {
      Napi::Array ga = Napi::Array::New(env, tensors.size());
      for (size_t i = 0; i < tensors.size(); i++) ga.Set((uint32_t)i, tensor_buffer(env, g, tensors[i]));
      grads = ga;
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("params", params);
    o.Set("grads", grads);
    return o;
  }
  // tensorBuffers(): {params: ArrayBuffer[], grads: ArrayBuffer[] | null}, one per tensor in layout
  // order; grads is null while LoRA adapters are on (the base is frozen and has none).
  Napi::Value TensorBuffers(const Napi::CallbackInfo& info) {
    Model& m = model();
    return buffers(info.Env(), m.tensors, m.params, m.grads);
  }

  // ---- LoRA ----
  // enableLora({rank, alpha, dropout, targets, seed}): Promise<void>. The config is checked here
  // (a bad one throws and changes nothing); the adapters replace any the model had.
  Napi::Value EnableLora(const Napi::CallbackInfo& info) {
    Model& m = model();
    const LoraConfig c = parse_lora_config(info[0], m.cfg);
    return Queue(info.Env(), [c](Model& m) {
      m.enable_lora(c);
#ifdef ANVIL_WITH_CUDA
      if (m.device) m.device->lora_changed();
#endif
      return 0.0;
    });
  }
  // disableLora(): Promise<void>: drops the adapters (unmerged); the base gets fresh gradients.
  Napi::Value DisableLora(const Napi::CallbackInfo& info) {
    model();
    return Queue(info.Env(), [](Model& m) {
      m.disable_lora();
#ifdef ANVIL_WITH_CUDA
      if (m.device) m.device->lora_changed();
#endif
      return 0.0;
    });
  }
  // mergeLora(): Promise<void>: W += (alpha / r) B A for every adapted projection, then drops them.
  Napi::Value MergeLora(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!m.lora) throw Error("mergeLora: the model has no LoRA adapters");
    return Queue(info.Env(), [](Model& m) {
#ifdef ANVIL_WITH_CUDA
      if (m.device) m.device->pull_params();  // the host arenas (base and adapters) are merged, then uploaded
#endif
      m.merge_lora();
#ifdef ANVIL_WITH_CUDA
      if (m.device) {
        m.device->lora_changed();
        m.device->push_params();
      }
#endif
      return 0.0;
    });
  }
  Napi::Value LoraConfigOf(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!m.lora) return info.Env().Null();
    return lora_config_object(info.Env(), m.lora->cfg);
  }
  Napi::Value LoraLayout(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!m.lora) return info.Env().Null();
    return layout_array(info.Env(), m.lora->tensors);
  }
  // loraBuffers(): {params, grads} ArrayBuffers per adapter tensor (PEFT order), or null without LoRA.
  Napi::Value LoraBuffers(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!m.lora) return info.Env().Null();
    return buffers(info.Env(), m.lora->tensors, m.lora->params, m.lora->grads);
  }
  // copyMergedTensor(i, out: Float32Array): out = base tensor i + (alpha / r) B A of the adapter on it
  // (a plain copy when none adapts it): what a merged checkpoint holds, without touching the base.
  // Reads the host arenas (the CUDA caller syncs them first); takes the model's lock.
  Napi::Value CopyMergedTensor(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!info[0].IsNumber()) throw Error("copyMergedTensor(index, out): index must be a number");
    const int64_t i = info[0].As<Napi::Number>().Int64Value();
    if (i < 0 || i >= (int64_t)m.tensors.size()) throw Error("copyMergedTensor: tensor index out of range");
    auto out = get_typed<float, napi_float32_array>(info[1], "copyMergedTensor: out");
    const ParamTensor& t = m.tensors[(size_t)i];
    if (out.ElementLength() != t.numel) throw Error("copyMergedTensor: out needs " + std::to_string(t.numel) + " elements");
    std::lock_guard<std::mutex> lock(m.mu);
    std::memcpy(out.Data(), m.params->data() + t.offset, t.numel * sizeof(float));
    if (m.lora) {
      const LoraState& st = *m.lora;
      for (const LoraSite& s : st.sites)
        if (m.site_tensor(s) == (int)i)
          lora_merge_site(out.Data(), st.params->data() + s.a, st.params->data() + s.b, s.in, s.out, st.cfg.rank,
                          st.cfg.scale());
    }
    return info.Env().Undefined();
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
  //         maxTokens: number, maxBytes: number, logitsMode: 0 auto | 1 keep | 2 recompute,
  //         train?: boolean (apply LoRA dropout), dropoutSeed?: number (>= 0 fixes the masks)): Promise<NativeHandle>
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
    const bool train = info[7].ToBoolean();  // LoRA dropout on (a training forward)
    const double seed = info[8].IsNumber() ? info[8].As<Napi::Number>().DoubleValue() : -1;  // < 0: a fresh draw
    if (!(seed < 0) && (seed != std::floor(seed) || seed > 9007199254740991.0))
      throw Error("forward: dropoutSeed must be a non-negative integer");
    auto* w = new ForwardWorker(info.Env(), model_, tokens, parents, logp, ent, max_tokens, max_bytes, logits_mode, train,
                                seed);
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
      const Trainable t = trainable(m);
      std::memset(t.grads->data(), 0, t.grads->bytes());  // (not x * 0: that keeps NaN)
      return 0.0;
    });
  }

  static double grad_norm(Model& m) {
#ifdef ANVIL_WITH_CUDA
    if (m.device) return m.device->grad_norm();
#endif
    const Trainable t = trainable(m);
    return std::sqrt(sum_squares(t.grads->data(), t.n));
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
      const Trainable t = trainable(m);
      if (norm > max_norm) scale_inplace(t.grads->data(), t.n, (float)(max_norm / (norm + 1e-6)));
      return norm;
    });
  }

  // adamwStep({lr, beta1, beta2, eps, weightDecay, decayMask: Uint8Array per tensor}): Promise<step>
  // While LoRA is on it updates the adapters (decayMask: one entry per adapter tensor).
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
    const size_t count = trainable(m).tensors->size();
    if (mask.ElementLength() != count)
      throw Error(std::string("adamwStep: decayMask needs one entry per ") + (m.lora ? "adapter tensor" : "tensor") + " (" +
                  std::to_string(count) + ")");
    std::vector<uint8_t> decay(mask.Data(), mask.Data() + mask.ElementLength());
    const bool lora = m.lora != nullptr;
    return Queue(info.Env(), [=](Model& m) {
      if ((m.lora != nullptr) != lora) throw Error("adamwStep: LoRA adapters were enabled or dropped while the step was queued");
      const Trainable tr = trainable(m);
#ifdef ANVIL_WITH_CUDA
      if (m.device) {
        *tr.step += 1;
        m.device->adamw(decay, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, *tr.step);
        return (double)*tr.step;
      }
#endif
      if (!*tr.adam_m) {
        *tr.adam_m = std::make_shared<FloatArena>(tr.n);
        *tr.adam_v = std::make_shared<FloatArena>(tr.n);
      }
      *tr.step += 1;
      for (size_t i = 0; i < tr.tensors->size(); i++) {
        const ParamTensor& t = (*tr.tensors)[i];
        adamw_update(tr.params->data() + t.offset, tr.grads->data() + t.offset, (*tr.adam_m)->data() + t.offset,
                     (*tr.adam_v)->data() + t.offset, t.numel, (float)lr, (float)b1, (float)b2, (float)eps,
                     decay[i] ? (float)wd : 0.0f, *tr.step);
      }
      return (double)*tr.step;
    });
  }

  Napi::Value Memory(const Napi::CallbackInfo& info) {
    Model& m = model();
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("numParams", (double)m.num_params);
    o.Set("trainableParams", (double)trainable(m).n);
    o.Set("adapterParams", m.lora ? (double)m.lora->num_params : 0.0);
#ifdef ANVIL_WITH_CUDA
    if (m.device) {  // device bytes (the host mirror is not counted)
      o.Set("paramBytes", (double)m.device->param_bytes());
      o.Set("gradBytes", (double)m.device->grad_bytes());
      o.Set("optimizerBytes", (double)m.device->optimizer_bytes());
      o.Set("cachedBytes", (double)m.device->cached_bytes());
      return o;
    }
#endif
    const Trainable t = trainable(m);
    o.Set("paramBytes", (double)(m.params->bytes() + (m.lora ? m.lora->params->bytes() : 0)));
    o.Set("gradBytes", (double)t.grads->bytes());  // the frozen base has none
    o.Set("optimizerBytes", *t.adam_m ? (double)((*t.adam_m)->bytes() + (*t.adam_v)->bytes()) : 0.0);
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
  Napi::Value StepCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), *trainable(model()).step); }

  // optimizerState(): {step, m: Float32Array | null, v: ... } copies of AdamW's moments (one entry
  // per trainable parameter: the base's, or the adapters' while LoRA is on; null before the first
  // step), for checkpoints that resume training exactly. Call between steps (the trainer never
  // overlaps it with a queued step).
  // On the CUDA backend the moments live on the device: they are copied through the host arenas
  // (allocated at the first call), under the model's lock, which no queued step holds between steps.
  Napi::Value OptimizerState(const Napi::CallbackInfo& info) {
    Model& m = model();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    std::lock_guard<std::mutex> lock(m.mu);
    const Trainable t = trainable(m);
#ifdef ANVIL_WITH_CUDA
    if (m.device) {
      auto hm = *t.adam_m ? *t.adam_m : std::make_shared<FloatArena>(t.n);
      auto hv = *t.adam_v ? *t.adam_v : std::make_shared<FloatArena>(t.n);
      if (m.device->pull_moments(hm->data(), hv->data())) {
        *t.adam_m = hm;
        *t.adam_v = hv;
      }
    }
#endif
    o.Set("step", (double)*t.step);
    if (!*t.adam_m) {
      o.Set("m", env.Null());
      o.Set("v", env.Null());
      return o;
    }
    auto copy = [&](const FloatArena& a) {
      Napi::Float32Array out = Napi::Float32Array::New(env, t.n);
      std::memcpy(out.Data(), a.data(), t.n * sizeof(float));
      return out;
    };
    o.Set("m", copy(**t.adam_m));
    o.Set("v", copy(**t.adam_v));
    return o;
  }

  // setOptimizerState(step, m: Float32Array, v: Float32Array): restores them (one entry per
  // trainable parameter, as optimizerState() returns them).
  Napi::Value SetOptimizerState(const Napi::CallbackInfo& info) {
    Model& m = model();
    if (!info[0].IsNumber()) throw Error("setOptimizerState(step, m, v): step must be a number");
    const double step = info[0].As<Napi::Number>().DoubleValue();
    if (!(step >= 0) || step != std::floor(step) || step > 2e9) throw Error("setOptimizerState: step must be an integer >= 0");
    auto mm = get_typed<float, napi_float32_array>(info[1], "setOptimizerState: m");
    auto vv = get_typed<float, napi_float32_array>(info[2], "setOptimizerState: v");
    std::lock_guard<std::mutex> lock(m.mu);
    const Trainable t = trainable(m);
    if (mm.ElementLength() != t.n || vv.ElementLength() != t.n)
      throw Error(std::string("setOptimizerState: m and v need one entry per ") + (m.lora ? "adapter parameter" : "parameter") +
                  " (" + std::to_string(t.n) + "), got " + std::to_string(mm.ElementLength()) + " and " +
                  std::to_string(vv.ElementLength()));
    if (!*t.adam_m) {
      *t.adam_m = std::make_shared<FloatArena>(t.n);
      *t.adam_v = std::make_shared<FloatArena>(t.n);
    }
    std::memcpy((*t.adam_m)->data(), mm.Data(), t.n * sizeof(float));
    std::memcpy((*t.adam_v)->data(), vv.Data(), t.n * sizeof(float));
#ifdef ANVIL_WITH_CUDA
    if (m.device) m.device->push_moments((*t.adam_m)->data(), (*t.adam_v)->data());
#endif
    *t.step = (int)step;
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    model_.reset();
    return info.Env().Undefined();
  }
};

}  // namespace
}  // namespace anvil
