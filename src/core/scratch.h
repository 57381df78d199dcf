// Per-thread scratch vectors for the vocabulary-sized rows that sampling and speculative
// acceptance need at every step. A fresh 150k-entry vector per row is a fresh mapping, with a
// page fault per 4 KB at first touch (and under MALLOC_PERTURB_ a fill at allocation and at
// release); a reused one costs only the initialisation the caller asks for.
#pragma once

#include <cstddef>
#include <vector>

namespace tandem {

// The calling thread's vector for `Tag`, holding n copies of `value` (capacity kept between
// calls). Each use that can be live at the same time as another needs its own Tag; the result is
// valid until the same thread asks for the same Tag again.
template <typename Tag, typename T>
std::vector<T>& thread_scratch(size_t n, T value) {
  thread_local std::vector<T> v;
  v.assign(n, value);
  return v;
}

}  // namespace tandem
