// The program mpi_test.cc starts under mpirun: trains a small configuration
// with the toy module (toy_stage_module.h) or the Gated DeltaNet module, one
// rank per stage, and writes what the test compares with one process: rank 0
// writes the per-step losses, every rank its stage's parameters, to
// "<out>.rank<r>" as text ("loss <step> <value>", "param <name> <n> <v>...",
// values with 17 significant digits).
//
//   mpirun -n 2 sf_backend_mpi_worker module=toy stages=2 microbatches=3
//       chunks=4 seq_len=24 policy=stateflow steps=2 out=/tmp/run   (one line)
// replicas=D (mpirun -n P D) and distributed=1 run data parallelism.
// tensors=TP (mpirun -n P D TP) runs tensor parallelism on the preset
// model=NAME (heads=H, attn_heads=A and gqa=G override its fields); every
// rank then writes its parameters' parts and last gradients with their
// split dimension and shape: "part <kind> <name> <split_dim> <rank> <dims...>
// <n> <values...>", kind "param" or "grad", and its tensor rank and stage in
// a "where <stage> <tensor_rank>" line, then its memory in the last step:
// "memory <peak total> <each class at the peak...> <each class's peak...>".
// recompute=none|full and device=cpu|host-grid as the scenario's.
// Exit code 0 on success, 1 with a message on stderr otherwise.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "backend/comm/mpi.h"
#include "backend/model/model_stage_module.h"
#include "backend/train/trainer.h"
#include "tests/backend/train_test_util.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend::testing {

using ::stateflow::testing::MustResolve;
namespace {

using Args = std::map<std::string, std::string>;

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    const auto eq = a.find('=');
    if (eq != std::string::npos) args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return args;
}

int Int(const Args& args, const std::string& key, int fallback) {
  auto it = args.find(key);
  return it == args.end() ? fallback : std::stoi(it->second);
}

StageModuleFactory<double> Factory(const Args& args, const TrainSetup& setup, TpShard tp) {
  if ((args.count("module") && args.at("module") == "gdn") || args.count("model")) {
    return [&setup, tp](int, const models::StageLayers& layers, TrackingAllocator* alloc) {
      return MakeStageModule<double>(setup.model, layers,
                                     {.recompute = setup.recompute,
                                      .seed = 11,
                                      .tp = tp,
                                      .split_backward = schedule::SplitsBackward(setup.plan)},
                                     alloc);
    };
  }
  return ToyFactory<double>(setup, 11);
}

void WritePart(std::ofstream& file, const char* kind, const ParamRef<double>& p, bool grad) {
  const Tensor<double>& t = grad ? *p.grad : *p.value;
  file << "part " << kind << " " << p.name << " " << p.tp_split_dim << " " << t.rank();
  for (int k = 0; k < t.rank(); ++k) file << " " << t.dim(k);
  file << " " << t.numel();
  char buf[64];
  for (std::int64_t e = 0; e < t.numel(); ++e) {
    std::snprintf(buf, sizeof(buf), " %.17g", t.data()[e]);
    file << buf;
  }
  file << "\n";
}

void WriteResults(Trainer<double>& trainer, const TrainRun& run, const std::string& out,
                  int tensor_rank) {
  std::ofstream file(out + ".rank" + std::to_string(trainer.rank()));
  char buf[64];
  for (const StepResult& s : run.steps) {
    if (trainer.rank() != 0) break;
    std::snprintf(buf, sizeof(buf), "%.17g", s.loss);
    file << "loss " << s.step << " " << buf << "\n";
  }
  if (tensor_rank >= 0) {
    for (int k = 0; k < trainer.num_local_stages(); ++k) {
      // The stage (rank) of the module's model stage: with virtual stages a
      // rank's modules share its memory.
      file << "where " << trainer.setup().plan.RankOf(trainer.local_stage(k)) << " "
           << tensor_rank << "\n";
      const MemoryStats m = trainer.local_memory(k);
      file << "memory " << m.peak_total_bytes;
      for (int c = 0; c < kNumBufferClasses; ++c) file << " " << m.at_total_peak_bytes[c];
      for (int c = 0; c < kNumBufferClasses; ++c) file << " " << m.peak_bytes[c];
      file << "\n";
      for (const ParamRef<double>& p : trainer.module(k).Parameters()) {
        WritePart(file, "param", p, false);
        WritePart(file, "grad", p, true);
      }
    }
    return;
  }
  for (const auto& [name, values] : CollectAll(trainer, /*grads=*/false)) {
    file << "param " << name << " " << values.size();
    for (double v : values) {
      std::snprintf(buf, sizeof(buf), " %.17g", v);
      file << buf;
    }
    file << "\n";
  }
}

int Run(const Args& args) {
  const ToyShape shape{Int(args, "stages", 2), Int(args, "microbatches", 2),
                       Int(args, "chunks", 1), Int(args, "seq_len", 24),
                       args.count("policy") ? args.at("policy") : "stateflow",
                       Int(args, "virtual_stages", 0)};
  pb::Scenario scenario = ToyScenario(shape);
  if (args.count("model")) {
    *scenario.mutable_model() = *models::ModelPreset(args.at("model"));
    pb::ModelSpec& m = *scenario.mutable_model();
    if (args.count("heads")) m.set_num_heads(Int(args, "heads", 1));
    if (args.count("attn_heads")) m.set_attn_heads(Int(args, "attn_heads", 1));
    if (args.count("gqa")) m.set_gqa_group_size(Int(args, "gqa", 1));
  }
  if (args.count("recompute")) scenario.mutable_schedule()->set_recompute(args.at("recompute"));
  const int tensors = Int(args, "tensors", 1);
  scenario.mutable_parallel()->set_tensor_size(tensors);
  const int replicas = Int(args, "replicas", 1);
  scenario.mutable_parallel()->set_data_size(replicas);
  scenario.mutable_parallel()->set_distributed_optimizer(Int(args, "distributed", 0) != 0);
  Result<TrainSetup> setup = MakeTrainSetup(MustResolve(scenario), nullptr);
  if (!setup.ok()) return std::cerr << setup.status().message() << "\n", 1;
  Result<TextData> text = TextData::Load(kDefaultTextPath);
  if (!text.ok()) return std::cerr << text.status().message() << "\n", 1;
  TrainOptions options;
  options.seed = 3;
  if (args.count("device")) options.device = args.at("device");
  auto transport = MakeMpiTransport<double>(shape.stages, shape.microbatches,
                                            setup->partition.num_chunks(), replicas, tensors,
                                            setup->plan.virtual_stages());
  if (!transport.ok()) return std::cerr << transport.status().message() << "\n", 1;
  const TpShard tp = transport->shard();
  auto trainer = Trainer<double>::Make(*setup, options, *text, Factory(args, *setup, tp),
                                       std::move(transport).value());
  if (!trainer.ok()) return std::cerr << trainer.status().message() << "\n", 1;
  TrainRun run = Train(**trainer, Int(args, "steps", 2), nullptr);
  if (!run.status.ok()) return std::cerr << run.status.message() << "\n", 1;
  WriteResults(**trainer, run, args.at("out"), args.count("model") ? tp.rank : -1);
  return 0;
}

}  // namespace
}  // namespace stateflow::backend::testing

int main(int argc, char** argv) {
  namespace sb = stateflow::backend;
  sb::MpiSession session(&argc, &argv);
  if (!session.status().ok()) {
    std::cerr << session.status().message() << "\n";
    return 1;
  }
  return sb::testing::Run(sb::testing::ParseArgs(argc, argv));
}
