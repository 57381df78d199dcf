// A fixed set of worker threads for the CPU runner's data-parallel loops (matmul rows,
// attention heads). One parallel_for at a time; the calling thread works too.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  // threads <= 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over contiguous pieces of [0, n) and returns when all are done.
  // Pieces are at least `grain` long so tiny loops do not pay for waking threads.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_piece(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_pieces_ = 0;
  uint64_t generation_ = 0;  // bumped per job; workers run each generation once
  int pending_ = 0;          // workers still running the current job
  bool stop_ = false;
};

}  // namespace tandem
