#include "backend/profile/link_timer.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>

#include "backend/allocator.h"
#include "backend/comm/in_process_comm.h"
#include "backend/comm/mpi.h"
#include "backend/comm/tensor_group.h"
#include "backend/profile/spread.h"

namespace stateflow::backend {
namespace {

using schedule::Pass;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Message keys: repetition k of size j is microbatch k, chunk j; the
// activation (F) goes 0 -> 1, the gradient (B) comes back 1 -> 0.
MessageKey Key(int repetition, int size_index, Pass pass) {
  return MessageKey{repetition, size_index, pass};
}

template <typename T>
Result<Tensor<T>> Buffer(TrackingAllocator& alloc, std::int64_t elements) {
  return Tensor<T>::Zeros(alloc, BufferClass::kWorkspace, {elements});
}

// Stage 0's side of one round trip: seconds from the send to the reply.
template <typename T>
Result<double> RoundTrip(Comm<T>& comm, TrackingAllocator& alloc, std::int64_t elements,
                         int repetition, int size_index) {
  SF_ASSIGN_OR_RETURN(Tensor<T> reply, Buffer<T>(alloc, elements));
  SF_RETURN_IF_ERROR(
      comm.PostRecv(1, Key(repetition, size_index, Pass::kBackward), std::move(reply)));
  SF_ASSIGN_OR_RETURN(Tensor<T> data, Buffer<T>(alloc, elements));
  const double start = Now();
  SF_RETURN_IF_ERROR(comm.Send(1, Key(repetition, size_index, Pass::kForward), std::move(data)));
  SF_ASSIGN_OR_RETURN(Tensor<T> back, comm.Wait(Key(repetition, size_index, Pass::kBackward)));
  const double end = Now();
  SF_RETURN_IF_ERROR(comm.Flush());
  return end - start;
}

// Stage 1's side: receive and send the same buffer back.
template <typename T>
Status Echo(Comm<T>& comm, TrackingAllocator& alloc, std::int64_t elements, int repetition,
            int size_index) {
  SF_ASSIGN_OR_RETURN(Tensor<T> buffer, Buffer<T>(alloc, elements));
  SF_RETURN_IF_ERROR(
      comm.PostRecv(0, Key(repetition, size_index, Pass::kForward), std::move(buffer)));
  SF_ASSIGN_OR_RETURN(Tensor<T> got, comm.Wait(Key(repetition, size_index, Pass::kForward)));
  SF_RETURN_IF_ERROR(comm.Send(0, Key(repetition, size_index, Pass::kBackward), std::move(got)));
  return comm.Flush();
}

pb::LinkSample Sample(std::int64_t bytes, const std::vector<double>& round_trips) {
  pb::LinkSample s;
  s.set_bytes(static_cast<double>(bytes));
  s.set_median_s(Quantile(round_trips, 0.5) / 2);
  s.set_repetitions(static_cast<std::uint32_t>(round_trips.size()));
  return s;
}

Status CheckElements(const std::vector<std::int64_t>& elements, const TimingOptions& options) {
  if (elements.empty()) return Status::Invalid("link: no message sizes to time");
  for (std::int64_t e : elements) {
    if (e < 1) return Status::Invalid("link: a message must have >= 1 elements");
  }
  if (options.repetitions < 1) return Status::Invalid("--repetitions must be >= 1");
  if (options.warmup < 0) return Status::Invalid("--warmup must be >= 0");
  return Status::Ok();
}

}  // namespace

template <typename T>
Result<std::vector<pb::LinkSample>> PingPongMpi(const std::vector<std::int64_t>& elements,
                                                const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckElements(elements, options));
  std::unique_ptr<Group> group = MakeMpiGroup();
  if (group->size() < 2) return Status::Invalid("link: the MPI job has one rank; need two");
  if (group->rank() > 1) return std::vector<pb::LinkSample>{};
  const int reps = options.warmup + options.repetitions;
  SF_ASSIGN_OR_RETURN(std::unique_ptr<Comm<T>> comm,
                      MakeMpiComm<T>(reps, static_cast<int>(elements.size())));
  TrackingAllocator alloc(group->rank());
  std::vector<pb::LinkSample> samples;
  for (std::size_t j = 0; j < elements.size(); ++j) {
    std::vector<double> round_trips;
    for (int k = 0; k < reps; ++k) {
      if (group->rank() == 1) {
        SF_RETURN_IF_ERROR(Echo(*comm, alloc, elements[j], k, static_cast<int>(j)));
        continue;
      }
      SF_ASSIGN_OR_RETURN(double t, RoundTrip(*comm, alloc, elements[j], k, static_cast<int>(j)));
      if (k >= options.warmup) round_trips.push_back(t);
    }
    if (group->rank() == 0) samples.push_back(Sample(elements[j] * sizeof(T), round_trips));
  }
  return samples;
}

template <typename T>
Result<std::vector<pb::LinkSample>> PingPongInProcess(const std::vector<std::int64_t>& elements,
                                                      const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckElements(elements, options));
  // Declared first so that the endpoints (which may hold its tensors) go first.
  TrackingAllocator alloc(0);
  std::vector<std::unique_ptr<Comm<T>>> comms = MakeInProcessComms<T>(2);
  std::vector<pb::LinkSample> samples;
  for (std::size_t j = 0; j < elements.size(); ++j) {
    const int size_index = static_cast<int>(j);
    std::vector<double> round_trips;
    for (int k = 0; k < options.warmup + options.repetitions; ++k) {
      const auto key = [&](Pass p) { return Key(k, size_index, p); };
      SF_ASSIGN_OR_RETURN(Tensor<T> in1, Buffer<T>(alloc, elements[j]));
      SF_ASSIGN_OR_RETURN(Tensor<T> in0, Buffer<T>(alloc, elements[j]));
      SF_ASSIGN_OR_RETURN(Tensor<T> data, Buffer<T>(alloc, elements[j]));
      SF_RETURN_IF_ERROR(comms[1]->PostRecv(0, key(Pass::kForward), std::move(in1)));
      SF_RETURN_IF_ERROR(comms[0]->PostRecv(1, key(Pass::kBackward), std::move(in0)));
      const double start = Now();
      SF_RETURN_IF_ERROR(comms[0]->Send(1, key(Pass::kForward), std::move(data)));
      SF_ASSIGN_OR_RETURN(Tensor<T> got, comms[1]->Wait(key(Pass::kForward)));
      SF_RETURN_IF_ERROR(comms[1]->Send(0, key(Pass::kBackward), std::move(got)));
      SF_ASSIGN_OR_RETURN(Tensor<T> back, comms[0]->Wait(key(Pass::kBackward)));
      const double end = Now();
      for (auto& comm : comms) SF_RETURN_IF_ERROR(comm->Flush());
      if (k >= options.warmup) round_trips.push_back(end - start);
    }
    samples.push_back(Sample(elements[j] * sizeof(T), round_trips));
  }
  return samples;
}

Result<pb::LinkSpec> FitLink(const std::vector<pb::LinkSample>& samples) {
  if (samples.empty()) return Status::Invalid("link: no samples to fit");
  double sx = 0, sy = 0, sxx = 0, sxy = 0, max_bytes = 0;
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const double x = samples[k].bytes(), y = samples[k].median_s();
    if (!(y >= 0) || !std::isfinite(y) || !(x >= 0) || !std::isfinite(x)) {
      return Status::Invalid("link_samples[" + std::to_string(k) +
                             "]: bytes and median_s must be finite and >= 0");
    }
    sx += x, sy += y, sxx += x * x, sxy += x * y;
    max_bytes = std::max(max_bytes, x);
  }
  const double n = static_cast<double>(samples.size());
  const double det = n * sxx - sx * sx;
  double slope = det > 0 ? (n * sxy - sx * sy) / det : 0;
  double intercept = det > 0 ? (sy - slope * sx) / n : sy / n;
  if (intercept < 0 && sxx > 0) {  // refit through the origin
    intercept = 0;
    slope = sxy / sxx;
  }
  pb::LinkSpec link;
  if (!(slope > 0)) {
    intercept = sy / n;
    slope = intercept > 0 && max_bytes > 0 ? 0.01 * intercept / max_bytes : 1e-12;
  }
  link.set_latency_s(intercept);
  link.set_bandwidth_bytes_per_s(1.0 / slope);
  return link;
}

template <typename T>
Result<std::vector<pb::LinkSample>> TimeTensorSumsMpi(const std::vector<std::int64_t>& elements,
                                                      const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckElements(elements, options));
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size < 2) return Status::Invalid("tensor sums: the MPI job has one rank; need two");
  SF_ASSIGN_OR_RETURN(std::unique_ptr<TensorGroup> group, MakeMpiTensorGroup(1, size));
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // bf16: in float
  std::vector<pb::LinkSample> samples;
  for (std::int64_t n : elements) {
    std::vector<S> data(static_cast<std::size_t>(n), S(1));
    std::vector<double> times;
    for (int k = 0; k < options.warmup + options.repetitions; ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      SF_RETURN_IF_ERROR(group->AllReduceSum(data.data(), n));
      const double t = MPI_Wtime() - start;
      if (k >= options.warmup) times.push_back(t);
      std::fill(data.begin(), data.end(), S(1));
    }
    if (rank == 0) {
      pb::LinkSample s;
      s.set_bytes(static_cast<double>(n * static_cast<std::int64_t>(sizeof(S))));
      s.set_median_s(Quantile(times, 0.5));
      s.set_repetitions(static_cast<std::uint32_t>(times.size()));
      samples.push_back(s);
    }
  }
  return samples;
}

Result<pb::LinkSpec> FitAllReduceLink(const std::vector<pb::LinkSample>& samples, int ranks) {
  if (ranks < 2) return Status::Invalid("tensor sums: an all-reduce needs 2 or more ranks");
  SF_ASSIGN_OR_RETURN(pb::LinkSpec t, FitLink(samples));  // t = a + bytes / B
  const double n = ranks;
  pb::LinkSpec link;
  link.set_latency_s(t.latency_s() / (2 * (n - 1)));
  link.set_bandwidth_bytes_per_s(t.bandwidth_bytes_per_s() * 2 * (n - 1) / n);
  return link;
}

template Result<std::vector<pb::LinkSample>> TimeTensorSumsMpi<float>(
    const std::vector<std::int64_t>&, const TimingOptions&);
template Result<std::vector<pb::LinkSample>> TimeTensorSumsMpi<double>(
    const std::vector<std::int64_t>&, const TimingOptions&);
template Result<std::vector<pb::LinkSample>> TimeTensorSumsMpi<bf16>(
    const std::vector<std::int64_t>&, const TimingOptions&);

template Result<std::vector<pb::LinkSample>> PingPongMpi<float>(const std::vector<std::int64_t>&,
                                                                const TimingOptions&);
template Result<std::vector<pb::LinkSample>> PingPongMpi<double>(const std::vector<std::int64_t>&,
                                                                 const TimingOptions&);
template Result<std::vector<pb::LinkSample>> PingPongInProcess<float>(
    const std::vector<std::int64_t>&, const TimingOptions&);
template Result<std::vector<pb::LinkSample>> PingPongInProcess<double>(
    const std::vector<std::int64_t>&, const TimingOptions&);
template Result<std::vector<pb::LinkSample>> PingPongMpi<bf16>(const std::vector<std::int64_t>&,
                                                               const TimingOptions&);
template Result<std::vector<pb::LinkSample>> PingPongInProcess<bf16>(
    const std::vector<std::int64_t>&, const TimingOptions&);

}  // namespace stateflow::backend
