// The q-quantile of a list of numbers, interpolating linearly between order
// statistics: the q-quantile of n sorted values x_0..x_{n-1} is x at
// position q (n - 1) (Hyndman and Fan's type 7, numpy's default), so one
// value is its own median, and the median of an even count is the mean of
// the two middle values.
//
// Shared by the profiler (medians of repetitions) and validation (medians of
// steps, runs and errors). Not a statistics library.
//
//   double m = Quantile({3, 1, 2}, 0.5);   // 2
#pragma once

#include <vector>

namespace stateflow {

// REQUIRES: values non-empty, 0 <= q <= 1.
double Quantile(std::vector<double> values, double q);

}  // namespace stateflow
