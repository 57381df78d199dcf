// A loop over [0, count) split into contiguous ranges, one per core, for one-off host work
// (model generation, weight repacking) that runs concurrently with other such loops. The CPU
// runner's hot loops use its ThreadPool (runner/cpu/thread_pool.h), which runs one job at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace tandem {

// f(begin, end) over [0, count) in ranges of at least `grain` (fewer threads for short loops),
// at most one per core; the calling thread takes the first range. Returns when all are done.
template <typename F>
void parallel_ranges(int64_t count, int64_t grain, F&& f) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::max<int64_t>(1, std::min(cores, (count + grain - 1) / grain));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    pool.emplace_back(
        [&f, count, threads, t] { f(count * t / threads, count * (t + 1) / threads); });
  }
  f(int64_t(0), count / threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace tandem
