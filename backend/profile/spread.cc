#include "backend/profile/spread.h"

namespace stateflow::backend {

Spread Summarize(const std::vector<double>& seconds) {
  return Spread{Quantile(seconds, 0.5), Quantile(seconds, 0.1), Quantile(seconds, 0.9)};
}

}  // namespace stateflow::backend
