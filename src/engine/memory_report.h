// `tandem status`'s memory breakdown: per device, where every byte went and which setting put
// it there. The rule each DeviceMemory keeps: sum(parts) + free_bytes == total_bytes.
//
// A CUDA device: total and free are the driver's (cudaMemGetInfo, as the runners measured it
// after allocating); the parts are what each runner measured around its allocation phases;
// "other" is the rest: the CUDA context, NCCL/transport buffers, other processes.
// The CPU backend: the "device" is this process. total is its virtual size (/proc/self/statm,
// read now), free is 0 (the host's available memory is reported apart, as host_available_bytes),
// and "other" is code, heaps, thread stacks and mapped model files: the parts + other sum
// exactly to the process size. Virtual size counts address space reserved but never touched
// (each thread's glibc arena, stacks, KV pages not yet written), so resident_bytes (what `top`
// calls RES: pages in RAM now, the model file's touched pages included) is reported beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class ModelRunner;
struct EngineOptions;

struct MemoryPart {
  std::string name;  // "weights (target)", "kv pool target", "activations", ..., "other"
  int64_t bytes = 0;
  std::string detail;  // "2048 pages x 1.5 MiB", ...
};

// What one setting contributed (or would have) on this device.
struct SettingEffect {
  std::string setting;  // "--kv-pages", "--gpu-memory-utilization", "max context"
  std::string value;
  int64_t bytes = 0;
  std::string effect;
};

struct DeviceMemory {
  std::string device;  // "cuda:0", or "cpu" (the process)
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  int64_t host_available_bytes = 0;  // CPU only: MemAvailable of the host
  int64_t resident_bytes = 0;        // CPU only: the process's resident set (not a part)
  std::vector<MemoryPart> parts;     // ends with "other"
  std::vector<SettingEffect> settings;
};

// One runner and its role: "target", "draft"; `stage` ("prefill", "decode") tells two runners
// of one role apart ("" when the role runs on one stage).
struct RunnerRole {
  std::string role;
  std::string stage;
  const ModelRunner* runner = nullptr;
};

// Groups runners by device (every "cpu"/"cpu:N" runner is in the one process) and builds each
// device's breakdown. `max_model_len` is the engine's longest sequence.
std::vector<DeviceMemory> memory_report(const std::vector<RunnerRole>& runners,
                                        const EngineOptions& options, int32_t max_model_len);

}  // namespace tandem
