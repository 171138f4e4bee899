#include <iomanip>
#include <sstream>

#include "loom/core/eval.h"

namespace loom {

namespace {

// numpy-like: nested brackets, at most 3 leading and trailing items per axis once an array has more
// than 1000 elements.
constexpr size_t kSummarizeAbove = 1000;
constexpr int kEdgeItems = 3;

template <typename T>
void format_scalar(std::ostream& os, T v) {
  if constexpr (is_complex_v<T>) {
    // MLX's (and Python's) form: 1+2j, 1-2j.
    os << std::setprecision(6) << v.real() << (std::signbit(v.imag()) ? "-" : "+") << std::fabs(v.imag()) << "j";
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 1) {
    os << int(v);  // not as a character
  } else if constexpr (std::is_integral_v<T>) {
    os << v;
  } else {
    double d = static_cast<double>(static_cast<compute_t<T>>(v));
    os << std::setprecision(std::is_same_v<T, double> ? 8 : 6) << d;
  }
}

std::string format_value(const array& a, int64_t off) {
  std::ostringstream os;
  const char* base = static_cast<const char*>(a.raw_data()) + off * int64_t(a.itemsize());
  LOOM_DISPATCH_ALL(a.dtype(), T, format_scalar(os, *reinterpret_cast<const T*>(base)));
  return os.str();
}

void print_rec(std::ostream& os, const array& a, int dim, int64_t off, bool summarize, int indent) {
  int nd = static_cast<int>(a.ndim());
  if (dim == nd) {
    os << format_value(a, off);
    return;
  }
  int n = a.shape()[dim];
  os << "[";
  for (int i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (dim == nd - 1 ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    print_rec(os, a, dim + 1, off + i * a.strides()[dim], summarize, indent + 1);
    if (i < n - 1) os << (dim == nd - 1 ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const array& a_in) {
  array a = a_in;
  a.eval();
  os << "array(";
  if (a.size() == 0 && a.ndim() > 0) {
    os << "[]";
  } else {
    print_rec(os, a, 0, 0, a.size() > kSummarizeAbove, 6);
  }
  os << ", shape=" << detail::shape_str(a.shape()) << ", dtype=" << a.dtype() << ")";
  return os;
}

}  // namespace loom
