#include "models/layer_time_cache.h"

namespace stateflow::models {

std::size_t LayerTimeCache::KeyHash::operator()(const Key& k) const {
  std::uint64_t h = static_cast<std::uint64_t>(k.s);
  for (std::uint64_t v : {static_cast<std::uint64_t>(k.c), static_cast<std::uint64_t>(k.kind)}) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;  // a multiplicative mix (Fibonacci hashing)
    h ^= h >> 29;
  }
  return static_cast<std::size_t>(h);
}

const LayerTimeCache::Times& LayerTimeCache::Get(int l, std::int64_t c, std::int64_t s) {
  const Key key{cm_.layers()[l], cm_.TimeDependsOnStart(l) ? c : 0, s};
  auto it = times_.find(key);
  if (it == times_.end()) {
    it = times_.emplace(key, Times{cm_.ForwardTime(l, c, s), cm_.BackwardTime(l, c, s),
                                       cm_.WeightGradTime(l, c, s)}).first;
  }
  return it->second;
}

}  // namespace stateflow::models
