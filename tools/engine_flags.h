// Engine flags of the in-process commands (`run`, `bench`): model, devices, KV pool, batching.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace tandem::cli {

struct EngineFlags {
  EngineOptions options;
  std::string device;  // --device sets both stages
};

inline void add_engine_flags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("--model", f.options.model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--draft", f.options.draft_dir, "Draft model directory (speculative decoding)");
  cmd->add_option("--quantization", f.options.quantization,
                  "fp8: quantize a float checkpoint's Linears to FP8 at load (quantized "
                  "checkpoints run as stored without it)");
  cmd->add_option("--draft-quantization", f.options.draft_quantization,
                  "fp8: the same for the draft model");
  cmd->add_option("--device", f.device, "cpu or cuda:N for both stages");
  cmd->add_option("--prefill-device", f.options.prefill_device);
  cmd->add_option("--decode-device", f.options.decode_device);
  cmd->add_option("--kv-transport", f.options.kv_transport,
                  "KV shipping between stages: auto, local, peer, nccl, host_staged (a GPU "
                  "transport named with one device ships between two runners on it)");
  cmd->add_option("--kv-pages", f.options.kv_pages, "KV pages per pool (0 = size from memory)");
  cmd->add_option("--page-size", f.options.page_size, "Tokens per KV page");
  cmd->add_option("--gpu-memory-utilization", f.options.gpu_memory_utilization);
  cmd->add_option("--max-num-seqs", f.options.max_num_seqs);
  cmd->add_option("--max-num-batched-tokens", f.options.max_num_batched_tokens);
  cmd->add_option("--prefill-chunk", f.options.prefill_chunk, "Prompt tokens per prefill chunk");
  cmd->add_option("--max-model-len", f.options.max_model_len);
  cmd->add_option("--max-cuda-graphs", f.options.max_cuda_graphs,
                  "CUDA graphs kept per GPU runner; past it the least recently used is released")
      ->capture_default_str();
  cmd->add_option("--scheduling-policy", f.options.scheduling_policy,
                  "Admission order and preemption victims: fcfs");
  cmd->add_option("--threads", f.options.threads, "CPU runner threads (0 = all cores)");
  cmd->add_option("--draft-max", f.options.draft_max, "Most draft tokens per speculative step")
      ->capture_default_str();
  cmd->add_option("--draft-min", f.options.draft_min, "Fewest draft tokens when speculating")
      ->capture_default_str();
  cmd->add_option("--draft-vocab", f.options.draft_vocab,
                  "The draft scores and proposes only ids below this (0 = all); lossless")
      ->capture_default_str();
  cmd->add_option("--spec-max-batch", f.options.spec_max_batch,
                  "No speculation when more sequences than this run (their plain step runs)")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--spec", [&f](const std::string& v) { f.options.spec = v == "on"; },
         "on|off: speculative decoding with --draft")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option_function<std::string>(
         "--trace", [&f](const std::string& v) { f.options.trace = v == "on"; },
         "on|off: per-request stage spans (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option_function<std::string>(
         "--prefix-caching", [&f](const std::string& v) { f.options.prefix_caching = v == "on"; },
         "on|off: share the KV pages of cached prompt prefixes (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option_function<std::string>(
         "--async-decode", [&f](const std::string& v) { f.options.async_decode = v == "on"; },
         "on|off: launch a greedy decode batch's next step before reading its tokens (default on)")
      ->check(CLI::IsMember({"on", "off"}));
}

// --device overrides both stage devices.
inline EngineOptions engine_options(const EngineFlags& f) {
  EngineOptions o = f.options;
  if (!f.device.empty()) o.prefill_device = o.decode_device = f.device;
  return o;
}

}  // namespace tandem::cli
