// TANDEM_CLONES: compile a hot CPU loop twice, for AVX2 and for the baseline x86-64, and pick the
// copy at load time (GCC function multiversioning). Each copy must give the same bits: the loops
// it marks use no fused multiply-add (the "avx2" target does not enable FMA) and keep their
// order of operations, so the wider vectors only do more lanes at once.
//
// Under ThreadSanitizer, one baseline copy: the clones' ifunc resolver is instrumented but runs
// during relocation, before the sanitizer's runtime exists (every binary crashed at load).
#pragma once

#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define TANDEM_CLONES
#else
#define TANDEM_CLONES __attribute__((target_clones("avx2", "default")))
#endif
