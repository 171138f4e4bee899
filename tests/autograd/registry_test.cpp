// The registry of primitives (tests/registry.h) is the one list of Loom's primitives: every test
// binary checks each node it makes against it (a primitive that is not listed fails the test that
// made it). This test checks the list itself: each gradient check it names exists, calls a
// finite-difference checker and mentions the op, each entry without checks gives a reason, and the
// hook that guards the list fires.
#include <gtest/gtest-spi.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../test_utils.h"

namespace fs = std::filesystem;
using namespace loom;
using loom::testing::Entry;
using loom::testing::Ref;

namespace {

fs::path source_root() { return fs::weakly_canonical(fs::path(LOOM_TEST_DATA_DIR) / ".." / ".."); }

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Blanks out comments (keeps string literals and line structure).
std::string strip_comments(const std::string& s) {
  std::string out = s;
  size_t i = 0;
  while (i < out.size()) {
    if (out[i] == '"' || out[i] == '\'') {
      char q = out[i++];
      while (i < out.size() && out[i] != q) i += out[i] == '\\' ? 2 : 1;
      ++i;
    } else if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      size_t e = out.find("*/", i + 2);
      e = e == std::string::npos ? out.size() : e + 2;
      for (; i < e; ++i) {
        if (out[i] != '\n') out[i] = ' ';
      }
    } else {
      ++i;
    }
  }
  return out;
}

// The text between the brace at or after `from` and its match (exclusive); npos-safe.
std::string braced(const std::string& s, size_t from, size_t* end = nullptr) {
  size_t open = s.find('{', from);
  if (open == std::string::npos) return "";
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; i += s[i] == '\\' ? 2 : 1) {
      }
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) {
      if (end) *end = i;
      return s.substr(open + 1, i - open - 1);
    }
  }
  return s.substr(open + 1);
}

// The body of TEST(Suite, Name) (or of the function `name`, for "name()") in a test file, or "" when
// absent.
std::string test_body(const std::string& file, const std::string& dotted) {
  if (dotted.size() > 2 && dotted.compare(dotted.size() - 2, 2, "()") == 0) {
    // A definition: the name and its parameter list followed by a brace, not by a semicolon.
    const std::string fn = dotted.substr(0, dotted.size() - 1);
    for (size_t at = file.find(fn); at != std::string::npos; at = file.find(fn, at + 1)) {
      const bool word_start = at == 0 || !(std::isalnum(static_cast<unsigned char>(file[at - 1])) || file[at - 1] == '_');
      const size_t brace = file.find('{', at), semi = file.find(';', at);
      if (word_start && brace != std::string::npos && brace < semi) return braced(file, brace);
    }
    return "";
  }
  const auto dot = dotted.find('.');
  const std::string args = "(" + dotted.substr(0, dot) + ", " + dotted.substr(dot + 1) + ")";
  for (const char* macro : {"TEST", "TEST_F"}) {
    const size_t at = file.find(macro + args);
    if (at != std::string::npos) return braced(file, at);
  }
  return "";
}

// Test primitives: one the registry does not list, and one that claims an entry with gradient checks
// while saying it is not differentiable.
class Unlisted : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>&, array& out) override { out.alloc(); }
  const char* name() const override { return "UnlistedTestPrimitive"; }
};
class NotDifferentiableExp : public Unlisted {
 public:
  const char* name() const override { return "Exp"; }
  bool is_differentiable() const override { return false; }
};

class NewReduceVariant : public Unlisted {
 public:
  const char* name() const override { return "Reduce"; }
  void print(std::ostream& os) const override { os << "Reduce(median)"; }
};

}  // namespace

TEST(PrimitiveRegistry, EveryEntryHasItsGradientChecksOrAReason) {
  const fs::path root = source_root();
  std::set<std::string> names;
  for (const Entry& e : loom::testing::registry()) {
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate registry entry " << e.name;
    if (e.no_gradient) {
      EXPECT_TRUE(e.checks.empty()) << e.name;
      EXPECT_GT(std::string(e.no_gradient).size(), 10u) << e.name << " needs a reason";
      continue;
    }
    EXPECT_FALSE(e.checks.empty()) << e.name;
    for (const Ref& r : e.checks) {
      const fs::path p = root / r.file;
      ASSERT_TRUE(fs::exists(p)) << e.name << ": " << r.file << " does not exist";
      const std::string body = test_body(strip_comments(read(p)), r.test);
      EXPECT_FALSE(body.empty()) << e.name << ": " << r.file << " has no TEST " << r.test;
      // check_grads, a test's check(...) / ..._grads(...) wrapper around it, or a hand-written
      // central difference.
      const bool calls_checker =
          body.find("_grads(") != std::string::npos || body.find("check(") != std::string::npos ||
          body.find("(2 * eps)") != std::string::npos ||
          body.find("distributed_worker()") != std::string::npos;
      EXPECT_TRUE(calls_checker) << e.name << ": " << r.test << " does not call a finite-difference checker";
      EXPECT_NE(body.find(r.token), std::string::npos) << e.name << ": " << r.test << " does not mention " << r.token;
    }
  }
  EXPECT_GT(names.size(), 90u);
}

TEST(PrimitiveRegistry, AnUnlistedPrimitiveFailsTheTestThatMakesIt) {
  EXPECT_NONFATAL_FAILURE(array(Shape{2}, float32, std::make_shared<Unlisted>(), {}),
                          "primitive UnlistedTestPrimitive is not in tests/registry.h");
  EXPECT_NONFATAL_FAILURE(array(Shape{2}, float32, std::make_shared<NotDifferentiableExp>(), {}),
                          "primitive Exp says is_differentiable() == false, but tests/registry.h lists gradient checks");
}

TEST(PrimitiveRegistry, VariantsAreCheckedByWhatPrintWrites) {
  // Reduce is listed by variant ("Reduce(sum)", ...): a new variant of a listed primitive is unlisted.
  EXPECT_NONFATAL_FAILURE(array(Shape{2}, float32, std::make_shared<NewReduceVariant>(), {}),
                          "primitive Reduce(median) is not in tests/registry.h");
}
