#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"

TEST(Tensor, ShapeAndNumel) {
  ckv::Tensor t({2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.shape_string(), "[2, 3]");
  EXPECT_THROW(ckv::Tensor::numel_of({-1}), ckv::Error);
}
