#include "engine/memory_report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/engine.h"
#include "runner/runner.h"

namespace tandem {

namespace {

// MiB, or KiB below one (a tiny model's KV page would read "0.0 MiB").
std::string mib(int64_t bytes) {
  char buf[48];
  if (bytes > 0 && bytes < (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  }
  return buf;
}

// This process's virtual and resident sizes (statm fields 1 and 2, in pages).
void process_bytes(int64_t& virtual_bytes, int64_t& resident_bytes) {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  const int64_t page = int64_t(sysconf(_SC_PAGESIZE));
  virtual_bytes = size * page;
  resident_bytes = resident * page;
}

int64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
}

// "awq int4 540.0 MiB, bf16 272.0 MiB": what each storage format costs (the part's own column
// has the total), so a quantized checkpoint shows it runs quantized.
std::string weights_detail(const MemoryPlan& p) {
  std::string s;
  for (size_t i = 0; i < p.weight_bytes_by_format.size(); ++i) {
    const auto& [format, bytes] = p.weight_bytes_by_format[i];
    s += (i == 0 ? "" : ", ") + format + " " + mib(bytes);
  }
  return s;
}

std::string label(const RunnerRole& r) {
  return r.stage.empty() ? r.role : r.role + ", " + r.stage;
}

}  // namespace

std::vector<DeviceMemory> memory_report(const std::vector<RunnerRole>& runners,
                                        const EngineOptions& o, int32_t max_model_len) {
  std::map<std::string, std::vector<const RunnerRole*>> by_device;
  for (const RunnerRole& r : runners) {
    const std::string dev = r.runner->device();
    by_device[is_device_name(dev, "cpu") ? "cpu" : dev].push_back(&r);
  }
  std::vector<DeviceMemory> out;
  for (const auto& [device, roles] : by_device) {
    DeviceMemory d;
    d.device = device;
    const bool cpu = device == "cpu";
    int64_t used = 0;
    auto add = [&](std::string name, int64_t bytes, std::string detail, bool keep_zero = false) {
      if (bytes == 0 && !keep_zero && name != "other") return;
      d.parts.push_back({std::move(name), bytes, std::move(detail)});
      used += bytes;
    };
    int64_t free_bytes = INT64_MAX;
    for (const RunnerRole* r : roles) {
      const MemoryPlan p = r->runner->memory_plan();
      const std::string who = label(*r);
      add("weights (" + who + ")", p.weights_bytes, weights_detail(p));
      const int32_t pages = r->runner->num_pages();
      add("kv pool (" + who + ")", p.kv_bytes,
          std::to_string(pages) + " pages x " + mib(p.kv_page_bytes) + " (" +
              std::to_string(r->runner->page_size()) + " tokens/page, K+V, all layers)");
      add("activations (" + who + ")", p.activation_bytes,
          "sized for --max-num-batched-tokens " + std::to_string(o.max_num_batched_tokens));
      add("workspace (" + who + ")", p.workspace_bytes, "GEMM workspace, scratch, batch metadata");
      add("probability rows (" + who + ")", p.prob_rows_bytes,
          "sampled speculation's rows, sized for --spec-max-batch " +
              std::to_string(o.spec_max_batch) + " and --draft-max " + std::to_string(o.draft_max));
      // Captured graphs stay listed at 0 bytes: the driver may place them in memory it holds.
      // Past RunnerOptions::max_graphs the least recently used are released; the bytes are the
      // falls measured at each capture, released graphs' included.
      const int32_t released = p.graph_count - p.graphs_held;
      add("cuda graphs (" + who + ")", p.graph_bytes,
          std::to_string(p.graph_count) + " captured decode graphs" +
              (released > 0 ? ", " + std::to_string(released) + " since released" : "") +
              " (the driver's free bytes fell by this much around their instantiation and upload)",
          p.graph_count > 0);
      free_bytes = std::min(free_bytes, p.device_free_bytes);
      if (!cpu) d.total_bytes = p.device_total_bytes;

      // What the settings did here.
      if (o.kv_pages > 0) {
        d.settings.push_back(
            {"--kv-pages", std::to_string(o.kv_pages), p.kv_bytes,
             who + ": " + std::to_string(pages) + " pages x " + mib(p.kv_page_bytes)});
      } else if (cpu) {
        d.settings.push_back({"--kv-pages", "0", p.kv_bytes,
                              who + ": default CPU KV budget " + mib(p.kv_budget_bytes) + " -> " +
                                  std::to_string(pages) + " pages"});
      } else {
        char u[32];
        std::snprintf(u, sizeof u, "%.2f", o.gpu_memory_utilization);
        d.settings.push_back({"--gpu-memory-utilization", u, p.kv_bytes,
                              who + ": " + u + " x " + mib(p.device_total_bytes) +
                                  " minus what was in use left " + std::to_string(pages) +
                                  " pages for KV"});
      }
      const int64_t pages_per_seq = (int64_t(max_model_len) + r->runner->page_size() - 1) /
                                    std::max(1, r->runner->page_size());
      d.settings.push_back(
          {"max context", std::to_string(max_model_len), pages_per_seq * p.kv_page_bytes,
           who + ": one sequence of max context holds " + std::to_string(pages_per_seq) +
               " pages; the pool fits " +
               std::to_string(pages / std::max<int64_t>(1, pages_per_seq)) + " of them"});
    }
    if (cpu) {
      process_bytes(d.total_bytes, d.resident_bytes);
      d.free_bytes = 0;
      d.host_available_bytes = host_available_bytes();
      add("other", d.total_bytes - used, "code, heaps, thread stacks, mapped model files");
    } else {
      d.free_bytes = free_bytes == INT64_MAX ? 0 : free_bytes;
      add("other", d.total_bytes - d.free_bytes - used,
          "CUDA context, NCCL/transport buffers, other processes");
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace tandem
