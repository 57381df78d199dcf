// Pearson's chi-square statistic for the sampling distribution tests.
#pragma once

#include <cstdint>
#include <span>

namespace tandem::testing {

// sum over i of (observed_i - n p_i)^2 / (n p_i), n = sum of observed; categories with p_i == 0
// must have no observations (checked by the caller) and are skipped.
double chi_square(std::span<const int64_t> observed, std::span<const double> expected_probs);

// Two-sample test that a and b come from one distribution (a 2 x n contingency table, n - 1
// degrees of freedom); categories empty in both are skipped.
double chi_square_two_sample(std::span<const int64_t> a, std::span<const int64_t> b);

// Upper 0.1 % point of the chi-square distribution with 7 degrees of freedom (8 categories): a
// correct sampler exceeds it once in a thousand seeds; the fixed seeds below make each run the
// same.
constexpr double kChiSquare7Dof999 = 24.32;

}  // namespace tandem::testing
