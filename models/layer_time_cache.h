// A memo of the cost model's pass times: one layer's forward and backward
// time on one chunk, computed once per (layer kind, chunk start where it
// matters, chunk length) and shared by every configuration simulated from
// the same cost model (a sweep's N and alpha at one sequence length, its
// global batches). A memo: filling it changes no result, bit for bit.
//
// The key: a layer's times depend on it only through its kind (the cost
// model's per-layer functions read the kind's table), and on the chunk's
// start only for the kinds CostModel::TimeDependsOnStart names.
//
//   LayerTimeCache times(cost_model);
//   double f = times.Get(l, c, s).forward_s;  // == cost_model.ForwardTime(l, c, s)
#pragma once

#include <cstdint>
#include <unordered_map>

#include "models/cost_model.h"

namespace stateflow::models {

class LayerTimeCache {
 public:
  explicit LayerTimeCache(const CostModel& cm) : cm_(cm) {}
  LayerTimeCache(const LayerTimeCache&) = delete;
  LayerTimeCache& operator=(const LayerTimeCache&) = delete;

  struct Times {
    double forward_s = 0;   // CostModel::ForwardTime(l, c, s)
    double backward_s = 0;  // CostModel::BackwardTime(l, c, s)
    double weight_s = 0;    // CostModel::WeightGradTime(l, c, s)
  };
  // Layer l's times on the chunk [c, c + s). The reference stays valid as
  // long as the cache.
  const Times& Get(int l, std::int64_t c, std::int64_t s);

  const CostModel& cost_model() const { return cm_; }
  // Distinct (kind, start, length) keys computed so far.
  std::size_t size() const { return times_.size(); }

 private:
  struct Key {
    LayerKind kind = LayerKind::kEmbedding;
    std::int64_t c = 0;  // 0 where the kind's times do not depend on it
    std::int64_t s = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };

  const CostModel cm_;
  std::unordered_map<Key, Times, KeyHash> times_;
};

}  // namespace stateflow::models
