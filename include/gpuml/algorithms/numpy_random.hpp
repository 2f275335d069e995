// numpy's legacy random stream (numpy.random.RandomState: MT19937 with its seeding and random_sample), the stream
// scikit-learn draws k-means' starting centers from. A fit seeded with random_state = s draws the numbers that
// numpy.random.RandomState(s) draws, so C++, MPI and Python fits with one seed start alike; a Python caller with a
// RandomState object of its own passes that object's state in and takes the advanced state back.
#pragma once

#include <gpuml/core/error.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace gpuml::algorithms {

class NumpyRandomState {
 public:
  static constexpr int kStateWords = 624;
  using Key = std::array<std::uint32_t, kStateWords>;

  /// numpy.random.RandomState(seed): seeds from 0 to 2**32 - 1, as numpy accepts.
  explicit NumpyRandomState(std::uint64_t seed = 0) {
    if (seed > 0xFFFFFFFFull)
      throw invalid_input("random_state must be between 0 and 2**32 - 1, got " + std::to_string(seed) +
                          " (numpy's RandomState seeds)");
    std::uint32_t s = static_cast<std::uint32_t>(seed);
    for (int i = 0; i < kStateWords; ++i) {
      key_[static_cast<std::size_t>(i)] = s;
      s = 1812433253u * (s ^ (s >> 30)) + static_cast<std::uint32_t>(i + 1);
    }
    pos_ = kStateWords;
  }

  /// A stream in the state numpy's RandomState.get_state() reports: its 624 key words and position.
  NumpyRandomState(const Key& key, int pos) : key_(key), pos_(pos) {
    if (pos < 0 || pos > kStateWords)
      throw invalid_input("a RandomState position must be between 0 and 624, got " + std::to_string(pos));
  }

  const Key& key() const noexcept { return key_; }
  int pos() const noexcept { return pos_; }

  /// The next 32-bit output (numpy's mt19937_next32).
  std::uint32_t next32() {
    if (pos_ == kStateWords) regenerate();
    std::uint32_t y = key_[static_cast<std::size_t>(pos_++)];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  /// RandomState.random_sample(): a double in [0, 1) from 53 bits of two outputs. uniform(0, 1) and rand() draw the
  /// same numbers.
  double random_sample() {
    const std::uint32_t a = next32() >> 5, b = next32() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

 private:
  void regenerate() {
    constexpr int n = kStateWords, m = 397;
    constexpr std::uint32_t matrix_a = 0x9908b0dfu, upper = 0x80000000u, lower = 0x7fffffffu;
    auto twist = [&](int i, int next, int far) {
      const std::uint32_t y = (key_[static_cast<std::size_t>(i)] & upper) | (key_[static_cast<std::size_t>(next)] & lower);
      key_[static_cast<std::size_t>(i)] = key_[static_cast<std::size_t>(far)] ^ (y >> 1) ^ ((0u - (y & 1u)) & matrix_a);
    };
    int i = 0;
    for (; i < n - m; ++i) twist(i, i + 1, i + m);
    for (; i < n - 1; ++i) twist(i, i + 1, i + m - n);
    twist(n - 1, 0, m - 1);
    pos_ = 0;
  }

  Key key_{};
  int pos_ = kStateWords;
};

}  // namespace gpuml::algorithms
