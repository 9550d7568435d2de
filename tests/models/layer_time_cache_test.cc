// LayerTimeCache: the memo gives the cost model's own pass times, bit for
// bit, for every model preset, cluster and option that changes a time; and
// the premise of its key, that only the kinds TimeDependsOnStart names
// depend on the chunk's start.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "models/layer_time_cache.h"
#include "models/model.h"

namespace stateflow::models {
namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Options {
  int tp = 1, cp = 1;
  Recompute recompute = Recompute::kNone;
  bool st_overlap = false;
};

CostModel Make(const std::string& model, const std::string& cluster, const Options& o) {
  CostModelOptions options;
  options.tensor_size = o.tp;
  options.context_size = o.cp;
  options.recompute = o.recompute;
  options.st_overlap = o.st_overlap;
  Result<CostModel> cm = CostModel::Make(*ModelPreset(model), {}, *ClusterPreset(cluster), options);
  EXPECT_TRUE(cm.ok()) << model << " on " << cluster << ": " << cm.status().message();
  return *std::move(cm);
}

// Chunks [c, c + s) at starts and lengths a sweep meets (powers of two and
// not, the sequence's start and deep into it).
constexpr std::int64_t kStarts[] = {0, 1, 4096, 12288, 65536, 200000};
constexpr std::int64_t kLengths[] = {1, 128, 1000, 4096, 16384, 65536};

TEST(LayerTimeCache, OnlyTheKindsItNamesDependOnTheChunksStart) {
  int attention_layers_seen = 0;
  for (const char* model : {"gdn-hybrid-3b", "mamba3-hybrid-3b", "kda-hybrid-3b", "gdn-3b"}) {
    for (const Options& o : {Options{}, Options{.cp = 2, .recompute = Recompute::kFull},
                             Options{.cp = 4, .st_overlap = true}}) {
      const CostModel cm = Make(model, "a100-80gb-nvlink", o);
      for (int l = 0; l < cm.num_layers(); ++l) {
        for (std::int64_t s : kLengths) {
          if (s < o.cp) continue;
          bool differs = false;
          for (std::int64_t c : kStarts) {
            const bool same = SameBits(cm.ForwardTime(l, c, s), cm.ForwardTime(l, 0, s)) &&
                              SameBits(cm.BackwardTime(l, c, s), cm.BackwardTime(l, 0, s));
            differs = differs || !same;
            if (!cm.TimeDependsOnStart(l)) {
              EXPECT_TRUE(same) << model << " layer " << l << " c=" << c << " s=" << s;
            }
          }
          if (cm.TimeDependsOnStart(l)) {
            EXPECT_TRUE(differs) << model << " layer " << l << " s=" << s
                                 << ": named as depending on the start, but does not";
            ++attention_layers_seen;
          }
        }
      }
    }
  }
  EXPECT_GT(attention_layers_seen, 0);
}

TEST(LayerTimeCache, GivesTheCostModelsTimesBitForBit) {
  // TP 4 where the model's K/V heads divide by it (the 15B).
  for (const char* model : {"gdn-hybrid-3b", "mamba3-hybrid-15b", "kda-hybrid-3b"}) {
    const int tp = std::string(model).ends_with("15b") ? 4 : 1;
    for (const char* cluster : {"a100-80gb-nvlink", "h100-80gb-nvlink"}) {
      for (const Options& o : {Options{}, Options{.tp = tp, .recompute = Recompute::kFull},
                               Options{.tp = tp, .cp = 2, .st_overlap = true}}) {
        const CostModel cm = Make(model, cluster, o);
        LayerTimeCache cache(cm);
        // Twice: the first pass fills the memo, the second reads it.
        for (int round = 0; round < 2; ++round) {
          for (int l = 0; l < cm.num_layers(); ++l) {
            for (std::int64_t c : kStarts) {
              for (std::int64_t s : kLengths) {
                if (s < o.cp) continue;
                const LayerTimeCache::Times& t = cache.Get(l, c, s);
                EXPECT_TRUE(SameBits(t.forward_s, cm.ForwardTime(l, c, s)))
                    << model << " " << cluster << " layer " << l << " c=" << c << " s=" << s;
                EXPECT_TRUE(SameBits(t.backward_s, cm.BackwardTime(l, c, s)))
                    << model << " " << cluster << " layer " << l << " c=" << c << " s=" << s;
              }
            }
          }
        }
        // At most one entry per (kind, start, length), starts only for attention.
        EXPECT_LE(cache.size(), std::size(kStarts) * std::size(kLengths) + 3 * std::size(kLengths));
      }
    }
  }
}

}  // namespace
}  // namespace stateflow::models
