// cuBLASLt failures are fatal, like CUDA's (cuda_check.cuh): the call and its status are printed
// and the process aborts. A shape cuBLASLt cannot run is refused at load instead
// (GemmContext / Fp8GemmContext search their algorithms before the first request).
#pragma once

#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>

#define TANDEM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "%s:%d: cuBLASLt error %d in %s\n", __FILE__, __LINE__, int(st_), \
                   #call);                                                                   \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
