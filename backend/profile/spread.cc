#include "backend/profile/spread.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace stateflow::backend {

double Quantile(std::vector<double> values, double q) {
  assert(!values.empty() && q >= 0 && q <= 1);
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(position));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double w = position - static_cast<double>(lo);
  return values[lo] + w * (values[hi] - values[lo]);
}

Spread Summarize(const std::vector<double>& seconds) {
  return Spread{Quantile(seconds, 0.5), Quantile(seconds, 0.1), Quantile(seconds, 0.9)};
}

}  // namespace stateflow::backend
