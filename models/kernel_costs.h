// Kernel costs from measurements: the rates of GEMMs by shape, attention and
// chunked linear-recurrence kernels by sequence length and head dim, and
// intra-node all-reduce bus bandwidth by message size, read from a cluster's
// KernelCosts tables (proto/stateflow.proto) and interpolated in log space
// between the measured points. The cost model (cost_model.h) asks these for
// a rate and falls back to the device's efficiency curve, or the link model,
// when a table has no points for the question.
//
// Not a measurement (the numbers are data with their sources: the A100
// preset's in models/presets/a100-sxm4-80gb-kernels.textproto) and not a
// time: CostModel turns rates into seconds.
//
//   KernelRates rates(cluster.kernel_costs());  // CostModel keeps one
//   std::optional<double> r = rates.Gemm(4096, 5120, 5120, 2);  // FLOP/s
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::models {

// Every point's fields in range (sizes >= 1, rates > 0, known dtype and pass,
// source index within `sources`); the error names the field
// ("cluster.kernel_costs.gemm[2].flops_per_s must be > 0").
Status ValidateKernelCosts(const pb::KernelCosts& costs);

// Linear interpolation of log(y) in log(x) between the points (x_i, y_i)
// sorted by x, clamped to the end values outside them. REQUIRES: x, y > 0,
// at least one point, x strictly increasing.
double LogLogInterpolate(const std::vector<std::pair<double, double>>& points, double x);

class KernelRates {
 public:
  // Copies what the lookups need (logs taken, points sorted) once.
  // REQUIRES: ValidateKernelCosts(costs).ok().
  explicit KernelRates(const pb::KernelCosts& costs);
  KernelRates() = default;  // no points: every lookup is nullopt

  // A GEMM (m x k) (k x n) in activations of `act_bytes` bytes: the points of
  // that dtype class (2: fp16/bf16, 4: fp32/tf32, 8: fp64), Shepard's inverse-distance
  // weighting (power 2) of log(rate) in (log m, log n, log k): exact at a
  // measured shape, a weighted mean between them. nullopt without points of
  // the class.
  std::optional<double> Gemm(double m, double n, double k, double act_bytes) const;

  // An attention kernel's rate at `seq_len` (FLOPs counted as in
  // AttentionPoint) for head dim `head_dim`: the points of the nearest head
  // dim (in log), causal ones if any, of the pass ("forward" or
  // "backward"), else of "forward+backward"; interpolated in seq_len.
  // Points with a dtype time runs of its class only (`act_bytes`, as Gemm;
  // 0: any point), points without one every run.
  std::optional<double> Attention(double seq_len, double head_dim, bool backward,
                                  double act_bytes = 0) const;

  // A recurrence kernel ("gdn", "mamba2", "mamba3"), as Attention.
  std::optional<double> Recurrence(std::string_view kernel, double seq_len, double head_dim,
                                   bool backward, double act_bytes = 0) const;

  // The sorted (seq_len, rate) points that Attention (kernel "") or
  // Recurrence interpolates for (kernel, head_dim, pass), chosen as they
  // describe; empty when there are none. Attention(s, d, b) ==
  // LogLogInterpolate(SeqCurve("", d, b), s) when not empty: a caller asking
  // at many lengths chooses the points once (CostModel does).
  using Curve = std::vector<std::pair<double, double>>;
  Curve SeqCurve(std::string_view kernel, double head_dim, bool backward,
                 double act_bytes = 0) const;

  // All-reduce bus bandwidth at `bytes` per rank: the points of the nearest
  // rank count (in log; the smaller on a tie), interpolated in bytes.
  std::optional<double> AllReduceBusBandwidth(double bytes, int ranks) const;

 private:
  struct GemmLog {
    double log_m, log_n, log_k, log_rate;
    int dtype_class;  // 2, 4 or 8 bytes
    double rate;
  };
  struct SeqPoint {
    std::string kernel;  // "" for attention
    double seq_len, head_dim;
    bool causal;
    std::string pass;
    double rate;
    int dtype_class;  // 0: every dtype
  };
  std::optional<double> SeqRate(std::string_view kernel, double seq_len, double head_dim,
                                bool backward, double act_bytes) const;

  std::vector<GemmLog> gemm_;
  std::vector<SeqPoint> seq_points_;  // attention (kernel "") and recurrence
  // Per rank count: (bytes, bus bandwidth) sorted by bytes.
  std::vector<std::pair<int, std::vector<std::pair<double, double>>>> all_reduce_;
};

}  // namespace stateflow::models
