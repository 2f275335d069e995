// Host threading: a fork-join parallel_for over index ranges (GPUML_NUM_THREADS caps its threads), and one thread
// per device or shard.
#pragma once

#include <gpuml/core/config.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
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
