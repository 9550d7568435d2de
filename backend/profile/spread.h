// The summary the profiler keeps of repeated timings: the median and the
// 10th and 90th percentiles (the spread), as a CostSample stores them.
//
// Percentiles interpolate linearly between order statistics: the q-th
// percentile of n sorted values x_0..x_{n-1} is x at position q (n - 1)
// (Hyndman and Fan's type 7, numpy's default), so one value is its own
// median, p10 and p90.
//
// Not a statistics library: no means, no outlier rejection.
//
//   Spread s = Summarize({0.011, 0.010, 0.013});   // s.median_s == 0.011
#pragma once

#include <vector>

#include "common/quantile.h"

namespace stateflow::backend {

struct Spread {
  double median_s = 0;
  double p10_s = 0;
  double p90_s = 0;
};

// The q-quantile (common/quantile.h), shared with validation.
using ::stateflow::Quantile;

// REQUIRES: seconds non-empty.
Spread Summarize(const std::vector<double>& seconds);

}  // namespace stateflow::backend
