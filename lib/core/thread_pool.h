#pragma once
// A fixed set of worker threads that runs parallel loops. Every op runs on the pool of its
// execution context (ops/context.h), so one `--threads N` controls all CPU parallelism
// (Eigen and oneDNN are used single-threaded inside each task).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckv {

class ThreadPool {
 public:
  // threads <= 0 means std::thread::hardware_concurrency(). The calling thread is one of
  // the workers, so ThreadPool(1) starts no thread at all.
  explicit ThreadPool(int threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls task(i) for every i in [0, count), spread over the workers; tasks are handed out
  // one at a time, so uneven tasks balance. Blocks until all are done; the first exception
  // a task throws is rethrown here. Not re-entrant: tasks must not call parallel_for.
  void parallel_for(int64_t count, const std::function<void(int64_t)>& task);

 private:
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  int busy_ = 0;             // workers still inside the current loop
  uint64_t generation_ = 0;  // bumped for every parallel_for, so workers see new work
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace ckv
