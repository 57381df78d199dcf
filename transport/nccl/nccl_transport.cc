#include "transport/nccl/nccl_transport.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.cuh"

namespace tandem {
namespace {

// NCCL failures are API failures: fatal, like CUDA's (DESIGN.md, three error channels).
void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  std::fprintf(stderr, "NCCL error %s in %s\n", ncclGetErrorString(r), what);
  std::abort();
}

}  // namespace

NcclTransport::NcclTransport(const KvPoolView& src, const KvPoolView& dst, size_t slot_bytes)
    : StagedTransport(src, dst, slot_bytes) {
  // NVLink SHARP multicast is not wanted for point-to-point and misbehaves in these VMs; a
  // value the user set wins.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const int devs[2] = {src.device, dst.device};
  nccl_check(ncclCommInitAll(comms_, 2, devs), "ncclCommInitAll");
}

NcclTransport::~NcclTransport() {
  cudaStreamSynchronize(src_stream_);
  cudaStreamSynchronize(dst_stream_);
  for (auto c : comms_) {
    if (c) ncclCommDestroy(c);
  }
}

void NcclTransport::move_slot(int slot, size_t bytes) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  nccl_check(ncclSend(src_slot_[slot], bytes, ncclUint8, 1, comms_[0], src_stream_), "ncclSend");
  nccl_check(ncclRecv(dst_slot_[slot], bytes, ncclUint8, 0, comms_[1], dst_stream_), "ncclRecv");
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace tandem
