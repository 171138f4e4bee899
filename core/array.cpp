#include "loom/core/array.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "loom/core/eval.h"
#include "loom/core/primitive.h"

namespace loom {

namespace detail {
std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ")";
  return os.str();
}

bool& shapeless_tracing() {
  thread_local bool on = false;
  return on;
}

int& tracing_depth() {
  thread_local int depth = 0;
  return depth;
}

Node::~Node() {
  // Inputs that this node alone keeps alive are released through a worklist instead of recursively.
  thread_local bool draining = false;
  thread_local std::vector<array> pending;
  for (auto& in : inputs) {
    // (An input an async_eval computed is left to the plain release: its stream's thread wrote its
    // node, and only that release orders the write before this thread's read.)
    if (in.desc_.use_count() == 1 && !in.desc_->event && in.desc_->node) pending.push_back(std::move(in));
  }
  inputs.clear();
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    array a = std::move(pending.back());
    pending.pop_back();
  }  // destroying `a` may run ~Node again, which only appends to `pending`
  draining = false;
}
}  // namespace detail

size_t array::shape_size(const Shape& shape) {
  size_t n = 1;
  for (int s : shape) {
    if (s < 0) throw std::invalid_argument("[array] negative dimension in shape " + detail::shape_str(shape));
    n *= static_cast<size_t>(s);
  }
  return n;
}

namespace {
// The flags of a fresh row-major buffer: column-contiguous too only when at most one axis is longer than 1.
array::Flags row_major_flags(const Shape& shape) {
  array::Flags f;
  int long_axes = 0, empty = 0;
  for (int s : shape) {
    long_axes += s > 1;
    empty += s == 0;
  }
  f.col_contiguous = long_axes <= 1 || empty > 0;
  return f;
}
}  // namespace

// `who` names the op in errors: the primitive that makes the array.
array::ArrayDesc::ArrayDesc(Shape s, Dtype d, const char* who) : shape(std::move(s)), dtype(d) {
  // Every row-major stride (which steps over empty axes as over axes of 1) must fit in an int64_t,
  // and so must a non-empty array's byte count. An empty array allocates nothing, so its item size
  // does not count (an IDX file may hold rows of shape (0, 23551, 982784, 236453888)).
  uint64_t span = 1;  // the product of the axes, empty ones as 1
  bool empty = false;
  for (int n : shape) {
    if (n < 0) {
      throw std::invalid_argument(std::string("[") + who + "] negative dimension in shape " + detail::shape_str(shape));
    }
    empty |= n == 0;
    if (__builtin_mul_overflow(span, static_cast<uint64_t>(std::max(n, 1)), &span) ||
        span > static_cast<uint64_t>(INT64_MAX)) {
      throw std::overflow_error(std::string("[") + who + "] an array of shape " + detail::shape_str(shape) +
                                " would have strides past 2^63 elements (empty axes count as 1)");
    }
  }
  if (!empty && span > static_cast<uint64_t>(INT64_MAX) / d.size) {
    throw std::overflow_error(std::string("[") + who + "] an array of shape " + detail::shape_str(shape) + " and " +
                              to_string(d) + " would take more than 2^63 bytes");
  }
  size = empty ? 0 : span;
  strides.resize(shape.size());
  int64_t st = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = st;
    st *= std::max(shape[i], 1);
  }
}

array::array(allocator::Buffer buffer, Shape shape, Dtype dtype, Deleter deleter)
    : desc_(std::make_shared<ArrayDesc>(std::move(shape), dtype)) {
  desc_->data = std::make_shared<Data>(buffer, std::move(deleter));
  desc_->data_ptr = buffer.ptr;
  desc_->data_size = size();
  desc_->flags = row_major_flags(desc_->shape);
  desc_->evaluated = true;
}

array::array(void* data, Shape shape, Dtype dtype, const std::function<void(void*)>& deleter)
    : array(allocator::malloc(shape_size(shape) * dtype.size), shape, dtype) {
  if (nbytes() > 0) std::memcpy(desc_->data_ptr, data, nbytes());
  if (deleter) deleter(data);
}

namespace detail {
extern std::atomic<PrimitiveHook> primitive_hook;  // primitive.cpp

// Most kernels are written for real dtypes; a primitive says when it also takes complex64.
void check_complex(const Primitive& p, Dtype out, const std::vector<array>& inputs) {
  if (p.supports_complex()) return;
  std::ostringstream os;
  os << "[" << p.name() << "] does not support complex64 (";
  const char* sep = "";
  if (is_complex(out)) os << "output complex64", sep = ", ";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (is_complex(inputs[i].dtype())) os << sep << "input " << i << " complex64", sep = ", ";
  }
  os << ")";
  throw std::invalid_argument(os.str());
}
}  // namespace detail

array::array(Shape shape, Dtype dtype, std::shared_ptr<Primitive> primitive, std::vector<array> inputs)
    : desc_(std::make_shared<ArrayDesc>(std::move(shape), dtype, primitive->name())) {
  if (auto hook = detail::primitive_hook.load(std::memory_order_relaxed)) hook(*primitive);
  auto node = std::make_shared<detail::Node>();
  bool tracer = false, complex = is_complex(dtype);
  for (auto& in : inputs) tracer |= in.is_tracer(), complex |= is_complex(in.dtype());
  if (complex) detail::check_complex(*primitive, dtype, inputs);
  node->primitive = std::move(primitive);
  node->inputs = std::move(inputs);
  // output_shapes / output_dtypes stay empty: they rebuild dropped siblings, and a lone output is
  // never dropped while its node is reached through it.
  node->outputs.push_back(desc_);
  desc_->node = std::move(node);
  desc_->is_tracer = tracer;
}

std::vector<array> array::make_arrays(std::vector<Shape> shapes, const std::vector<Dtype>& dtypes,
                                      std::shared_ptr<Primitive> primitive, std::vector<array> inputs) {
  // One output: a plain node (no shapes kept to rebuild siblings it has none of).
  if (shapes.size() == 1) return {array(std::move(shapes[0]), dtypes[0], std::move(primitive), std::move(inputs))};
  if (auto hook = detail::primitive_hook.load(std::memory_order_relaxed)) hook(*primitive);
  auto node = std::make_shared<detail::Node>();
  bool tracer = false, complex = false;
  for (auto& in : inputs) tracer |= in.is_tracer(), complex |= is_complex(in.dtype());
  for (Dtype d : dtypes) complex |= is_complex(d);
  if (complex) detail::check_complex(*primitive, complex64, inputs);
  node->primitive = std::move(primitive);
  node->inputs = std::move(inputs);
  std::vector<array> outs;
  outs.reserve(shapes.size());
  node->outputs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto d = std::make_shared<ArrayDesc>(shapes[i], dtypes[i], node->primitive->name());
    d->node = node;
    d->position = static_cast<uint32_t>(i);
    d->is_tracer = tracer;
    node->outputs.push_back(d);
    outs.push_back(array(std::move(d)));
  }
  node->output_shapes = std::move(shapes);
  node->output_dtypes = dtypes;
  return outs;
}

int array::shape(int axis) const {
  int n = static_cast<int>(ndim());
  int ax = axis < 0 ? axis + n : axis;
  if (ax < 0 || ax >= n) {
    throw std::out_of_range("[array::shape] axis " + std::to_string(axis) + " is out of range for an array of " +
                            std::to_string(n) + " dimensions");
  }
  return desc_->shape[ax];
}

void array::eval() { loom::eval(std::vector<array>{*this}); }

Primitive& array::primitive() const {
  wait_if_pending();
  if (!desc_->node) throw std::logic_error("[array::primitive] the array has no primitive");
  return *desc_->node->primitive;
}
std::shared_ptr<Primitive> array::primitive_ptr() const {
  wait_if_pending();
  return desc_->node ? desc_->node->primitive : nullptr;
}

const std::vector<array>& array::inputs() const {
  static const std::vector<array> none;
  wait_if_pending();
  return desc_->node ? desc_->node->inputs : none;
}

std::vector<array> array::outputs() const {
  wait_if_pending();
  if (!desc_->node) return {*this};
  auto& node = *desc_->node;
  std::vector<array> outs;
  outs.reserve(node.outputs.size());
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    auto d = node.outputs[i].lock();
    if (!d) {  // the user dropped this output: evaluate into a placeholder
      d = std::make_shared<ArrayDesc>(node.output_shapes[i], node.output_dtypes[i]);
      d->node = desc_->node;
      d->position = static_cast<uint32_t>(i);
      node.outputs[i] = d;
    }
    outs.push_back(array(std::move(d)));
  }
  return outs;
}

std::vector<array> array::siblings() const {
  std::vector<array> outs = outputs();
  outs.erase(outs.begin() + position());
  return outs;
}

void array::detach() { desc_->node.reset(); }

Stream array::stream() const {
  const auto& p = primitive_ptr();
  return p ? p->stream() : default_stream(default_device());
}

void array::wait_slow() const {
  // A stream's thread reads and writes the arrays of its own work freely; everyone else waits.
  if (desc_->event.get() != detail::current_event()) desc_->event->wait();
}

void array::check_data_access(size_t elem_size) const {
  wait_if_pending();
  if (!desc_->evaluated) {
    throw std::logic_error("[array::data] the array is not evaluated; call eval() first");
  }
  if (elem_size != itemsize()) {
    throw std::invalid_argument("[array::data] element type of " + std::to_string(elem_size) +
                                " bytes does not match dtype " + to_string(dtype()));
  }
}

array::Flags array::layout_flags(const Shape& shape, const Strides& strides, size_t* data_size) {
  Flags f;
  size_t size = 1;
  for (int s : shape) size *= static_cast<size_t>(s);
  if (size == 0) {  // no elements: every layout is every kind of contiguous (MLX's flags too)
    if (data_size) *data_size = 0;
    return f;
  }
  int64_t expect = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expect) f.row_contiguous = false;
    expect *= shape[i];
  }
  expect = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expect) f.col_contiguous = false;
    expect *= shape[i];
  }
  int64_t span = 1;
  bool negative = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 1) continue;
    if (strides[i] < 0) negative = true;
    span += static_cast<int64_t>(shape[i] - 1) * std::abs(strides[i]);
  }
  // Contiguous (MLX's meaning): leaving out broadcast axes (stride 0), the elements fill [0, span)
  // once each, i.e. the other axes are a permutation of a dense row-major layout. Elementwise kernels
  // then run over the span alone and give their result the same strides: exp of a broadcast row
  // computes the row once. span == size alone would also pass overlapping strides such as (2, 2)
  // for shape (3, 3) (as_strided can make those).
  bool dense = !f.row_contiguous && !f.col_contiguous && !negative;
  if (dense) {
    std::vector<std::pair<int64_t, int>> dims;  // (stride, size) of the axes longer than 1, not broadcast
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] > 1 && strides[i] != 0) dims.emplace_back(strides[i], shape[i]);
    }
    std::sort(dims.begin(), dims.end());
    int64_t expect_stride = 1;
    for (const auto& [st, n] : dims) {
      if (st != expect_stride) dense = false;
      expect_stride *= n;
    }
  }
  f.contiguous = f.row_contiguous || f.col_contiguous || dense;
  if (data_size) *data_size = static_cast<size_t>(span);
  return f;
}

void array::set_data(allocator::Buffer buffer, void (*deleter)(allocator::Buffer)) {
  desc_->data = std::make_shared<Data>(buffer, deleter);
  desc_->data_ptr = buffer.ptr;
  desc_->data_size = size();
  desc_->flags = row_major_flags(desc_->shape);
  // Row-major strides were set at construction.
}

void array::set_data(allocator::Buffer buffer, size_t data_size, Strides strides, Flags flags,
                     void (*deleter)(allocator::Buffer)) {
  desc_->data = std::make_shared<Data>(buffer, deleter);
  desc_->data_ptr = buffer.ptr;
  desc_->data_size = data_size;
  desc_->strides = std::move(strides);
  desc_->flags = flags;
}

void array::copy_shared_buffer(const array& other, const Strides& strides, Flags flags, size_t data_size,
                               int64_t offset) {
  desc_->data = other.desc_->data;
  desc_->data_ptr = static_cast<char*>(other.desc_->data_ptr) + offset * static_cast<int64_t>(other.itemsize());
  desc_->strides = strides;
  desc_->flags = flags;
  desc_->data_size = data_size;
}

void array::copy_shared_buffer(const array& other) {
  copy_shared_buffer(other, other.strides(), other.flags(), other.data_size());
}

void array::reset_data(const Shape* shape) {
  if (!shape && !desc_->data && !desc_->evaluated.load(std::memory_order_relaxed)) return;  // already reset
  desc_->data.reset();
  desc_->data_ptr = nullptr;
  desc_->data_size = 0;
  desc_->evaluated.store(false, std::memory_order_release);
  if (shape && *shape != desc_->shape) {
    const char* who = desc_->node ? desc_->node->primitive->name() : "array";
    ArrayDesc fresh(*shape, desc_->dtype, who);  // checks the shape as construction does
    desc_->shape = std::move(fresh.shape);
    desc_->size = fresh.size;
    desc_->strides = std::move(fresh.strides);
  } else {
    int64_t st = 1;
    for (int i = static_cast<int>(desc_->shape.size()) - 1; i >= 0; --i) {
      desc_->strides[i] = st;
      st *= std::max(desc_->shape[i], 1);
    }
  }
  desc_->flags = row_major_flags(desc_->shape);
}

void array::alloc() {
  if (!is_placed()) set_data(allocator::malloc(nbytes()));
}

bool array::take_buffer(const array& donor, long graph_refs) {
  const ArrayDesc& d = *donor.desc_;
  if (!d.data || d.data.use_count() != 1 || !d.flags.contiguous || d.data_size != size() || d.dtype.size != itemsize() ||
      !donor.held_only_by(graph_refs)) {
    return false;
  }
  if (d.flags.row_contiguous) {  // this array's own row-major layout (its strides were set at construction)
    desc_->data = d.data;
    desc_->data_ptr = d.data_ptr;
    desc_->data_size = size();
    desc_->flags = row_major_flags(desc_->shape);
    return true;
  }
  if (d.shape != desc_->shape) return false;  // a permuted layout means something only for the same shape
  copy_shared_buffer(donor, d.strides, d.flags, d.data_size);
  return true;
}

}  // namespace loom
