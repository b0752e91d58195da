// Status carries a kind and a field through the layers: context added on the way up
// keeps both, so the server and the CLI decide by them, not by the text.
#include "base/status.h"

#include <gtest/gtest.h>

namespace latte {
namespace {

Status Inner() { return Status::OutOfRange("too long", "max_tokens"); }

Status Outer() {
  LATTE_RETURN_IF_ERROR(Inner().WithContext("request 7"));
  return Status::Ok();
}

Result<int> Parsed(bool fail) {
  if (fail) return Status::DataLoss("truncated header");
  return 3;
}

Result<int> Doubled(bool fail) {
  LATTE_ASSIGN_OR_RETURN(int v, Parsed(fail));
  return 2 * v;
}

TEST(Status, ContextKeepsKindAndField) {
  const Status s = Outer();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.field(), "max_tokens");
  EXPECT_EQ(s.message(), "request 7: too long");
  EXPECT_EQ(StatusCodeName(s.code()), "out of range");
}

TEST(Status, ResultCarriesTheErrorsKind) {
  EXPECT_EQ(Doubled(false).value(), 6);
  const Result<int> r = Doubled(true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(r.status().field().empty());
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
}

}  // namespace
}  // namespace latte
