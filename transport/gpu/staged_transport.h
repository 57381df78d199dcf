// The staged pipeline that peer (without P2P), host_staged and nccl share: per piece (a layer
// group over a run of pages, see ship_pieces.h) a gather kernel packs the source pages into a
// contiguous slot on the source device, the backend moves the slot to a slot on the destination
// device (move_slot), and a scatter kernel unpacks it into the destination pages. Two slots per
// side, so piece i+1's gather and move overlap piece i's move and scatter; a slot is reused only
// after the scatter that read it (an event per slot).
#pragma once

#include <vector>

#include "transport/gpu/gpu_transport.h"

namespace tandem {

class StagedTransport : public GpuTransport {
 public:
  // slot_bytes: the staging size of one piece on each side.
  StagedTransport(const KvPoolView& src, const KvPoolView& dst, size_t slot_bytes);
  ~StagedTransport() override;

 protected:
  Result<cudaStream_t> enqueue(const ShipOrder& order) override;
  // Moves bytes from src_slot_[slot] to dst_slot_[slot]: starts after the gather on
  // src_stream_, must leave the scatter ordered on dst_stream_ after it.
  virtual void move_slot(int slot, size_t bytes) = 0;

  static constexpr int kSlots = 2;
  size_t slot_bytes_ = 0;
  unsigned char* src_slot_[kSlots] = {};  // [slot_bytes] on src_.device
  unsigned char* dst_slot_[kSlots] = {};  // [slot_bytes] on dst_.device
  cudaEvent_t moved_[kSlots] = {};        // on src_.device: the slot left the source side
  cudaEvent_t scattered_[kSlots] = {};    // on dst_.device: the slot may be refilled

 private:
  DevicePlanes src_planes_;  // on src_.device
  DevicePlanes dst_planes_;  // on dst_.device
  bool aligned_ = false;
  int next_slot_ = 0;
};

}  // namespace tandem
