// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
#pragma once
#include "addon_model.h"

namespace anvil {
namespace {

// ---------- generation ----------
class StepWorker : public PromiseWorker {
 public:
  // masks: empty, or one entry per id (empty vector = unconstrained), copied so that the caller's
  // typed arrays may change while the step runs
  StepWorker(Napi::Env env, std::shared_ptr<GeneratorBase> gen, std::vector<int64_t> ids,
             std::vector<std::vector<uint32_t>> masks)
      : PromiseWorker(env), gen_(std::move(gen)), ids_(std::move(ids)), masks_(std::move(masks)) {}
  void Execute() override {
    StepMasks masks;
    if (!masks_.empty())
      for (const auto& m : masks_) masks.push_back(m.empty() ? nullptr : m.data());
    std::lock_guard<std::mutex> glock(gen_->mu);
    std::lock_guard<std::mutex> lock(gen_->model->mu);
    gen_->step(ids_, out_, masks);
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
  std::vector<std::vector<uint32_t>> masks_;
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
  // step(ids: number[], masks?: (Uint32Array | null)[]): Promise<{tokens: Int32Array, logprobs: Float32Array,
  // rawLogprobs: Float32Array}>. masks[b]: the ids sequence b may sample (constrained decoding), ceil(vocab / 32)
  // words, bit (id & 31) of word id >> 5; null = unconstrained. Checked here, before the step: a mask that allows
  // no id of the vocabulary is refused (sampling could not proceed, and the whole batch would fail).
  Napi::Value Step(const Napi::CallbackInfo& info) {
    if (!info[0].IsArray()) throw Error("step(ids): ids must be an array");
    Napi::Array a = info[0].As<Napi::Array>();
    std::vector<int64_t> ids(a.Length());
    for (uint32_t i = 0; i < a.Length(); i++) ids[i] = get_id(a.Get(i));
    std::vector<std::vector<uint32_t>> masks;
    if (info.Length() > 1 && !info[1].IsUndefined() && !info[1].IsNull()) {
      if (!info[1].IsArray()) throw Error("step(ids, masks): masks must be an array");
      Napi::Array m = info[1].As<Napi::Array>();
      if (m.Length() != a.Length()) throw Error("step(ids, masks): one mask (or null) per id");
      const int V = gen_->model->cfg.vocab;
      const size_t words = (size_t)(V + 31) / 32;
      masks.resize(m.Length());
      for (uint32_t i = 0; i < m.Length(); i++) {
        Napi::Value v = m.Get(i);
        if (v.IsNull() || v.IsUndefined()) continue;
        auto t = get_typed<uint32_t, napi_uint32_array>(v, "mask");
        if (t.ElementLength() != words)
          throw Error("step: a mask has " + std::to_string(t.ElementLength()) + " words; the vocabulary of " +
                      std::to_string(V) + " needs " + std::to_string(words));
        masks[i].assign(t.Data(), t.Data() + words);
        if (V % 32 != 0) masks[i][words - 1] &= (1u << (V % 32)) - 1;  // bits past the vocabulary mean nothing
        bool any = false;
        for (uint32_t w : masks[i]) any = any || w != 0;
        if (!any) throw Error("step: the mask of sequence " + std::to_string(ids[i]) + " allows no token");
      }
    }
    auto* w = new StepWorker(info.Env(), gen_, std::move(ids), std::move(masks));
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

}  // namespace
}  // namespace anvil
