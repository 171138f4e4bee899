// A small stand-in for doctest, enough to compile and run one of MLX's C++ TEST_CASEs as its own
// program (scripts/mlx_compat.py builds each case with this header forced in front). It knows nothing
// about Loom, so it compiles whatever the case itself needs.
//
// What matches doctest: a failed CHECK* records the failure and the case goes on; REQUIRE* stops the
// case; an exception escaping the case is a failure; SUBCASEs run one leaf per pass over the case,
// each pass re-entering the case from the top, as doctest does; doctest::Approx compares with the
// same relative tolerance (100 float epsilons of the larger magnitude, plus 1). INFO only prints.
// The program exits 0 when the case passed and 1 otherwise, after one line "SHIM: passed|failed".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace doctest {

class Approx {
 public:
  explicit Approx(double value) : value_(value) {}
  Approx& epsilon(double e) { epsilon_ = e; return *this; }
  Approx& scale(double s) { scale_ = s; return *this; }
  bool matches(double x) const {
    return std::fabs(x - value_) < epsilon_ * (scale_ + std::max(std::fabs(x), std::fabs(value_)));
  }
  double value() const { return value_; }

  friend bool operator==(double x, const Approx& a) { return a.matches(x); }
  friend bool operator==(const Approx& a, double x) { return a.matches(x); }
  friend bool operator!=(double x, const Approx& a) { return !a.matches(x); }
  friend bool operator!=(const Approx& a, double x) { return !a.matches(x); }
  friend std::ostream& operator<<(std::ostream& os, const Approx& a) {
    return os << "Approx( " << a.value_ << " )";
  }

 private:
  double value_;
  double epsilon_ = static_cast<double>(std::numeric_limits<float>::epsilon()) * 100;
  double scale_ = 1.0;
};

}  // namespace doctest

namespace shim {

inline int& failures() { static int n = 0; return n; }

// Thrown by REQUIRE*: ends the pass over the case.
struct RequireFailed {};

template <typename T, typename = void>
struct Printable : std::false_type {};
template <typename T>
struct Printable<T, std::void_t<decltype(std::declval<std::ostream&>() << std::declval<const T&>())>>
    : std::true_type {};

template <typename T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (Printable<T>::value) {
    std::ostringstream os;
    os << v;
    return os.str();
  } else {
    return "{?}";
  }
}

inline void fail(const char* file, int line, const std::string& what, bool require) {
  ++failures();
  std::cerr << file << ":" << line << ": FAILED: " << what << std::endl;
  if (require) throw RequireFailed{};
}

template <typename T>
void check(const char* file, int line, const char* macro, const char* text, const T& value,
           bool expected, bool require) {
  if (static_cast<bool>(value) != expected) fail(file, line, std::string(macro) + "( " + text + " )", require);
}

// One function per comparison so that each compares exactly as the case wrote it (no conversions).
#define SHIM_BINARY(NAME, OP)                                                                     \
  template <typename A, typename B>                                                               \
  void NAME(const char* file, int line, const char* macro, const char* text, const A& a,          \
            const B& b, bool require) {                                                           \
    if (!(a OP b))                                                                                \
      fail(file, line,                                                                            \
           std::string(macro) + "( " + text + " ) with values " + show(a) + " " #OP " " + show(b), \
           require);                                                                              \
  }
SHIM_BINARY(check_eq, ==)
SHIM_BINARY(check_ne, !=)
SHIM_BINARY(check_lt, <)
SHIM_BINARY(check_le, <=)
SHIM_BINARY(check_gt, >)
SHIM_BINARY(check_ge, >=)
#undef SHIM_BINARY

// SUBCASE bookkeeping, doctest's way: each pass enters at most one not-yet-finished subcase per
// level; a subcase is finished when a pass through it left no sibling or child subcase unentered.
struct Subcases {
  std::set<std::string> done;
  std::vector<std::string> path;
  std::vector<bool> entered_at_level{false};
  bool pending = false;
};
inline Subcases& subcases() { static Subcases s; return s; }

class Subcase {
 public:
  Subcase(const char* name, int line) {
    auto& s = subcases();
    key_ = (s.path.empty() ? std::string() : s.path.back()) + "/" + name + "@" + std::to_string(line);
    if (s.done.count(key_)) return;
    if (s.entered_at_level.back()) {
      s.pending = true;
      return;
    }
    entered_ = true;
    s.entered_at_level.back() = true;
    s.entered_at_level.push_back(false);
    s.path.push_back(key_);
    pending_before_ = s.pending;
    s.pending = false;
  }
  ~Subcase() {
    if (!entered_) return;
    auto& s = subcases();
    if (!s.pending) s.done.insert(key_);
    s.pending = s.pending || pending_before_;
    s.path.pop_back();
    s.entered_at_level.pop_back();
  }
  Subcase(const Subcase&) = delete;
  Subcase& operator=(const Subcase&) = delete;
  explicit operator bool() const { return entered_; }

 private:
  std::string key_;
  bool entered_ = false;
  bool pending_before_ = false;
};

struct Case {
  const char* name = nullptr;
  void (*fn)() = nullptr;
};
inline Case& the_case() { static Case c; return c; }
struct Registrar {
  Registrar(const char* name, void (*fn)()) { the_case() = {name, fn}; }
};

}  // namespace shim

#define SHIM_CAT2(a, b) a##b
#define SHIM_CAT(a, b) SHIM_CAT2(a, b)

#define TEST_CASE(name)                                                  \
  static void shim_test_case_body();                                     \
  static ::shim::Registrar shim_registrar(name, &shim_test_case_body);   \
  static void shim_test_case_body()

#define SUBCASE(name) \
  if (const ::shim::Subcase& SHIM_CAT(shim_subcase_, __LINE__) = ::shim::Subcase(name, __LINE__))

#define INFO(...) (std::cerr << "INFO: " << (__VA_ARGS__) << std::endl)
#define CAPTURE(x) INFO(x)
#define MESSAGE(...) INFO(__VA_ARGS__)

#define SHIM_CHECK(macro, require, expected, ...) \
  ::shim::check(__FILE__, __LINE__, macro, #__VA_ARGS__, (__VA_ARGS__), expected, require)
#define CHECK(...) SHIM_CHECK("CHECK", false, true, __VA_ARGS__)
#define CHECK_FALSE(...) SHIM_CHECK("CHECK_FALSE", false, false, __VA_ARGS__)
#define REQUIRE(...) SHIM_CHECK("REQUIRE", true, true, __VA_ARGS__)
#define REQUIRE_FALSE(...) SHIM_CHECK("REQUIRE_FALSE", true, false, __VA_ARGS__)
#define CHECK_MESSAGE(cond, ...) CHECK(cond)
#define REQUIRE_MESSAGE(cond, ...) REQUIRE(cond)

#define SHIM_CMP(fn, macro, require, ...) ::shim::fn(__FILE__, __LINE__, macro, #__VA_ARGS__, __VA_ARGS__, require)
#define CHECK_EQ(...) SHIM_CMP(check_eq, "CHECK_EQ", false, __VA_ARGS__)
#define CHECK_NE(...) SHIM_CMP(check_ne, "CHECK_NE", false, __VA_ARGS__)
#define CHECK_LT(...) SHIM_CMP(check_lt, "CHECK_LT", false, __VA_ARGS__)
#define CHECK_LE(...) SHIM_CMP(check_le, "CHECK_LE", false, __VA_ARGS__)
#define CHECK_GT(...) SHIM_CMP(check_gt, "CHECK_GT", false, __VA_ARGS__)
#define CHECK_GE(...) SHIM_CMP(check_ge, "CHECK_GE", false, __VA_ARGS__)
#define REQUIRE_EQ(...) SHIM_CMP(check_eq, "REQUIRE_EQ", true, __VA_ARGS__)
#define REQUIRE_NE(...) SHIM_CMP(check_ne, "REQUIRE_NE", true, __VA_ARGS__)
#define REQUIRE_LT(...) SHIM_CMP(check_lt, "REQUIRE_LT", true, __VA_ARGS__)
#define REQUIRE_LE(...) SHIM_CMP(check_le, "REQUIRE_LE", true, __VA_ARGS__)
#define REQUIRE_GT(...) SHIM_CMP(check_gt, "REQUIRE_GT", true, __VA_ARGS__)
#define REQUIRE_GE(...) SHIM_CMP(check_ge, "REQUIRE_GE", true, __VA_ARGS__)

#define SHIM_THROWS(macro, require, expr)                                   \
  do {                                                                      \
    bool shim_threw = false;                                                \
    try {                                                                   \
      static_cast<void>(expr);                                              \
    } catch (...) {                                                         \
      shim_threw = true;                                                    \
    }                                                                       \
    if (!shim_threw) ::shim::fail(__FILE__, __LINE__, macro "( " #expr " ) did not throw", require); \
  } while (0)
#define CHECK_THROWS(...) SHIM_THROWS("CHECK_THROWS", false, (__VA_ARGS__))
#define REQUIRE_THROWS(...) SHIM_THROWS("REQUIRE_THROWS", true, (__VA_ARGS__))
// doctest's *_MESSAGE forms only attach a message to the assertion.
#define CHECK_THROWS_MESSAGE(expr, ...) CHECK_THROWS(expr)
#define REQUIRE_THROWS_MESSAGE(expr, ...) REQUIRE_THROWS(expr)

#define SHIM_THROWS_AS(macro, require, expr, ...)                                               \
  do {                                                                                          \
    const char* shim_what = "did not throw";                                                    \
    try {                                                                                       \
      static_cast<void>(expr);                                                                  \
    } catch (const std::remove_cv_t<std::remove_reference_t<__VA_ARGS__>>&) {                   \
      shim_what = nullptr;                                                                      \
    } catch (const std::exception& e) {                                                         \
      std::cerr << "  (threw another type: " << e.what() << ")" << std::endl;                   \
      shim_what = "threw another exception type";                                               \
    } catch (...) {                                                                             \
      shim_what = "threw another exception type";                                               \
    }                                                                                           \
    if (shim_what)                                                                              \
      ::shim::fail(__FILE__, __LINE__,                                                          \
                   std::string(macro "( " #expr ", " #__VA_ARGS__ " ) ") + shim_what, require); \
  } while (0)
#define CHECK_THROWS_AS(expr, ...) SHIM_THROWS_AS("CHECK_THROWS_AS", false, expr, __VA_ARGS__)
#define REQUIRE_THROWS_AS(expr, ...) SHIM_THROWS_AS("REQUIRE_THROWS_AS", true, expr, __VA_ARGS__)

#define SHIM_NOTHROW(macro, require, expr)                                                      \
  do {                                                                                          \
    try {                                                                                       \
      static_cast<void>(expr);                                                                  \
    } catch (const std::exception& e) {                                                         \
      ::shim::fail(__FILE__, __LINE__, std::string(macro "( " #expr " ) threw: ") + e.what(), require); \
    } catch (...) {                                                                             \
      ::shim::fail(__FILE__, __LINE__, macro "( " #expr " ) threw", require);                   \
    }                                                                                           \
  } while (0)
#define CHECK_NOTHROW(...) SHIM_NOTHROW("CHECK_NOTHROW", false, (__VA_ARGS__))
#define REQUIRE_NOTHROW(...) SHIM_NOTHROW("REQUIRE_NOTHROW", true, (__VA_ARGS__))

#define WARN(...) static_cast<void>(0)
#define WARN_FALSE(...) static_cast<void>(0)
#define FAIL(...) ::shim::fail(__FILE__, __LINE__, "FAIL", true)
#define FAIL_CHECK(...) ::shim::fail(__FILE__, __LINE__, "FAIL_CHECK", false)

// The program: run the one case until every leaf SUBCASE has had its pass.
int main() {
  auto& c = ::shim::the_case();
  if (!c.fn) {
    std::cerr << "SHIM: no TEST_CASE in this program" << std::endl;
    return 2;
  }
  auto& s = ::shim::subcases();
  for (int pass = 0; pass < 10000; ++pass) {
    s.pending = false;
    s.entered_at_level.assign(1, false);
    s.path.clear();
    try {
      c.fn();
    } catch (const ::shim::RequireFailed&) {
      // already counted
    } catch (const std::exception& e) {
      ::shim::fail(c.name, 0, std::string("uncaught exception: ") + e.what(), false);
    } catch (...) {
      ::shim::fail(c.name, 0, "uncaught exception of unknown type", false);
    }
    if (!s.pending) break;
  }
  bool ok = ::shim::failures() == 0;
  std::cerr << "SHIM: " << (ok ? "passed" : "failed") << std::endl;
  return ok ? 0 : 1;
}
