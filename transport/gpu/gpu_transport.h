// What the GPU backends share: a dedicated stream per direction end (one on the source device,
// one on the destination device), the pools' plane tables on the device, tickets completed by
// CUDA events (polled with cudaEventQuery; waits sleep between polls, never spin), ordering after
// the source pool's writer stream, and the fault-injection hook the local backend has.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "kernels/kv_page_copy.cuh"
#include "transport/kv_transport.h"

namespace tandem {

// The planes table of a pool ([num_layers * 2] base pointers, K then V per layer) in the memory
// of `on_device`, where the copy kernel reads it.
class DevicePlanes {
 public:
  DevicePlanes(const KvPoolView& pool, int on_device);
  ~DevicePlanes();
  DevicePlanes(const DevicePlanes&) = delete;
  DevicePlanes& operator=(const DevicePlanes&) = delete;
  kernels::KvPageSide side() const { return {table_, nullptr}; }

 private:
  unsigned char** table_ = nullptr;  // device [num_layers * 2]
};

class GpuTransport : public KvTransport {
 public:
  // Same contract as LocalTransport's: an Error fails the ticket; a kTimeout-coded one leaves
  // it in flight forever (a stuck backend).
  using FaultHook = std::function<std::optional<Error>(const ShipOrder&)>;

  GpuTransport(const KvPoolView& src, const KvPoolView& dst);
  ~GpuTransport() override;

  Result<Ticket> ship(const ShipOrder& order) final;
  ShipState poll(Ticket ticket) final;
  ShipState wait(Ticket ticket, std::chrono::milliseconds timeout) final;
  Error take_error(Ticket ticket) final;
  void release(Ticket ticket) final;

  void set_fault_hook(FaultHook hook) { fault_hook_ = std::move(hook); }

 protected:
  // Enqueues the order's work: it starts on src_stream_ (already ordered after the source
  // pool's writer) and must end on the stream it returns, where the ticket's event goes.
  virtual Result<cudaStream_t> enqueue(const ShipOrder& order) = 0;

  // Launches of at most kMaxPagePairsPerLaunch pairs of order.pages[pair_begin, pair_end).
  static kernels::KvPagePairs pairs_of(const ShipOrder& order, int32_t pair_begin,
                                       int32_t pair_end);
  bool aligned16(const void* staging_a, const void* staging_b) const;

  KvPoolView src_, dst_;
  cudaStream_t src_stream_ = nullptr;  // on src_.device
  cudaStream_t dst_stream_ = nullptr;  // on dst_.device (the same stream when one device)

 private:
  struct Entry {
    ShipState state = ShipState::kInFlight;
    cudaEvent_t done = nullptr;  // null: failed at once, or stuck by injection
    int device = 0;
    Error error;
  };
  ShipState poll_locked(Entry& e);

  cudaEvent_t writer_done_ = nullptr;  // on src_.device; recorded on the writer's stream
  std::mutex mu_;
  std::map<Ticket, Entry> tickets_;
  Ticket next_ = 1;
  FaultHook fault_hook_;
};

}  // namespace tandem
