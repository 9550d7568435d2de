#include "common/quantile.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace stateflow {

double Quantile(std::vector<double> values, double q) {
  assert(!values.empty() && q >= 0 && q <= 1);
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(position));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double w = position - static_cast<double>(lo);
  return values[lo] + w * (values[hi] - values[lo]);
}

}  // namespace stateflow
