// Plays a workload against tandemd at one request rate: one streaming client (its own
// connection and thread) per request, sent at its arrival offset, round-robin over the sockets
// given (two sockets = two replicas with requests split between them).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "serve_stats.h"
#include "serve_workload.h"

namespace tandem::bench {

struct LoadOptions {
  std::vector<std::string> sockets;
  std::vector<double> offsets_s;  // [requests] send time of each, from the start
  int32_t max_concurrency = 0;    // requests in flight at most; 0 = no limit
  // Called from the driving thread about every 100 ms and once at the end: (finished, total).
  std::function<void(int32_t, int32_t)> progress;
};

struct LoadRun {
  std::vector<RequestOutcome> outcomes;  // [requests], in workload order
  double duration_s = 0;                 // first send -> last reply
};

LoadRun run_load(const std::vector<ServeRequest>& requests, const LoadOptions& options);

}  // namespace tandem::bench
