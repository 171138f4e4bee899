// `array`: a cheap, value-semantic handle to a node of the lazy graph or to evaluated data.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/core/allocator.h"
#include "loom/core/dispatch.h"
#include "loom/core/dtype.h"
#include "loom/core/small_vector.h"
#include "loom/core/stream.h"

namespace loom {

/// Dimensions and element strides; arrays of up to 6 dimensions keep them inline (no allocation).
using Shape = SmallVector<int, 6>;
using Strides = SmallVector<int64_t, 6>;

class Primitive;
class array;
/// What releases a buffer handed to array(Buffer, ...) (MLX's name).
using Deleter = std::function<void(allocator::Buffer)>;

namespace detail {
struct Node;
/// How many transforms (vjp, jvp, ...) are tracing on this thread.
int& tracing_depth();
/// True while compile traces a shapeless function on this thread: ops then record what a shapeless
/// call needs to infer shapes (a broadcast's other operands, a reshape's -1).
bool& shapeless_tracing();
struct InTracing {
  InTracing() { ++tracing_depth(); }
  ~InTracing() { --tracing_depth(); }
  InTracing(const InTracing&) = delete;
  InTracing& operator=(const InTracing&) = delete;
};
}  // namespace detail

class array {
  struct ArrayDesc;

 public:
  /// A 0-d array holding `val`.
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> || std::is_same_v<T, float16_t> ||
                                                    std::is_same_v<T, bfloat16_t> || std::is_same_v<T, complex64_t>>>
  explicit array(T val, Dtype dtype = dtype_of<T>) : array(&val, Shape{}, dtype) {}
  /// A 0-d complex64 array (MLX: `array(std::complex<float>{1, 2})`).
  explicit array(std::complex<float> val, Dtype dtype = complex64) : array(complex64_t(val), dtype) {}

  /// A 1-d array of the listed values.
  template <typename T>
  array(std::initializer_list<T> data, Dtype dtype = dtype_of<T>)
      : array(data.begin(), Shape{static_cast<int>(data.size())}, dtype) {}

  /// The listed values in the given shape (row-major); the counts must agree.
  template <typename T>
  array(std::initializer_list<T> data, Shape shape, Dtype dtype = dtype_of<T>)
      : array(check_count(data.begin(), data.size(), shape), shape, dtype) {}

  /// The vector's values in the given shape (row-major); the counts must agree.
  template <typename T>
  array(const std::vector<T>& data, Shape shape, Dtype dtype = dtype_of<T>)
      : array(check_count(data.data(), data.size(), shape), shape, dtype) {}

  /// Copies `shape`'s element count of values from `data`, converting them to `dtype`.
  template <typename T>
  array(const T* data, const Shape& shape, Dtype dtype);

  // ---- MLX's spellings of the constructors above ----
  /// MLX's iterator constructor: reads `shape`'s element count of values from `data` (any input
  /// iterator; it must reach that many, as in MLX: an iterator has no end to check), converting them
  /// to `dtype`. A negative dimension throws.
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category,
            typename V = typename std::iterator_traits<It>::value_type>
  array(It data, Shape shape, Dtype dtype = dtype_of<V>) : array(static_cast<const V*>(gather_values<V>(data, shape).get()), shape, dtype) {}
  /// As MLX: an empty list, `array({})`, is an empty float32 array (the template cannot deduce a type).
  array(std::initializer_list<float> data) : array(data.begin(), Shape{static_cast<int>(data.size())}, float32) {}
  /// As MLX: `array({}, dtype)` is an empty array of `dtype`.
  array(std::initializer_list<int> data, Dtype dtype)
      : array(data.begin(), Shape{static_cast<int>(data.size())}, dtype) {}

  /// Takes ownership of a buffer holding a row-major array of `shape` and `dtype`.
  array(allocator::Buffer buffer, Shape shape, Dtype dtype, Deleter deleter = allocator::free);
  /// An array holding a copy of the `shape` x `dtype` elements at `data`; `deleter(data)` is called
  /// once they are copied (MLX's CPU behaviour for this constructor).
  array(void* data, Shape shape, Dtype dtype, const std::function<void(void*)>& deleter);

  /// A node of the graph: the output of `primitive` applied to `inputs`.
  array(Shape shape, Dtype dtype, std::shared_ptr<Primitive> primitive, std::vector<array> inputs);
  /// The outputs of a primitive with any number of outputs (one: the constructor above).
  static std::vector<array> make_arrays(std::vector<Shape> shapes, const std::vector<Dtype>& dtypes,
                                        std::shared_ptr<Primitive> primitive, std::vector<array> inputs);

  // ---- metadata ----
  const Shape& shape() const { return desc_->shape; }
  /// The size of one dimension; negative axes count from the end.
  int shape(int axis) const;
  const Strides& strides() const {
    wait_if_pending();
    return desc_->strides;
  }
  int64_t strides(int axis) const { return strides().at(axis < 0 ? axis + ndim() : axis); }
  size_t ndim() const { return desc_->shape.size(); }
  size_t size() const { return desc_->size; }
  size_t itemsize() const { return desc_->dtype.size; }
  size_t nbytes() const { return size() * itemsize(); }
  Dtype dtype() const { return desc_->dtype; }

  // ---- evaluation and data ----
  /// Evaluates the graph behind this array.
  void eval();
  /// The single value of a one-element array, converted to T (evaluates first).
  template <typename T>
  T item();
  template <typename T>
  T item() const {
    return const_cast<array*>(this)->item<T>();
  }
  /// Pointer to the first element (the array must be evaluated). Elements are at `strides()`.
  template <typename T>
  T* data() {
    check_data_access(sizeof(T));
    return static_cast<T*>(desc_->data_ptr);
  }
  template <typename T>
  const T* data() const {
    check_data_access(sizeof(T));
    return static_cast<const T*>(desc_->data_ptr);
  }
  /// The values as a vector in row-major order (evaluates first).
  template <typename T>
  std::vector<T> to_vector();

  /// False while the array is being computed in the background (async_eval): never waits.
  bool is_evaluated() const { return desc_->evaluated.load(std::memory_order_acquire); }
  /// MLX's name for is_evaluated(): the data can be read without waiting.
  bool is_available() const { return is_evaluated(); }
  bool has_primitive() const {
    wait_if_pending();
    return desc_->node != nullptr;
  }
  /// Blocks until an async_eval that computes this array is done (rethrowing its error). Reading the
  /// array's data, layout or graph waits by itself.
  void wait() const { wait_if_pending(); }
  /// The stream this array's primitive belongs to (the default stream for arrays made from data).
  Stream stream() const;
  /// The background work computing this array, or null (async_eval sets it; it stays when done).
  const std::shared_ptr<detail::Event>& event() const { return desc_->event; }
  void set_event(std::shared_ptr<detail::Event> e) { desc_->event = std::move(e); }

  /// Iterating an array gives its slices along the first axis, each without that axis (MLX's
  /// ArrayIterator): `for (array row : m)`. Throws std::invalid_argument for a 0-d array.
  class ArrayIterator;
  ArrayIterator begin() const;
  ArrayIterator end() const;

  // ---- graph (for transforms and kernels) ----
  Primitive& primitive() const;
  std::shared_ptr<Primitive> primitive_ptr() const;
  const std::vector<array>& inputs() const;
  /// Every output of this array's primitive, this one included, in output order.
  std::vector<array> outputs() const;
  /// The other outputs of this array's primitive (MLX's siblings; empty for one output or once
  /// evaluated).
  std::vector<array> siblings() const;
  /// This array's index among its primitive's outputs.
  uint32_t position() const { return desc_->position; }
  /// Forgets the primitive and inputs (keeps the data). Called by eval.
  void detach();
  /// A reference that does not keep the array (its data and graph) alive: lock() gives the array
  /// while some handle still holds it, nullopt after. For bookkeeping that must not extend lifetimes
  /// (a Loom extension; MLX has none).
  class Weak {
   public:
    Weak() = default;
    std::optional<array> lock() const {
      if (auto d = desc_.lock()) return array(std::move(d));
      return std::nullopt;
    }
    /// True once the array is gone (cheaper than lock()).
    bool expired() const { return desc_.expired(); }

   private:
    friend class array;
    explicit Weak(const std::shared_ptr<ArrayDesc>& d) : desc_(d) {}
    std::weak_ptr<ArrayDesc> desc_;
  };
  Weak weak() const { return Weak(desc_); }
  /// An identifier stable for the lifetime of the array.
  std::uintptr_t id() const { return reinterpret_cast<std::uintptr_t>(desc_.get()); }
  const detail::Node* node_id() const {
    wait_if_pending();
    return desc_->node.get();
  }
  /// True for arrays that depend on a transform's inputs while that transform is tracing; eval keeps
  /// their graph so the transform can still differentiate through them.
  bool is_tracer() const { return desc_->is_tracer && detail::tracing_depth() > 0; }
  void set_tracer(bool t) { desc_->is_tracer = t; }

  // ---- buffers (for kernels) ----
  struct Data {
    allocator::Buffer buffer;
    void (*deleter)(allocator::Buffer) = nullptr;  // the kernels' buffers: no std::function to call
    Deleter custom;                                 // a caller's deleter (array(Buffer, ..., deleter))
    Data(allocator::Buffer b, void (*d)(allocator::Buffer)) : buffer(b), deleter(d) {}
    Data(allocator::Buffer b, Deleter d) : buffer(b), custom(std::move(d)) {}
    ~Data() {
      if (custom) custom(buffer);
      else deleter(buffer);
    }
    Data(const Data&) = delete;
    Data& operator=(const Data&) = delete;
  };
  struct Flags {
    bool contiguous = true;      // the elements fill data_size() consecutive slots, in some order
    bool row_contiguous = true;  // C order, no gaps
    bool col_contiguous = true;  // Fortran order, no gaps
  };
  const Flags& flags() const {
    wait_if_pending();
    return desc_->flags;
  }
  /// Elements the array spans in its buffer (less than size() for broadcasts).
  size_t data_size() const {
    wait_if_pending();
    return desc_->data_size;
  }
  void* raw_data() const {
    wait_if_pending();
    return desc_->data_ptr;
  }
  const std::shared_ptr<Data>& data_shared_ptr() const {
    wait_if_pending();
    return desc_->data;
  }
  /// True when exactly `graph_refs` handles hold this array: eval counts the handles its graph holds
  /// (the tape, the consumers' input lists) and asks whether anyone else (a caller, an eval output)
  /// holds one too. The one test behind fusion, placement and donation.
  bool held_only_by(long graph_refs) const { return desc_.use_count() == graph_refs; }
  /// Gives the array a fresh row-contiguous buffer of nbytes() bytes.
  void set_data(allocator::Buffer buffer, void (*deleter)(allocator::Buffer) = allocator::free);
  /// Gives the array a buffer with explicit layout.
  void set_data(allocator::Buffer buffer, size_t data_size, Strides strides, Flags flags,
                void (*deleter)(allocator::Buffer) = allocator::free);
  /// Makes this array a view of `other`'s buffer with the given layout; `offset` is in elements
  /// relative to `other`'s first element.
  void copy_shared_buffer(const array& other, const Strides& strides, Flags flags, size_t data_size,
                          int64_t offset = 0);
  /// Makes this array share `other`'s buffer and layout.
  void copy_shared_buffer(const array& other);
  /// Allocates a row-contiguous buffer for this array, unless eval already gave it one (is_placed).
  void alloc();
  /// Buffer plan (eval's): gives this unevaluated array `donor`'s buffer when nothing but `graph_refs`
  /// handles (the reading node's input slots) holds the donor, no view shares its buffer, and it has
  /// this array's size and item size and fills its elements without gaps. A row-contiguous donor's
  /// buffer is laid out row-major in this array's shape; any other keeps its layout (same shape only).
  /// True when it did.
  bool take_buffer(const array& donor, long graph_refs);
  /// True when eval gave this unevaluated array its buffer ahead of its kernel (a run of a consumer's
  /// output, see Primitive::input_offsets, or an input's buffer, see Primitive::donors): alloc keeps it.
  bool is_placed() const { return desc_->data != nullptr && !desc_->evaluated; }
  void set_evaluated() { desc_->evaluated.store(true, std::memory_order_release); }
  /// For a kept graph that runs again (compile's program, core/program.h): drops the data and returns
  /// the array to "not evaluated" in its own row-major layout, keeping its primitive and inputs.
  /// `shape`, when given, replaces its shape (a shapeless program run on other shapes).
  void reset_data(const Shape* shape = nullptr);

  /// Computes the contiguity flags of a layout.
  static Flags layout_flags(const Shape& shape, const Strides& strides, size_t* data_size = nullptr);

 private:
  struct ArrayDesc {
    Shape shape;
    Strides strides;
    size_t size = 0;
    Dtype dtype;
    std::shared_ptr<detail::Node> node;
    uint32_t position = 0;
    std::atomic<bool> evaluated{false};  // set by a stream's thread, read by the caller's (async_eval)
    bool is_tracer = false;
    std::shared_ptr<Data> data;
    void* data_ptr = nullptr;
    size_t data_size = 0;
    Flags flags;
    std::shared_ptr<detail::Event> event;  // see event(); written only by the thread that builds the graph
    ArrayDesc(Shape s, Dtype d, const char* who = "array");
  };
  std::shared_ptr<ArrayDesc> desc_;

  explicit array(std::shared_ptr<ArrayDesc> d) : desc_(std::move(d)) {}
  template <typename T>
  static const T* check_count(const T* data, size_t n, const Shape& shape);
  template <typename V, typename It>
  static std::unique_ptr<V[]> gather_values(It it, const Shape& shape) {
    const size_t n = shape_size(shape);  // throws on a negative dimension
    std::unique_ptr<V[]> v(new V[n]);
    for (size_t i = 0; i < n; ++i, ++it) v[i] = *it;
    return v;
  }
  void check_data_access(size_t elem_size) const;
  // Everything a stream's thread writes while computing the array is read through this.
  void wait_if_pending() const {
    if (desc_->event) wait_slow();
  }
  void wait_slow() const;
  static size_t shape_size(const Shape& shape);
  friend struct detail::Node;
};

// (Its operator*, begin and end are defined in ops/compat.cpp: a slice is an op.)
class array::ArrayIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using difference_type = std::ptrdiff_t;
  using value_type = const array;  // read only, as MLX's: a slice is a new array, not a reference
  using pointer = void;
  using reference = const array;
  ArrayIterator(array a, int index) : a_(std::move(a)), index_(index) {}
  const array operator*() const;
  /// `n` slices on (MLX's `begin() + n`; unlike MLX's, it leaves this iterator as it was).
  ArrayIterator operator+(std::ptrdiff_t n) const { return ArrayIterator(a_, index_ + static_cast<int>(n)); }
  ArrayIterator& operator+=(std::ptrdiff_t n) {
    index_ += static_cast<int>(n);
    return *this;
  }
  ArrayIterator& operator++() {
    ++index_;
    return *this;
  }
  ArrayIterator operator++(int) {
    ArrayIterator old = *this;
    ++index_;
    return old;
  }
  bool operator==(const ArrayIterator& o) const { return a_.id() == o.a_.id() && index_ == o.index_; }
  bool operator!=(const ArrayIterator& o) const { return !(*this == o); }

 private:
  array a_;
  int index_;
};

namespace detail {
/// A node's outputs, held weakly. Nearly every node has one, and it lives inline: a vector here was
/// one heap allocation per op, a tenth of the cost of building and evaluating a small op.
template <class Ref>
class OutputRefs {
 public:
  size_t size() const { return n_; }
  Ref& operator[](size_t i) { return i == 0 ? first_ : more_[i - 1]; }
  const Ref& operator[](size_t i) const { return i == 0 ? first_ : more_[i - 1]; }
  void reserve(size_t n) { more_.reserve(n > 1 ? n - 1 : 0); }
  void push_back(Ref r) {
    if (n_++ == 0) {
      first_ = std::move(r);
    } else {
      more_.push_back(std::move(r));
    }
  }

 private:
  Ref first_;
  std::vector<Ref> more_;
  size_t n_ = 0;
};

/// The primitive and inputs shared by all outputs of one operation.
struct Node {
  std::shared_ptr<Primitive> primitive;
  std::vector<array> inputs;
  OutputRefs<std::weak_ptr<array::ArrayDesc>> outputs;
  std::vector<Shape> output_shapes;  // of every output, for nodes with several (see array::outputs)
  std::vector<Dtype> output_dtypes;
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // iterative: dropping a long chain never recurses deeply
};
std::string shape_str(const Shape& shape);
}  // namespace detail

std::ostream& operator<<(std::ostream& os, const array& a);

// ---- template definitions ----

template <typename T>
const T* array::check_count(const T* data, size_t n, const Shape& shape) {
  size_t want = shape_size(shape);
  if (n != want) {
    throw std::invalid_argument("[array] " + std::to_string(n) + " values cannot fill shape " +
                                detail::shape_str(shape) + " (" + std::to_string(want) + " elements)");
  }
  return data;
}

template <typename T>
array::array(const T* data, const Shape& shape, Dtype dtype) : desc_(std::make_shared<ArrayDesc>(shape, dtype)) {
  alloc();
  size_t n = size();
  LOOM_DISPATCH_ALL(dtype, Out, {
    Out* out = static_cast<Out*>(desc_->data_ptr);
    for (size_t i = 0; i < n; ++i) out[i] = cast_value<Out>(data[i]);
  });
  desc_->evaluated = true;
}

template <typename T>
T array::item() {
  if (size() != 1) {
    throw std::invalid_argument("[item] needs an array of one element, got shape " + detail::shape_str(shape()));
  }
  eval();
  T out{};
  LOOM_DISPATCH_ALL(dtype(), In, { out = cast_value<T>(*static_cast<const In*>(desc_->data_ptr)); });
  return out;
}

}  // namespace loom
