// A training run's starting point written out for an outside reference
// (bench/torch_reference.py, a PyTorch model of the same network): every
// parameter of the local stages by name and shape, exactly as the run starts
// from them, and the token ids of each step's batch, made by the same
// TextData::MakeBatch call the trainer makes.
//
// Format: `path` holds the tensors back to back, raw little-endian, each at
// an offset that is a multiple of 8; `path`.json is the index:
//   {"format": "stateflow-run-dump 1", "dtype": "float32", "seed": 1,
//    "steps": 10, "microbatches": 4, "seq_len": 256,
//    "adamw": {"learning_rate": ..., "beta1", "beta2", "epsilon", "weight_decay"},
//    "constants": {"norm_eps": 1e-06, ...},   // the caller's, e.g. model eps
//    "model": {...},                           // the ModelSpec (proto names)
//    "tensors": [{"name": "embedding.weight", "dtype": "float32",
//                 "shape": [256, 64], "offset": 0, "bytes": 65536}, ...,
//                {"name": "tokens.step0", "dtype": "int32",
//                 "shape": [M, T + 1], ...}, ...]}
// Parameters come in the trainer's order (stage by stage, each module's
// Parameters()), named as there ("block0.q_proj.weight"); then one int32
// tensor per step: row a is microbatch a's T + 1 tokens (inputs [0, T),
// targets [1, T + 1)).
//
// Not a checkpoint (no optimizer state, no resuming) and not for MPI jobs:
// it writes the stages this process holds, so the caller runs all of them.
//
//   SF_RETURN_IF_ERROR(WriteRunDump<float>("w.bin", trainer, options, text, {{"norm_eps", 1e-6}}));
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/train/text_data.h"
#include "backend/train/train_setup.h"
#include "backend/train/trainer.h"
#include "common/status.h"

namespace stateflow::backend {

// Writes `path` and `path`.json as above, before the trainer's first step.
// Errors name the file (cannot open, write failed) or the batch (text too
// short, from MakeBatch).
template <typename T>
Status WriteRunDump(const std::string& path, Trainer<T>& trainer,
                    const TrainOptions& options, const TextData& text,
                    const std::vector<std::pair<std::string, double>>& constants);

}  // namespace stateflow::backend
