// The command-line side of sweeps, shared by `stateflow sweep` and
// `stateflow plan`: the list flags that override a SweepSpec's ranges
// (--chunks-list 2,4,8 ...), and a progress bar on stderr.
//
// Not the sweep itself (sim/search.h) and not its output (sweep_format.h).
//
//   SweepFlags flags;  AddSweepOptions(&desc, &flags);  ... parse ...
//   Status s = ApplySweepFlags(flags, scenario.mutable_sweep());
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::tools {

// Each is the raw text of a comma-separated list flag, unset when the flag
// was not given (an empty string given explicitly is an error).
struct SweepFlags {
  std::optional<std::string> chunks;
  std::optional<std::string> alpha;
  std::optional<std::string> seq_len;
  std::optional<std::string> global_batch;
  std::optional<std::string> microbatches;
  std::optional<std::string> policies;
  std::optional<std::string> st_overlap;  // "on,off"
  std::optional<std::string> st_tile;     // "16,32,64"
  std::optional<std::string> virtual_stages;  // "1,2,4" (policy interleaved)
};

// Adds --chunks-list, --alpha-list, --policies, --st-overlap-list,
// --st-tile-list and --virtual-stages-list; with `batches_and_lengths`
// also --seq-len-list, --global-batch-list and --microbatches-list.
void AddSweepOptions(boost::program_options::options_description* desc, SweepFlags* flags,
                     bool batches_and_lengths = true);

// Replaces each range of `sweep` whose flag was given. Errors name the flag:
// "--alpha-list is empty", "--chunks-list: 'x' is not a whole number",
// "--st-overlap-list: 'yes' is not on or off".
// Values are checked by sim::ValidateSweep, which names "sweep.alpha[3]".
Status ApplySweepFlags(const SweepFlags& flags, pb::SweepSpec* sweep);

// "[#######.......]  1234/4320 configurations" on stderr, redrawn at most
// ten times a second, only once the run has lasted a second and only if
// stderr is a terminal; the line is erased when done. Not copyable.
// The items of "a,b,c", each trimmed; errors name --flag (empty text, an
// empty item).
Result<std::vector<std::string>> ListItems(const std::string& flag, const std::string& text);

class ProgressBar {
 public:
  explicit ProgressBar(std::string what);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Update(std::size_t done, std::size_t total);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  bool terminal_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace stateflow::tools
