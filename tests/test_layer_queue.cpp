// The bounded hand-off between `ckv dump`'s forward thread and its writer
// (lib/output/layer_queue.h): order, the bound, draining after close, and cancellation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "output/layer_queue.h"

namespace ckv::app {
namespace {

LayerItem item(int64_t layer) { return {.kind = LayerItem::Kind::resid, .layer = layer, .a = Tensor({2}), .b = {}, .c = {}}; }

TEST(LayerQueue, DeliversInOrderThenEndsAfterClose) {
  LayerQueue queue(2);
  std::thread producer([&] {
    for (int64_t l = 0; l < 20; ++l) queue.push(item(l));
    queue.close();
  });
  int64_t expected = 0;
  while (std::optional<LayerItem> got = queue.pop()) EXPECT_EQ(got->layer, expected++);
  producer.join();
  EXPECT_EQ(expected, 20);
}

TEST(LayerQueue, PushBlocksWhileFull) {
  LayerQueue queue(1);
  queue.push(item(0));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    queue.push(item(1));
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed);  // the bound holds: one item queued, the second waits
  EXPECT_EQ(queue.pop()->layer, 0);
  producer.join();
  EXPECT_TRUE(pushed);
  EXPECT_EQ(queue.pop()->layer, 1);
  // The producer's wait is counted (it waited the 50 ms sleep, less thread start-up); the
  // consumer never waited for an item.
  EXPECT_GE(queue.push_wait_seconds(), 0.02);
  EXPECT_LT(queue.pop_wait_seconds(), queue.push_wait_seconds());
}

TEST(LayerQueue, CancelMakesTheWaitingProducerThrow) {
  LayerQueue queue(1);
  queue.push(item(0));
  std::atomic<bool> stopped{false};
  std::thread producer([&] {
    try {
      queue.push(item(1));
    } catch (const WriterStopped&) {
      stopped = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  queue.cancel();
  producer.join();
  EXPECT_TRUE(stopped);
  EXPECT_THROW(queue.push(item(2)), WriterStopped);
}

}  // namespace
}  // namespace ckv::app
