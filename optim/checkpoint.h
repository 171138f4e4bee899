// Training checkpoints: model parameters, optimizer state and step, the global random state and
// user metadata in one safetensors file.
//
// Layout. Tensors "model.<name>" for every entry of model.parameters() (buffers and frozen
// parameters included), "optimizer.<name>" for every entry of optimizer.state() (among them
// "optimizer.step", an int64 scalar) and "random.state" (random::get_state(), uint32 (2);
// files from before keys were uint32 hold int32 (2) bit patterns, which load as the same key).
// Metadata (strings): "loom.format" = "checkpoint/1", "loom.optimizer" = optimizer.name(),
// "loom.step" = the step in decimal, and the caller's own keys (which must not start with "loom.").
//
// The file is written to "<path>.tmp", synced and renamed over `path` (see loom/io/io.h), so an error, a
// crash or a kill during save leaves the previous checkpoint at `path` whole. Every tensor's CRC-32
// is stored with it (see save_safetensors), so a file damaged later (a flipped bit on disk, a bad
// copy) is refused naming the tensor instead of resuming from wrong numbers. Loading it into a
// freshly built model and optimizer of the same kind restores the exact bits: a run resumed from a
// checkpoint continues exactly as the run that wrote it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/distributed/distributed.h"
#include "loom/nn/module.h"
#include "loom/optim/optimizers.h"

namespace loom::optim {

using Metadata = std::unordered_map<std::string, std::string>;

/// Evaluates and writes the model's parameters, the optimizer's state and the global random state,
/// with `metadata` (e.g. {"epoch", "3"}). A metadata key starting with "loom." throws
/// std::invalid_argument; write errors throw std::runtime_error and leave `path` untouched.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const Metadata& metadata = {});

/// Restores a checkpoint written by save_checkpoint into `model` and `optimizer` (which must be of
/// the kind that wrote it) and sets the global random state; returns the caller's metadata (the
/// "loom." keys removed). The model must have exactly the saved names and shapes (arrays are cast
/// to the parameter's dtype). Everything is checked before anything changes: on an error
/// (std::runtime_error for an unreadable, damaged or non-checkpoint file, std::invalid_argument for a
/// mismatch, listing the differences) the model, optimizer and random state are left as they were.
Metadata load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer);

/// Sharded runs (nn::fully_shard, Optimizer::shard_state, tensor-parallel layers): each rank of
/// `group` writes what it holds to a file of its own, "<path>.rank<r>-of-<N>", as save_checkpoint
/// writes (atomically, with checksums), recording the rank and the group size. Every rank must call it.
void save_sharded_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                             const distributed::Group& group, const Metadata& metadata = {});

/// Restores this rank's file of a save_sharded_checkpoint, as load_checkpoint does: the run resumes
/// exactly. Every rank must call it. A checkpoint written by another number of ranks is refused
/// naming both numbers (std::invalid_argument), as are files of different steps on different ranks
/// (std::runtime_error, on every rank, before anything changes).
Metadata load_sharded_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                 const distributed::Group& group);

/// The checkpoint an unsharded run would have written, from a sharded one: the whole parameters
/// (every parameter the model holds split, as Module::splits() records it, all-gathered and put
/// together: nn::fully_shard's slices, the tensor-parallel layers' and shard_inplace's, fused parts
/// included) and the optimizer state of each whole parameter (its slices, or ZeRO's flat slices,
/// gathered), written by rank 0 in save_checkpoint's format. A 1-rank run loads it with
/// load_checkpoint into the unsharded model and optimizer; PyTorch reads its "model.*" tensors with
/// safetensors. Every rank must call it.
void save_gathered_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                              const distributed::Group& group, const Metadata& metadata = {});

}  // namespace loom::optim
