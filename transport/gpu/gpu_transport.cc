#include "transport/gpu/gpu_transport.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "transport/gpu/device_guard.h"

namespace tandem {

DevicePlanes::DevicePlanes(const KvPoolView& pool, int on_device) {
  DeviceGuard g(on_device);
  std::vector<unsigned char*> host;  // [num_layers * 2]
  for (int32_t l = 0; l < pool.num_layers(); ++l) {
    host.push_back(reinterpret_cast<unsigned char*>(pool.k[size_t(l)]));
    host.push_back(reinterpret_cast<unsigned char*>(pool.v[size_t(l)]));
  }
  TANDEM_CUDA_CHECK(cudaMalloc(&table_, std::max<size_t>(1, host.size()) * sizeof(void*)));
  TANDEM_CUDA_CHECK(
      cudaMemcpy(table_, host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice));
}

DevicePlanes::~DevicePlanes() {
  cudaFree(table_);
}

GpuTransport::GpuTransport(const KvPoolView& src, const KvPoolView& dst) : src_(src), dst_(dst) {
  {
    DeviceGuard g(src_.device);
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&src_stream_, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&writer_done_, cudaEventDisableTiming));
  }
  if (dst_.device == src_.device) {
    dst_stream_ = src_stream_;
  } else {
    DeviceGuard g(dst_.device);
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&dst_stream_, cudaStreamNonBlocking));
  }
}

GpuTransport::~GpuTransport() {
  // Work still queued writes into pools that outlive us; let it land before the streams go.
  if (src_stream_) cudaStreamSynchronize(src_stream_);
  if (dst_stream_ && dst_stream_ != src_stream_) cudaStreamSynchronize(dst_stream_);
  for (auto& [t, e] : tickets_) {
    if (e.done) cudaEventDestroy(e.done);
  }
  if (writer_done_) cudaEventDestroy(writer_done_);
  if (dst_stream_ && dst_stream_ != src_stream_) cudaStreamDestroy(dst_stream_);
  if (src_stream_) cudaStreamDestroy(src_stream_);
}

kernels::KvPagePairs GpuTransport::pairs_of(const ShipOrder& order, int32_t pair_begin,
                                            int32_t pair_end) {
  kernels::KvPagePairs p;
  p.count = pair_end - pair_begin;
  for (int32_t i = 0; i < p.count; ++i) {
    p.src[i] = order.pages[size_t(pair_begin + i)].src;
    p.dst[i] = order.pages[size_t(pair_begin + i)].dst;
  }
  return p;
}

bool GpuTransport::aligned16(const void* staging_a, const void* staging_b) const {
  auto ok = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (src_.page_bytes % 16 != 0 || !ok(staging_a) || !ok(staging_b)) return false;
  for (const KvPoolView* pool : {&src_, &dst_}) {
    for (size_t l = 0; l < pool->k.size(); ++l) {
      if (!ok(pool->k[l]) || !ok(pool->v[l])) return false;
    }
  }
  return true;
}

Result<KvTransport::Ticket> GpuTransport::ship(const ShipOrder& order) {
  TANDEM_TRY(validate_ship_order(order));
  if (order.src->device != src_.device || order.dst->device != dst_.device ||
      order.src->k != src_.k || order.dst->k != dst_.k) {
    return make_error(ErrorCode::kTransport, std::string(name()) +
                                                 " transport: the order's pools are not the "
                                                 "pools it was built for");
  }
  Entry entry;
  entry.device = dst_.device;
  std::optional<Error> fault = fault_hook_ ? fault_hook_(order) : std::nullopt;
  if (fault && fault->code != ErrorCode::kTimeout) {
    entry.state = ShipState::kFailed;
    entry.error = *fault;
  } else if (!fault && !order.pages.empty()) {
    DeviceGuard g(src_.device);
    if (order.src->writer_stream != nullptr) {
      // The forward that wrote these pages may still run: wait for it on the device, not here.
      TANDEM_CUDA_CHECK(
          cudaEventRecord(writer_done_, static_cast<cudaStream_t>(order.src->writer_stream)));
      TANDEM_CUDA_CHECK(cudaStreamWaitEvent(src_stream_, writer_done_, 0));
    }
    TANDEM_ASSIGN_OR_RETURN(cudaStream_t last, enqueue(order));
    int last_device = 0;
    TANDEM_CUDA_CHECK(cudaStreamGetDevice(last, &last_device));
    DeviceGuard g2(last_device);
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&entry.done, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventRecord(entry.done, last));
    entry.device = last_device;
  } else if (!fault) {
    entry.state = ShipState::kDone;  // nothing to move
  }
  std::lock_guard lock(mu_);
  const Ticket t = next_++;
  tickets_.emplace(t, entry);
  return t;
}

ShipState GpuTransport::poll_locked(Entry& e) {
  if (e.state != ShipState::kInFlight || e.done == nullptr) return e.state;
  const cudaError_t q = cudaEventQuery(e.done);
  if (q == cudaErrorNotReady) return ShipState::kInFlight;
  TANDEM_CUDA_CHECK(q);  // anything else is a sticky device error: fatal by design
  e.state = ShipState::kDone;
  return e.state;
}

ShipState GpuTransport::poll(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = tickets_.find(ticket);
  return it == tickets_.end() ? ShipState::kFailed : poll_locked(it->second);
}

ShipState GpuTransport::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      std::lock_guard lock(mu_);
      auto it = tickets_.find(ticket);
      if (it == tickets_.end()) return ShipState::kFailed;
      const ShipState s = poll_locked(it->second);
      if (s != ShipState::kInFlight) return s;
      if (std::chrono::steady_clock::now() >= deadline) {
        // The copies may still land later, into pages the engine is about to free; they are
        // the pages this request owned, and a later order to them is queued behind on the same
        // streams, so stale bytes never overwrite a newer transfer.
        it->second.state = ShipState::kFailed;
        it->second.error =
            make_error(ErrorCode::kTimeout, "KV transfer (" + std::string(name()) +
                                                ") did not complete within " +
                                                std::to_string(timeout.count()) + " ms");
        return ShipState::kFailed;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Error GpuTransport::take_error(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return make_error(ErrorCode::kTransport, "unknown transfer ticket");
  Error e = it->second.error;
  if (it->second.done) cudaEventDestroy(it->second.done);
  tickets_.erase(it);
  return e;
}

void GpuTransport::release(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;
  // Destroying an event whose work is pending is allowed: its resources go when it completes.
  if (it->second.done) cudaEventDestroy(it->second.done);
  tickets_.erase(it);
}

}  // namespace tandem
