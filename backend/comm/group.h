// The step-level collectives of a training job: agreeing on an error,
// sharing the loss, gathering per-stage statistics and timelines to rank 0.
// Two implementations: the solo group of a single process (which runs every
// stage itself; every call is local) and the MPI group (mpi.h), one rank per
// stage.
//
// Not point-to-point pipeline traffic (comm.h). Every call is collective:
// every rank of the group must make it, in the same order.
//
//   std::unique_ptr<Group> group = MakeSoloGroup();
//   SF_ASSIGN_OR_RETURN(double loss, group->Broadcast(local_loss, /*root=*/P - 1));
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"

namespace stateflow::backend {

class Group {
 public:
  virtual ~Group() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank passes its own status and gets back the status of the lowest
  // failing rank (its code and message), or Ok if none failed. So that every
  // rank stops together after a failure that only some of them saw.
  // An error of the Result is the agreement itself failing on this rank (the
  // watchdog, MPI): no other rank need know it.
  struct Agreement {
    Status status;  // every rank's: Ok, or the lowest failing rank's
  };
  virtual Result<Agreement> AgreeOrFail(const Status& local) = 0;
  // AgreeOrFail's agreed status, or its own failure.
  Status Agree(const Status& local) {
    Result<Agreement> agreed = AgreeOrFail(local);
    return agreed.ok() ? agreed->status : agreed.status();
  }

  // Every rank gets `value` as passed by `root`. REQUIRES: 0 <= root < size().
  virtual Result<double> Broadcast(double value, int root) = 0;

  // Every rank gets the sum of every rank's `value` (the step's loss: the
  // last stage of each data-parallel replica passes its share, every other
  // rank 0).
  virtual Result<double> Sum(double value) = 0;
  // Rank 0 gets every rank's `local` (any lengths), indexed by rank; the
  // other ranks get an empty vector.
  virtual Result<std::vector<std::vector<double>>> GatherToRoot(
      const std::vector<double>& local) = 0;

  virtual Status Barrier() = 0;
};

// The group of one process: rank 0 of size 1.
std::unique_ptr<Group> MakeSoloGroup();

}  // namespace stateflow::backend
