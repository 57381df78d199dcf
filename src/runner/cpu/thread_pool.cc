#include "runner/cpu/thread_pool.h"

#include <algorithm>

namespace tandem {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Piece `index` of the current job: an even split of [0, job_n_) into job_pieces_ parts.
void ThreadPool::run_piece(int index) {
  if (index >= job_pieces_) return;
  const int64_t begin = job_n_ * index / job_pieces_;
  const int64_t end = job_n_ * (index + 1) / job_pieces_;
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_piece(index);
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t max_pieces = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int pieces = int(std::min<int64_t>(size(), max_pieces));
  if (pieces == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_pieces_ = pieces;
    pending_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_piece(0);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace tandem
