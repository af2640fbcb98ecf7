// Part of the Node-API binding (addon.cc), included by it alone: the binding is one
// translation unit, so its internals keep internal linkage (the anonymous namespace).
// LoRA: the config from JavaScript, and what the optimizer calls work on.
#pragma once
#include "addon_workers.h"
#include "lora.h"

namespace anvil {
namespace {

// What gradients and the optimizer work on: the adapters while LoRA is on, else the base weights.
struct Trainable {
  FloatArena* params;
  FloatArena* grads;
  std::shared_ptr<FloatArena>* adam_m;
  std::shared_ptr<FloatArena>* adam_v;
  size_t n;
  int* step;
  const std::vector<ParamTensor>* tensors;
};

Trainable trainable(Model& m) {
  if (m.lora) {
    LoraState& l = *m.lora;
    return {l.params.get(), l.grads.get(), &l.adam_m, &l.adam_v, l.num_params, &l.step, &l.tensors};
  }
  return {m.params.get(), m.grads.get(), &m.adam_m, &m.adam_v, m.num_params, &m.step, &m.tensors};
}

// {rank, alpha, dropout, targets: string[], seed} -> LoraConfig, checked against the model's shape.
LoraConfig parse_lora_config(const Napi::Value& v, const ModelConfig& mc) {
  if (!v.IsObject()) throw Error("enableLora(options): options must be an object");
  Napi::Object o = v.As<Napi::Object>();
  LoraConfig c;
  Napi::Value r = o.Get("rank");
  if (!r.IsNumber()) throw Error("LoRA: rank must be an integer");
  const double rank = r.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(rank) || rank != std::floor(rank) || rank < -1e9 || rank > 1e9)
    throw Error("LoRA: rank must be an integer, got " + std::to_string(rank));
  c.rank = (int)rank;
  c.alpha = (float)get_num(o, "alpha", NAN);
  c.dropout = (float)get_num(o, "dropout", 0.0);
  const double seed = get_num(o, "seed", 0.0);
  if (seed < 0 || seed != std::floor(seed) || seed > 9007199254740991.0) throw Error("LoRA: seed must be a non-negative integer");
  c.seed = (uint64_t)seed;
  Napi::Value t = o.Get("targets");
  if (!t.IsArray()) throw Error("LoRA: targets must be an array of module names");
  Napi::Array arr = t.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value e = arr.Get(i);
    if (!e.IsString()) throw Error("LoRA: targets must be module names (strings)");
    const std::string name = e.As<Napi::String>().Utf8Value();
    int found = -1;
    for (int k = 0; k < kLoraTargets; k++)
      if (name == kLoraTargetNames[k]) found = k;
    if (found < 0) {
      std::string all;
      for (int k = 0; k < kLoraTargets; k++) all += std::string(k ? ", " : "") + kLoraTargetNames[k];
      throw Error("LoRA: the model has no module named \"" + name + "\" to adapt (it has " + all + ")");
    }
    c.targets |= 1u << found;
  }
  validate_lora(mc, c);
  return c;
}

Napi::Value lora_config_object(Napi::Env env, const LoraConfig& c) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("rank", c.rank);
  o.Set("alpha", c.alpha);
  o.Set("dropout", c.dropout);
  o.Set("seed", (double)c.seed);
  Napi::Array t = Napi::Array::New(env);
  uint32_t k = 0;
  for (int i = 0; i < kLoraTargets; i++)
    if (c.targets >> i & 1) t.Set(k++, kLoraTargetNames[i]);
  o.Set("targets", t);
  return o;
}

// Layout of tensors: [{name, shape, offset, numel}]
Napi::Array layout_array(Napi::Env env, const std::vector<ParamTensor>& tensors) {
  Napi::Array arr = Napi::Array::New(env, tensors.size());
  for (size_t i = 0; i < tensors.size(); i++) {
    const ParamTensor& t = tensors[i];
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

}  // namespace
}  // namespace anvil
