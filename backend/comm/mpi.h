// The MPI side of the backend: starting and ending MPI, telling whether this
// process was started by mpirun, the MPI implementation of Comm (one rank per
// pipeline stage: rank r is stage r of MPI_COMM_WORLD) and of Group, and
// ending the whole job when one rank fails in the middle of a step.
//
// Messages: MPI_Isend / MPI_Irecv of float (MPI_FLOAT) or double
// (MPI_DOUBLE) elements, tagged by MessageTag (comm.h); the tag range is
// checked against MPI_TAG_UB when the comm is made. MPI errors are returned
// (MPI_ERRORS_RETURN), never fatal inside MPI.
//
// Not a launcher: `mpirun -n P` starts the ranks. Only this header's .cc
// files include <mpi.h>.
//
//   MpiSession session(&argc, &argv);        // MPI_Init ... MPI_Finalize
//   auto comm = MakeMpiComm<double>(/*microbatches=*/4, /*chunks=*/8);
#pragma once

#include <memory>

#include "backend/comm/comm.h"
#include "backend/comm/group.h"
#include "backend/comm/replica_sync.h"
#include "backend/comm/tensor_group.h"
#include "common/status.h"

namespace stateflow::backend {

// Whether the environment says this process is one rank of an MPI job
// (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_RANK of other
// launchers). A process started without mpirun runs single-process and
// never initialises MPI.
bool LaunchedByMpirun();

// MPI_Init_thread (funneled) on construction, MPI_Finalize on destruction,
// with MPI_ERRORS_RETURN on MPI_COMM_WORLD. One per process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Ok, or the MPI error of initialisation.
  const Status& status() const { return status_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks of the job on this node, this one included (MPI_COMM_TYPE_SHARED).
  int ranks_on_node() const { return ranks_on_node_; }

 private:
  Status status_;
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_node_ = 1;
};

// The endpoint of this rank's stage in a job of P x `replicas` ranks (with
// tensor parallelism, `replicas` is D TP: every (replica, tensor rank) pair
// has a pipeline of its own)
// (replica_sync.h: world rank GridRank(r, d, D) = r D + d is stage r of
// data-parallel replica d; with one replica, stage = rank). A replica's
// messages travel on a communicator of its own P ranks. Error: the tags of
// M microbatches, N chunks and v virtual stages do not fit MPI_TAG_UB. REQUIRES: an
// MpiSession is alive; the world's size is a multiple of `replicas`; the
// allocators of the tensors handed to it outlive it.
template <typename T>
Result<std::unique_ptr<Comm<T>>> MakeMpiComm(int microbatches, int chunks, int replicas = 1,
                                             int virtual_stages = 1);

// This rank's replica sync (replica_sync.h): the `replicas` ranks of its
// stage and tensor rank (a job of P x `replicas` x `tensors` ranks, laid out
// as tensor_group.h says), on a communicator of their own. Reductions and broadcasts are
// nonblocking MPI collectives waited on under the watchdog, in pieces of at
// most 2^28 elements (an MPI count is an int). REQUIRES: as MakeMpiComm.
Result<std::unique_ptr<ReplicaSync>> MakeMpiReplicaSync(int replicas, int tensors = 1);

// This rank's tensor group (tensor_group.h): the `tensors` consecutive ranks
// of its stage and replica. REQUIRES: as MakeMpiComm.
Result<std::unique_ptr<TensorGroup>> MakeMpiTensorGroup(int replicas, int tensors);

// The group of MPI_COMM_WORLD. REQUIRES: an MpiSession is alive.
std::unique_ptr<Group> MakeMpiGroup();

// The watchdog (mpi_wait.h): how long a wait of this rank on another -- a
// message or a step collective -- may last before it is an error naming what
// it waited for and the peer. <= 0 or infinite: no limit. Process-wide.
inline constexpr double kDefaultWatchdogSeconds = 600;
void SetMpiWatchdogSeconds(double seconds);
double MpiWatchdogSeconds();

// Ends every rank of the job with exit code `code` (MPI_Abort), for a
// failure that leaves the other ranks blocked in the middle of a step. The
// caller prints its one-line message first. Only the command line calls it.
[[noreturn]] void AbortMpiJob(int code);

}  // namespace stateflow::backend
