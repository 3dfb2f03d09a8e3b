// CommWorker: the background thread on which DistributedDataParallel runs its collectives, so
// that a bucket's all-reduce proceeds while the autograd thread computes the rest of backward.
// Decision: a group is used by one thread at a time (process_group.h), so while a DDP exists
// every collective it issues, including the ones outside backward (construction, found-inf
// agreement, buffer broadcast), goes through this one FIFO: the ranks' call orders stay equal.
// A job that throws is kept and rethrown by the next wait(); the jobs queued after it are
// dropped, since the ranks no longer agree where they are.
//
//   CommWorker w;
//   w.submit([&] { pg->all_reduce(flat, ReduceOp::Avg); });
//   ... more backward ...
//   w.wait();                 // every submitted job ran (or the first error is thrown)
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace mg::distributed {

class CommWorker {
 public:
  CommWorker();
  // Waits for the queued jobs (their errors are dropped) and joins the thread.
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Queues `job` behind the others; returns at once.
  void submit(std::function<void()> job);
  // Returns when every submitted job has run; rethrows the first exception one of them threw
  // since the last wait().
  void wait();
  // submit(job) then wait().
  void run(std::function<void()> job);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started after the members above exist
};

}  // namespace mg::distributed
