// export_function / import_function: compile's traces (autograd/compiled.h) written to a file and
// rebuilt from it.
//
// The file: the 8 bytes "LOOMFUNC", then (core/serialize.h's layout) the format version, the Loom
// version that wrote it, the metadata, whether the traces are shapeless, and the traces; then a
// CRC-32 of everything before it. A trace: the number of positional inputs, the keyword inputs'
// names, the inputs' dtypes and shapes, the number of random keys, the constants (dtype, shape,
// row-major bytes), the nodes in the order they run (the primitive's name and saved parameters, its
// inputs as references, its outputs' dtypes and shapes) and the outputs as references. A reference
// is (kind, index, output): an input, a constant, or output `output` of an earlier node.
#include "loom/autograd/export.h"

#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "loom/autograd/compiled.h"
#include "loom/core/eval.h"
#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/utils.h"

#ifndef LOOM_VERSION_STRING
#define LOOM_VERSION_STRING "unknown"
#endif

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'F', 'U', 'N', 'C'};
// Bump when the layout above, or any primitive's saved parameters (Primitive::save), change.
constexpr int kFormatVersion = 1;

enum class Ref : int { input = 0, constant = 1, node = 2 };

using KwargFn = std::function<std::vector<array>(const Args&, const Kwargs&)>;

// The inputs of a call as the traced function takes them: positional, then keyword by name.
std::vector<array> flatten_inputs(const Args& args, const Kwargs& kwargs) {
  std::vector<array> all = args;
  for (const auto& [name, a] : kwargs) all.push_back(a);
  return all;
}

std::vector<std::string> names_of(const Kwargs& kwargs) {
  std::vector<std::string> names;
  for (const auto& kv : kwargs) names.push_back(kv.first);
  return names;
}

uint32_t checksum(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), piece);
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

struct SavedTrace {
  int num_args = 0;
  std::vector<std::string> kwarg_names;
  std::shared_ptr<const detail::CompiledTrace> trace;
};

// Writes one trace's graph.
void write_trace(detail::Writer& w, const SavedTrace& s) {
  const detail::Program& prog = *s.trace->program;
  w.put(s.num_args, s.kwarg_names);
  const std::vector<array>& inputs = prog.inputs();
  const size_t n_own = inputs.size() - s.trace->num_keys;
  w.put(static_cast<uint64_t>(n_own));
  for (size_t i = 0; i < n_own; ++i) w.put(inputs[i].dtype(), inputs[i].shape());
  w.put(s.trace->num_keys);

  // Where each array of the graph comes from.
  std::unordered_map<std::uintptr_t, std::pair<Ref, std::pair<uint64_t, int>>> where;
  for (size_t i = 0; i < inputs.size(); ++i) where[inputs[i].id()] = {Ref::input, {i, 0}};
  const std::vector<array>& tape = prog.tape();
  for (size_t j = 0; j < tape.size(); ++j) {
    const std::vector<array> outs = prog.node_outputs(j);
    for (size_t k = 0; k < outs.size(); ++k) where[outs[k].id()] = {Ref::node, {j, static_cast<int>(k)}};
  }
  std::vector<array> constants;
  auto note = [&](const array& a) {
    if (where.count(a.id())) return;
    where[a.id()] = {Ref::constant, {constants.size(), 0}};
    constants.push_back(a);
  };
  for (const auto& a : tape) {
    for (const auto& in : a.inputs()) note(in);
  }
  for (const auto& o : prog.outputs()) note(o);

  w.put(static_cast<uint64_t>(constants.size()));
  for (const auto& c : constants) {
    const array data = detail::row_major_copy(c);
    w.put(c.dtype(), c.shape(), std::string(static_cast<const char*>(data.raw_data()), c.nbytes()));
  }
  auto put_ref = [&](const array& a) {
    const auto& r = where.at(a.id());
    w.put(r.first, r.second.first, r.second.second);
  };
  w.put(static_cast<uint64_t>(tape.size()));
  for (size_t j = 0; j < tape.size(); ++j) {
    const Primitive& p = tape[j].primitive();
    detail::Writer params;
    p.save(params);
    w.put(std::string(p.name()), params.bytes());
    w.put(static_cast<uint64_t>(tape[j].inputs().size()));
    for (const auto& in : tape[j].inputs()) put_ref(in);
    const std::vector<array> outs = prog.node_outputs(j);
    w.put(static_cast<uint64_t>(outs.size()));
    for (const auto& o : outs) w.put(o.dtype(), o.shape());
  }
  w.put(static_cast<uint64_t>(prog.outputs().size()));
  for (const auto& o : prog.outputs()) put_ref(o);
}

}  // namespace

namespace detail {

struct ExportState {
  std::string file, metadata;
  KwargFn fun;
  bool shapeless = false;
  bool closed = false;
  std::vector<SavedTrace> traces;

  void add(const Args& args, const Kwargs& kwargs) {
    if (closed) throw std::invalid_argument("[export_function] the exporter of " + file + " is closed");
    SavedTrace s;
    s.num_args = static_cast<int>(args.size());
    s.kwarg_names = names_of(kwargs);
    const std::vector<std::string> names = s.kwarg_names;
    const int n = s.num_args;
    const KwargFn f = fun;
    VectorFn flat = [f, n, names](const std::vector<array>& all) {
      Args a(all.begin(), all.begin() + n);
      Kwargs k;
      for (size_t i = 0; i < names.size(); ++i) k.emplace(names[i], all[n + i]);
      return f(a, k);
    };
    s.trace = trace_function(flat, flatten_inputs(args, kwargs), true, shapeless);
    traces.push_back(std::move(s));
    try {
      write();
    } catch (...) {
      traces.pop_back();
      throw;
    }
  }

  // The whole file, every trace so far, written beside it and renamed over it.
  void write() const {
    Writer w;
    w.put(kFormatVersion, std::string(LOOM_VERSION_STRING), metadata, shapeless,
          static_cast<uint64_t>(traces.size()));
    for (const auto& s : traces) write_trace(w, s);
    const std::string& body = w.bytes();
    const uint32_t crc = checksum(body);
    const std::string tmp = file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw std::runtime_error("[export_function] cannot write " + tmp);
      out.write(kMagic, sizeof(kMagic));
      out.write(body.data(), static_cast<std::streamsize>(body.size()));
      char c[4];
      for (int i = 0; i < 4; ++i) c[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
      out.write(c, 4);
      out.flush();
      if (!out) throw std::runtime_error("[export_function] writing " + tmp + " failed");
    }
    if (std::rename(tmp.c_str(), file.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw std::runtime_error("[export_function] cannot replace " + file);
    }
  }
};

struct ImportState {
  std::string file, metadata;
  std::vector<SavedTrace> traces;

  std::vector<array> call(const Args& args, const Kwargs& kwargs) const {
    const std::vector<array> all = flatten_inputs(args, kwargs);
    const std::vector<std::string> names = names_of(kwargs);
    for (const auto& s : traces) {
      if (s.num_args == static_cast<int>(args.size()) && s.kwarg_names == names && s.trace->accepts(all)) {
        return call_trace(s.trace, all, tracing_depth() > 0);
      }
    }
    std::ostringstream os;
    os << "[import_function] no trace in " << file << " takes " << args.size() << " positional inputs";
    for (const auto& a : args) os << " " << a.dtype() << shape_str(a.shape());
    if (!names.empty()) {
      os << " and keyword inputs";
      for (const auto& [name, a] : kwargs) os << " " << name << "=" << a.dtype() << shape_str(a.shape());
    }
    os << "; its traces take:";
    for (const auto& s : traces) {
      os << "\n  " << s.num_args << " positional";
      for (size_t i = 0; i < s.trace->in_shapes.size(); ++i) {
        const bool kw = i >= static_cast<size_t>(s.num_args);
        os << " " << (kw ? s.kwarg_names[i - s.num_args] + "=" : "") << s.trace->in_dtypes[i]
           << (s.trace->shapeless ? "(" + std::to_string(s.trace->in_shapes[i].size()) + " axes)"
                                  : shape_str(s.trace->in_shapes[i]));
      }
    }
    throw std::invalid_argument(os.str());
  }
};

}  // namespace detail

namespace {

// Reads one trace and rebuilds its graph.
SavedTrace read_trace(detail::Reader& r, bool shapeless) {
  SavedTrace s;
  r.get(s.num_args, s.kwarg_names);
  const uint64_t n_own = r.get<uint64_t>();
  if (s.num_args < 0 || n_own != s.num_args + s.kwarg_names.size()) r.fail("a trace's input counts disagree");
  std::vector<array> placeholders;
  for (uint64_t i = 0; i < n_own; ++i) {
    Dtype d = float32;
    Shape shape;
    r.get(d, shape);
    placeholders.push_back(detail::compile_placeholder(shape, d));
  }
  const int num_keys = r.get<int>();
  if (num_keys < 0 || num_keys > 1 << 20) r.fail("a trace's key count is " + std::to_string(num_keys));
  for (int k = 0; k < num_keys; ++k) placeholders.push_back(detail::compile_placeholder(Shape{2}, uint32));

  std::vector<array> constants;
  const uint64_t n_const = r.get<uint64_t>();
  for (uint64_t i = 0; i < n_const; ++i) {
    Dtype d = float32;
    Shape shape;
    std::string bytes;
    r.get(d, shape, bytes);
    uint64_t count = 1;
    for (int dim : shape) {
      if (dim < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) r.fail("a constant's shape cannot be");
    }
    if (count > bytes.size() || count * d.size != bytes.size()) r.fail("a constant's data does not fill its shape");
    array c(allocator::malloc(bytes.size()), shape, d);
    if (!bytes.empty()) std::memcpy(c.raw_data(), bytes.data(), bytes.size());
    constants.push_back(std::move(c));
  }

  std::vector<std::vector<array>> nodes;
  auto ref = [&]() -> array {
    Ref kind;
    uint64_t index;
    int output;
    r.get(kind, index, output);
    if (kind == Ref::input && index < placeholders.size()) return placeholders[index];
    if (kind == Ref::constant && index < constants.size()) return constants[index];
    if (kind == Ref::node && index < nodes.size() && output >= 0 && static_cast<size_t>(output) < nodes[index].size()) {
      return nodes[index][output];
    }
    r.fail("a reference points nowhere");
  };
  const uint64_t n_nodes = r.get<uint64_t>();
  for (uint64_t j = 0; j < n_nodes; ++j) {
    std::string name, params;
    r.get(name, params);
    detail::PrimitiveLoader load = detail::primitive_loader(name);
    if (!load) {
      throw std::runtime_error("[import_function] the file holds a " + name +
                               " node, which this build of Loom cannot load");
    }
    detail::Reader pr(params.data(), params.size(), "a " + name + " node's parameters");
    std::shared_ptr<Primitive> p = load(pr);
    if (pr.remaining() != 0) r.fail("a " + name + " node's parameters are longer than it reads");
    const uint64_t n_in = r.get<uint64_t>();
    std::vector<array> ins;
    for (uint64_t i = 0; i < n_in; ++i) ins.push_back(ref());
    const uint64_t n_out = r.get<uint64_t>();
    if (n_out == 0 || n_out > 1 << 16) r.fail("a node has " + std::to_string(n_out) + " outputs");
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    for (uint64_t k = 0; k < n_out; ++k) {
      Dtype d = float32;
      Shape shape;
      r.get(d, shape);
      shapes.push_back(std::move(shape));
      dtypes.push_back(d);
    }
    nodes.push_back(array::make_arrays(std::move(shapes), dtypes, std::move(p), std::move(ins)));
  }
  std::vector<array> outputs;
  const uint64_t n_out = r.get<uint64_t>();
  for (uint64_t i = 0; i < n_out; ++i) outputs.push_back(ref());
  // Only the program may hold the graph's nodes: drop every other handle first.
  nodes.clear();
  constants.clear();
  s.trace = detail::make_trace(std::move(placeholders), std::move(outputs), num_keys, shapeless);
  return s;
}

}  // namespace

FunctionExporter::FunctionExporter(std::unique_ptr<detail::ExportState> state) : state_(std::move(state)) {}
FunctionExporter::~FunctionExporter() = default;

void FunctionExporter::operator()(const Args& args) { state_->add(args, {}); }
void FunctionExporter::operator()(const Kwargs& kwargs) { state_->add({}, kwargs); }
void FunctionExporter::operator()(const Args& args, const Kwargs& kwargs) { state_->add(args, kwargs); }
void FunctionExporter::close() { state_->closed = true; }

FunctionExporter exporter(const std::string& file, const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun,
                          bool shapeless, const std::string& metadata) {
  if (!fun) throw std::invalid_argument("[export_function] cannot export a null function");
  auto s = std::make_unique<detail::ExportState>();
  s->file = file;
  s->metadata = metadata;
  s->fun = fun;
  s->shapeless = shapeless;
  return FunctionExporter(std::move(s));
}

FunctionExporter exporter(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                          bool shapeless, const std::string& metadata) {
  if (!fun) throw std::invalid_argument("[export_function] cannot export a null function");
  return exporter(file, KwargFn([fun](const Args& a, const Kwargs&) { return fun(a); }), shapeless, metadata);
}

FunctionExporter exporter(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                          bool shapeless, const std::string& metadata) {
  if (!fun) throw std::invalid_argument("[export_function] cannot export a null function");
  return exporter(file, KwargFn([fun](const Args&, const Kwargs& k) { return fun(k); }), shapeless, metadata);
}

void export_function(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                     const Args& args, bool shapeless, const std::string& metadata) {
  exporter(file, fun, shapeless, metadata)(args);
}

void export_function(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                     const Kwargs& kwargs, bool shapeless, const std::string& metadata) {
  exporter(file, fun, shapeless, metadata)(kwargs);
}

void export_function(const std::string& file, const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun,
                     const Args& args, const Kwargs& kwargs, bool shapeless, const std::string& metadata) {
  exporter(file, fun, shapeless, metadata)(args, kwargs);
}

std::vector<array> ImportedFunction::operator()(const Args& args) const { return state_->call(args, {}); }
std::vector<array> ImportedFunction::operator()(const Kwargs& kwargs) const { return state_->call({}, kwargs); }
std::vector<array> ImportedFunction::operator()(const Args& args, const Kwargs& kwargs) const {
  return state_->call(args, kwargs);
}
const std::string& ImportedFunction::metadata() const { return state_->metadata; }

ImportedFunction import_function(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("[import_function] cannot open " + file);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    throw std::runtime_error("[import_function] " + file + " is not a file export_function wrote");
  }
  detail::Reader head(bytes.data() + sizeof(kMagic), bytes.size() - sizeof(kMagic), file);
  // The version comes first and is read before the checksum: a file of another format says so
  // whatever else it holds.
  const int version = head.get<int>();
  const std::string written_by = head.get<std::string>();
  if (version != kFormatVersion) {
    throw std::runtime_error(msg("[import_function] ", file, " was written by Loom ", written_by, " in format version ",
                                 version, "; this Loom (", LOOM_VERSION_STRING, ") reads format version ",
                                 kFormatVersion));
  }
  if (bytes.size() < sizeof(kMagic) + 4) head.fail("it ends early");
  const std::string body = bytes.substr(sizeof(kMagic), bytes.size() - sizeof(kMagic) - 4);
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[bytes.size() - 4 + i])) << (8 * i);
  if (checksum(body) != stored) head.fail("its checksum does not match its contents");

  auto state = std::make_shared<detail::ImportState>();
  state->file = file;
  detail::Reader r(body.data(), body.size(), file);
  int v = 0;
  std::string by;
  bool shapeless = false;
  uint64_t n_traces = 0;
  r.get(v, by, state->metadata, shapeless, n_traces);
  for (uint64_t t = 0; t < n_traces; ++t) state->traces.push_back(read_trace(r, shapeless));
  if (r.remaining() != 0) r.fail("bytes follow its last trace");
  return ImportedFunction(std::move(state));
}

}  // namespace loom
