// Host threading: a fork-join parallel_for over index ranges (GPUML_NUM_THREADS caps its threads), and one thread
// per device or shard.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif
#include <gpuml/core/config.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace gpuml {

/// Config::num_threads (GPUML_NUM_THREADS), or one thread per hardware thread.
inline int host_threads() {
  const int n = config().num_threads();
  return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// Threads kept for work that runs on every shard at once, again and again (a sharded engine's steps): run(work)
/// does what concurrently(count, work) does, on threads started once instead of at every call. Index 0 runs on the
/// calling thread; the others on the team's threads, which wait between calls. Rethrows the first failure by index
/// once all have finished. One run at a time (the engine's steps are sequential).
class ShardThreads {
 public:
  explicit ShardThreads(std::size_t count) : failed_(count) {
    try {
      threads_.reserve(count > 0 ? count - 1 : 0);
      for (std::size_t i = 1; i < count; ++i) threads_.emplace_back([this, i] { serve(i); });
    } catch (const std::system_error&) {
      // Fewer threads than shards (process limits): run() gives the rest to the calling thread.
    }
  }
  ~ShardThreads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ShardThreads(const ShardThreads&) = delete;
  ShardThreads& operator=(const ShardThreads&) = delete;

  std::size_t size() const noexcept { return failed_.size(); }

  template <class Work>
  void run(Work&& work) {
    const std::function<void(std::size_t)> job = std::ref(work);
    std::fill(failed_.begin(), failed_.end(), nullptr);
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      running_ = threads_.size();
      ++generation_;
    }
    start_.notify_all();
    for (std::size_t i = threads_.size() + 1; i < failed_.size(); ++i) guarded(job, i);  // no thread of its own
    if (!failed_.empty()) guarded(job, 0);
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return running_ == 0; });
      job_ = nullptr;
    }
    for (auto& f : failed_)
      if (f) std::rethrow_exception(f);
  }

 private:
  void guarded(const std::function<void(std::size_t)>& job, std::size_t i) {
    try {
      job(i);
    } catch (...) {
      failed_[i] = std::current_exception();
    }
  }
  void serve(std::size_t i) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(std::size_t)>* job = nullptr;
      {
        std::unique_lock lock(mutex_);
        start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      guarded(*job, i);
      std::lock_guard lock(mutex_);
      if (--running_ == 0) done_.notify_one();
    }
  }

  std::vector<std::exception_ptr> failed_;  // one per index
  std::vector<std::thread> threads_;        // index i + 1 on threads_[i]
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t running_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

namespace parallel_detail {

/// The threads parallel_chunks runs on: a ShardThreads team of one thread per hardware thread, started at the first
/// parallel call of the process and never destroyed (its threads wait until the process ends), since starting and
/// joining a thread per call cost more than the work of a short call (a k-NN search's per-query finish). One call at
/// a time: a call made while another runs (from another thread, or nested in a call's work) or wanting more threads
/// than the team has starts threads of its own. A forked child (a Python worker process) gets a new team: the
/// parent's threads do not exist there.
class ChunkPool {
 public:
  static ChunkPool& get() {
    static const bool registered = [] {
#if defined(__unix__) || defined(__APPLE__)
      pthread_atfork(nullptr, nullptr, [] { instance() = nullptr; });  // the old team is left behind, unused
#endif
      return true;
    }();
    (void)registered;
    static std::mutex creating;
    std::lock_guard lock(creating);
    if (!instance()) instance() = new ChunkPool();
    return *instance();
  }

  /// Runs task(t) for t in [0, threads), t = 0 on the calling thread; false (nothing run) where the team cannot
  /// take the call. `task` must not throw.
  template <class Task>
  bool run(int threads, Task& task) {
    if (threads > static_cast<int>(team_.size())) return false;
    std::unique_lock job(job_mutex_, std::try_to_lock);
    if (!job.owns_lock()) return false;
    team_.run([&](std::size_t t) {
      if (static_cast<int>(t) < threads) task(static_cast<int>(t));
    });
    return true;
  }

 private:
  ChunkPool() : team_(std::max(1u, std::thread::hardware_concurrency())) {}
  static ChunkPool*& instance() {
    static ChunkPool* pool = nullptr;
    return pool;
  }

  ShardThreads team_;
  std::mutex job_mutex_;
};

}  // namespace parallel_detail

/// Calls fn(chunk_index, begin, end) for the chunks [i*chunk, min((i+1)*chunk, n)).
/// Chunks are handed out statically (chunk i to thread i % threads), so per-chunk results can be
/// combined later in chunk order and the outcome does not depend on the thread count.
template <class Fn>
void parallel_chunks(std::int64_t n, std::int64_t chunk, Fn&& fn) {
  if (n <= 0) return;
  const std::int64_t n_chunks = (n + chunk - 1) / chunk;
  const int threads = static_cast<int>(std::min<std::int64_t>(host_threads(), n_chunks));
  auto run = [&](int t) {
    for (std::int64_t c = t; c < n_chunks; c += threads) fn(c, c * chunk, std::min(n, (c + 1) * chunk));
  };
  if (threads <= 1) {
    run(0);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto guarded = [&](int t) {
    try {
      run(t);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  if (parallel_detail::ChunkPool::get().run(threads, guarded)) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  int spawned = 1;
  try {
    for (; spawned < threads; ++spawned) pool.emplace_back(guarded, spawned);
  } catch (const std::system_error&) {
    // No thread could be started (address space or process limits): the calling thread takes the rest.
  }
  for (int t = spawned; t < threads; ++t) guarded(t);
  guarded(0);
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

/// Runs work(i) for every i in [0, count) at once: i = 0 on the calling thread, each other on a thread of its own
/// (one per device or shard, whatever the host thread cap, as each mostly waits on its device). Rethrows the first
/// failure by index once all have finished, so no work outlives the call.
template <class Work>
void concurrently(std::size_t count, Work&& work) {
  std::vector<std::exception_ptr> failed(count);
  auto guarded = [&](std::size_t i) {
    try {
      work(i);
    } catch (...) {
      failed[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(count > 0 ? count - 1 : 0);
  std::size_t spawned = 1;
  try {
    for (; spawned < count; ++spawned) threads.emplace_back(guarded, spawned);
  } catch (const std::system_error&) {
    // No thread could be started (process limits): the calling thread runs the rest in turn.
  }
  for (std::size_t i = spawned; i < count; ++i) guarded(i);
  if (count > 0) guarded(0);
  for (auto& t : threads) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
}

}  // namespace gpuml
