// export_function / import_function: a traced function written to a file, and read back in another
// process to run it (MLX's mlx/export.h, file forms).
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/array.h"

namespace loom {

using Args = std::vector<array>;
/// Keyword inputs, by name (MLX's Kwargs). A function's keyword inputs come after its positional
/// ones, in the order of their names.
using Kwargs = std::map<std::string, array>;

namespace detail {
struct ExportState;
struct ImportState;
}  // namespace detail

/// Writes traces of one function to a file (MLX's FunctionExporter): each call traces the function
/// on its arguments' signature (shapes and dtypes; with shapeless, dtypes and numbers of axes) as
/// compile does (autograd/compile.h: constants folded, equal subexpressions merged, random draws
/// without a key become inputs) and rewrites the file with every trace so far, so the file on disk is
/// always complete. The file holds the graph, its constants and each trace's input signature, under
/// a format version.
///
/// Throws std::invalid_argument naming the primitive when the graph holds one that cannot be
/// exported (a collective: it belongs to its process group; custom_function and checkpoint: their
/// rules are C++ functions), and when called after close().
class FunctionExporter {
 public:
  void operator()(const std::initializer_list<array>& args) { (*this)(Args(args)); }
  void operator()(const Args& args);
  void operator()(const Kwargs& kwargs);
  void operator()(const Args& args, const Kwargs& kwargs);
  /// No more traces (the file is already complete).
  void close();

  FunctionExporter(FunctionExporter&&) = default;
  FunctionExporter& operator=(FunctionExporter&&) = default;
  FunctionExporter(const FunctionExporter&) = delete;
  FunctionExporter& operator=(const FunctionExporter&) = delete;
  ~FunctionExporter();

 private:
  friend FunctionExporter exporter(const std::string&, const std::function<std::vector<array>(const Args&)>&, bool,
                                   const std::string&);
  friend FunctionExporter exporter(const std::string&, const std::function<std::vector<array>(const Kwargs&)>&, bool,
                                   const std::string&);
  friend FunctionExporter exporter(const std::string&,
                                   const std::function<std::vector<array>(const Args&, const Kwargs&)>&, bool,
                                   const std::string&);
  explicit FunctionExporter(std::unique_ptr<detail::ExportState> state);
  std::unique_ptr<detail::ExportState> state_;
};

/// An exporter writing to `file` (MLX's exporter). `metadata` is stored as it is and returned by
/// ImportedFunction::metadata.
FunctionExporter exporter(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                          bool shapeless = false, const std::string& metadata = "");
FunctionExporter exporter(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                          bool shapeless = false, const std::string& metadata = "");
FunctionExporter exporter(const std::string& file,
                          const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun,
                          bool shapeless = false, const std::string& metadata = "");

/// One trace of `fun` on `args` / `kwargs`, written to `file`.
void export_function(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                     const Args& args, bool shapeless = false, const std::string& metadata = "");
void export_function(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                     const Kwargs& kwargs, bool shapeless = false, const std::string& metadata = "");
void export_function(const std::string& file,
                     const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun, const Args& args,
                     const Kwargs& kwargs, bool shapeless = false, const std::string& metadata = "");

/// A function read from a file export_function wrote (MLX's ImportedFunction). A call runs the trace
/// whose signature its inputs match, as one Compiled node (autograd/compile.h); inside a transform
/// (grad, vmap, ...) it rebuilds the trace's graph instead, so the transform sees ordinary nodes.
/// Random draws the exported function made without a key take fresh keys from this process's global
/// state. A call that matches no trace throws std::invalid_argument listing the signatures there are.
class ImportedFunction {
 public:
  std::vector<array> operator()(const std::initializer_list<array>& args) const { return (*this)(Args(args)); }
  std::vector<array> operator()(const Args& args) const;
  std::vector<array> operator()(const Kwargs& kwargs) const;
  std::vector<array> operator()(const Args& args, const Kwargs& kwargs) const;
  /// The metadata saved with the function.
  const std::string& metadata() const;

 private:
  friend ImportedFunction import_function(const std::string&);
  explicit ImportedFunction(std::shared_ptr<const detail::ImportState> state) : state_(std::move(state)) {}
  std::shared_ptr<const detail::ImportState> state_;
};

/// Reads a file export_function wrote. A file that is not one, that is truncated or damaged (a
/// checksum covers it), or that was written with another format version throws std::runtime_error
/// saying which; so does a primitive this build of Loom does not know.
ImportedFunction import_function(const std::string& file);

}  // namespace loom
