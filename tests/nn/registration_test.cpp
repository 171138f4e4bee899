// Members that are not registered: nn::Child makes registration part of the declaration, and
// parameters() warns about a module with parameters that was built as part of another but never
// registered (its parameters would silently miss training and checkpoints).
#include "../test_utils.h"
#include "loom/nn/activations.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"

using namespace loom;

namespace {

struct Declared : nn::Module {
  nn::Child<nn::Linear> l1{this, "l1", 4, 3};
  nn::ReLU act;  // no parameters: nothing is lost by not registering it
  nn::Child<nn::Linear> l2{this, "l2", 3, 2};
  array operator()(const array& x) { return l2(act(l1(x))); }
};

struct ForgotInBody : nn::Module {
  nn::Linear l1{4, 3}, l2{3, 2}, l3{2, 1};
  ForgotInBody() {
    register_module("l1", l1);
    register_module("l3", l3);  // l2 forgotten
  }
};

struct ForgotBetweenChildren : nn::Module {
  nn::Child<nn::Linear> l1{this, "l1", 4, 3};
  nn::Linear l2{3, 3};  // forgotten
  nn::Child<nn::Linear> l3{this, "l3", 3, 2};
};

struct Nested : nn::Module {
  nn::Child<ForgotBetweenChildren> inner{this, "inner"};
};

std::string warnings_of(const std::function<void()>& f) {
  ::testing::internal::CaptureStderr();
  f();
  return ::testing::internal::GetCapturedStderr();
}

}  // namespace

TEST(Registration, ChildRegistersInDeclarationOrder) {
  Declared m;
  std::string out = warnings_of([&] {
    auto names = m.parameters().names();
    EXPECT_EQ(names, (std::vector<std::string>{"l1.weight", "l1.bias", "l2.weight", "l2.bias"}));
  });
  EXPECT_EQ(out, "");
  EXPECT_EQ(m(ones({5, 4})).shape(), (Shape{5, 2}));
}

TEST(Registration, AForgottenMemberIsReportedOnce) {
  ForgotInBody m;
  std::string out = warnings_of([&] { EXPECT_EQ(m.parameters().size(), 4u); });
  EXPECT_NE(out.find("a nn::Linear with 8 parameters was built as part of a ForgotInBody but never registered"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("nn::Child<nn::Linear> name{this, \"name\", ...}"), std::string::npos) << out;
  EXPECT_EQ(warnings_of([&] { m.trainable_parameters(); }), "") << "once";

  ForgotBetweenChildren c;
  out = warnings_of([&] { c.trainable_parameters(); });
  EXPECT_NE(out.find("a nn::Linear with 12 parameters was built as part of a ForgotBetweenChildren"), std::string::npos)
      << out;
  // One level down: reported by whoever collects the parameters first.
  Nested n;
  out = warnings_of([&] { n.parameters(); });
  EXPECT_NE(out.find("never registered"), std::string::npos) << out;
}

TEST(Registration, ModelsBuiltOneAfterAnotherAreNotEachOthersMembers) {
  // Child-only modules keep their construction window open until parameters(); modules built
  // later (other models, standalone layers) are not inside them.
  Declared a;
  Declared b;
  nn::Linear standalone(5, 5);
  auto heap = std::make_unique<Declared>();
  std::string out = warnings_of([&] {
    a.parameters();
    b.parameters();
    heap->parameters();
    standalone.parameters();
  });
  EXPECT_EQ(out, "");
}
