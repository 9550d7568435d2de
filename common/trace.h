// A Chrome / Perfetto trace writer shared by both executors, so that a
// simulated and a measured timeline have the same track layout and can be
// opened side by side (ui.perfetto.dev or chrome://tracing): one track per
// stage named "stage r", one slice per action named by the action's text form
// (schedule/action.h: "2F5.3" is stage 2's forward of microbatch 5, chunk 3),
// and one memory counter track per stage with the live bytes of each buffer
// class.
//
// Not a profiler: it only formats what it is given.
//
//   TraceWriter trace("simulate stateflow");
//   trace.AddSlice(/*stage=*/0, "0F0.0", "F", /*start_s=*/0.0, /*end_s=*/0.5);
//   Status s = trace.WriteFile("out.json");
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "common/buffer_class.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow {

class TraceWriter {
 public:
  // `process_name` labels the group of stage tracks (e.g. "simulate 1f1b").
  // `pid` tells several groups in one file apart.
  explicit TraceWriter(std::string_view process_name, int pid = 0);

  // Starts a new group of tracks (another process) in the same file. A
  // process that gets no events is not written.
  void BeginProcess(std::string_view process_name, int pid);

  // `category` groups slices in the viewer: an action's pass letter ("F",
  // "B", "W"), or what else the slice is ("optimizer").
  void AddSlice(int stage, std::string_view name, std::string_view category, double start_s,
                double end_s);
  // Live bytes per class on `stage` from time_s on.
  void AddMemory(int stage, double time_s,
                 const std::array<double, kNumBufferClasses>& bytes);

  std::string ToJson() const;
  // Errors name the path.
  Status WriteFile(const std::string& path) const;

 private:
  void NameProcess();
  void NameTrack(int stage);

  pb::Trace trace_;
  int pid_ = 0;
  std::string process_name_;
  bool process_named_ = false;
  std::array<bool, 4096> named_{};  // stage tracks named in this process
};

}  // namespace stateflow
