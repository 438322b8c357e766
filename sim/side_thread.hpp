#pragma once
/// `side_thread`: a thread that runs one task at a time for a rank's user thread and returns when it is
/// done: NCCL's CUDA host-callback thread (a graph replay's hostStreamPlanCallback) and the async group
/// thread of a non-blocking communicator (groupLaunchNonBlocking).
/// Thread-safety: `run` from one thread at a time.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace ncclinsp::sim::app {

/// A thread that runs one task at a time for the rank's user thread and returns when it is done: NCCL's
/// CUDA host-callback thread (a graph replay's hostStreamPlanCallback) and the async group thread of a
/// non-blocking communicator (groupLaunchNonBlocking). Coll/P2p events then come from that thread.
class side_thread {
 public:
  explicit side_thread(std::function<void()> on_start)
      : t_([this, s = std::move(on_start)] {
          s();
          loop();
        }) {}
  side_thread(const side_thread&) = delete;
  side_thread& operator=(const side_thread&) = delete;
  ~side_thread() {
    {
      std::lock_guard lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  template <class F>
  void run(F&& f) {
    std::unique_lock lk(mu_);
    task_ = std::forward<F>(f);
    pending_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return !pending_; });
  }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return pending_ || quit_; });
      if (pending_) {
        task_();
        pending_ = false;
        cv_.notify_all();
      } else {
        return;
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool pending_ = false, quit_ = false;
  std::thread t_;
};

}  // namespace ncclinsp::sim::app
