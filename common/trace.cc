#include "common/trace.h"

#include <fstream>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "common/files.h"

namespace stateflow {
namespace {

constexpr double kMicrosPerSecond = 1e6;

}  // namespace

TraceWriter::TraceWriter(std::string_view process_name, int pid) {
  trace_.set_display_time_unit("ms");
  BeginProcess(process_name, pid);
}

void TraceWriter::BeginProcess(std::string_view process_name, int pid) {
  // Named lazily, on its first event, so that a process begun and renamed
  // before anything was added is named once.
  pid_ = pid;
  named_.fill(false);
  process_name_ = std::string(process_name);
  process_named_ = false;
}

void TraceWriter::NameProcess() {
  if (process_named_) return;
  process_named_ = true;
  pb::TraceEvent* e = trace_.add_trace_events();
  e->set_name("process_name");
  e->set_ph("M");
  e->set_pid(pid_);
  (*e->mutable_args()->mutable_fields())["name"].set_string_value(process_name_);
}

void TraceWriter::NameTrack(int stage) {
  NameProcess();
  if (stage < 0 || static_cast<std::size_t>(stage) >= named_.size() || named_[stage]) return;
  named_[stage] = true;
  pb::TraceEvent* e = trace_.add_trace_events();
  e->set_name("thread_name");
  e->set_ph("M");
  e->set_pid(pid_);
  e->set_tid(stage);
  (*e->mutable_args()->mutable_fields())["name"].set_string_value("stage " +
                                                                  std::to_string(stage));
  pb::TraceEvent* order = trace_.add_trace_events();
  order->set_name("thread_sort_index");
  order->set_ph("M");
  order->set_pid(pid_);
  order->set_tid(stage);
  (*order->mutable_args()->mutable_fields())["sort_index"].set_number_value(stage);
}

void TraceWriter::AddSlice(int stage, std::string_view name, std::string_view category,
                           double start_s, double end_s) {
  NameTrack(stage);
  pb::TraceEvent* e = trace_.add_trace_events();
  e->set_name(std::string(name));
  e->set_cat(std::string(category));
  e->set_ph("X");
  e->set_ts(start_s * kMicrosPerSecond);
  e->set_dur((end_s - start_s) * kMicrosPerSecond);
  e->set_pid(pid_);
  e->set_tid(stage);
}

void TraceWriter::AddMemory(int stage, double time_s,
                            const std::array<double, kNumBufferClasses>& bytes) {
  NameTrack(stage);
  pb::TraceEvent* e = trace_.add_trace_events();
  e->set_name("memory stage " + std::to_string(stage));
  e->set_ph("C");
  e->set_ts(time_s * kMicrosPerSecond);
  e->set_pid(pid_);
  e->set_tid(stage);
  auto& fields = *e->mutable_args()->mutable_fields();
  for (int c = 0; c < kNumBufferClasses; ++c) {
    fields[std::string(kBufferClassNames[c])].set_number_value(bytes[c]);
  }
}

std::string TraceWriter::ToJson() const {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(trace_, &out, options);
  return out;
}

Status TraceWriter::WriteFile(const std::string& path) const {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(trace_, &out, options).ok()) {
    return Status::Internal("trace " + path + ": the trace does not print as JSON");
  }
  // Read back before it is written (issue 31: written files mean what they
  // say): the JSON parses to the same trace.
  pb::Trace back;
  if (!google::protobuf::util::JsonStringToMessage(out, &back).ok() ||
      !google::protobuf::util::MessageDifferencer::Equals(back, trace_)) {
    return Status::Internal("trace " + path + ": the JSON does not read back as the trace");
  }
  return stateflow::WriteFile(path, out + "\n").WithPrefix("trace");
}

}  // namespace stateflow
