// Timing the point-to-point link between two pipeline stages with the
// backend's own Comm (comm.h), the calls the stage runtime makes: a
// ping-pong of messages of a few sizes between stage 0 and stage 1, either
// two MPI ranks (MakeMpiComm: what `mpirun -n P stateflow train` uses) or the
// in-process comm (what one process running every stage uses). One-way time
// = round trip / 2. Then the link model latency + bytes / bandwidth fitted to
// the medians by least squares.
//
// Not a launcher (launch.h starts the MPI job) and not a bandwidth benchmark
// of MPI itself: sizes are the activations a scenario sends.
//
//   SF_ASSIGN_OR_RETURN(auto samples, PingPongInProcess<float>({64, 4096}, {.repetitions = 20}));
//   SF_ASSIGN_OR_RETURN(pb::LinkSpec link, FitLink(samples));
#pragma once

#include <cstdint>
#include <vector>

#include "backend/profile/layer_timer.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// Ping-pong between MPI ranks 0 and 1 of MPI_COMM_WORLD (other ranks only
// return), `elements` elements of T per message size. Rank 0 gets the
// samples, rank 1 an empty list. Collective over ranks 0 and 1.
// REQUIRES: an MpiSession is alive with at least 2 ranks.
template <typename T>
Result<std::vector<pb::LinkSample>> PingPongMpi(const std::vector<std::int64_t>& elements,
                                                const TimingOptions& options);

// The same between two in-process endpoints driven by this thread.
template <typename T>
Result<std::vector<pb::LinkSample>> PingPongInProcess(const std::vector<std::int64_t>& elements,
                                                      const TimingOptions& options);

// latency_s + bytes / bandwidth_bytes_per_s fitted to the samples' medians
// by least squares. A negative intercept is refitted through the origin
// (latency 0); a slope <= 0 (no measurable size dependence) gives the mean
// time as latency and the bandwidth that moves the largest sample in 1 % of
// it. Error: no samples, or a sample with a negative or non-finite time.
Result<pb::LinkSpec> FitLink(const std::vector<pb::LinkSample>& samples);

// The backend's tensor-parallel sum (tensor_group.h: MakeMpiTensorGroup over
// every rank of the MPI job) of `elements` elements per size, each call
// started after a barrier and timed on rank 0 to its end; bf16 sums in float
// as the layers do (TpAllReduceSum). Rank 0 gets the samples (each size's
// median call), the others an empty list. Collective over MPI_COMM_WORLD.
// REQUIRES: an MpiSession is alive with at least 2 ranks.
template <typename T>
Result<std::vector<pb::LinkSample>> TimeTensorSumsMpi(const std::vector<std::int64_t>& elements,
                                                      const TimingOptions& options);

// The link on which models::RingAllReduceTime over `ranks` ranks takes what
// the samples took: FitLink's t = a + b bytes read as
// 2 (ranks - 1) latency + 2 (ranks - 1) / ranks bytes / bandwidth.
// Errors: FitLink's; ranks < 2.
Result<pb::LinkSpec> FitAllReduceLink(const std::vector<pb::LinkSample>& samples, int ranks);

}  // namespace stateflow::backend
