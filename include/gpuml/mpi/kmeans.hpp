// Distributed KMeans over MPI: every rank holds its own rows (a shard of one data set, in rank order) and runs the
// E-step on them with its own backend (a Vulkan device, or the host); per iteration the k x (d + 1) partial sums
// and weights are added across ranks exactly (MPI_Allreduce of their int64 fixed point, algorithms::ClusterSums), and
// every rank applies scikit-learn's M-step to the same totals, so all ranks hold the same centers, inertia and n_iter,
// and each the labels of its own rows.
//
// The fit is the library's one k-means fit (fit_kmeans_on, estimators/kmeans_fit.hpp) over detail::RankRows: the
// same checks, centring, numpy-stream k-means++ seeding and best-run rule as one process, with sums and engines that
// span the ranks.
//
// Optional: this header needs MPI (<mpi.h>, e.g. Debian's libopenmpi-dev) and is not part of <gpuml/gpuml.hpp>.
// CMake: link gpuml::mpi (defined when MPI is found).
//
// What a distributed fit returns, against the same rows fitted in one process on the same engine: the same labels,
// centers, inertia and n_iter bit for bit on any number of ranks, k-means++ seeding included (every sum is exact:
// algorithms::SumFrame, as across several devices: algorithms::ShardedLloydEngine).
//
// Faults: every collective step carries a status word. A rank whose input is bad (another feature count, a
// non-finite value) or whose local work throws reports it at the next collective, and every rank then throws
// gpuml::error naming that rank and its message, of that rank's kind (gpuml::invalid_input for bad input,
// gpuml::unsupported, gpuml::out_of_memory, gpuml::cancelled): the job ends on every rank, it does not hang.
#pragma once

#include <gpuml/gpuml.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml::mpi {

/// The MPI datatype of a scalar the distributed estimators send.
template <class V>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<V, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<V, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<V, std::int32_t>) return MPI_INT32_T;
  else {
    static_assert(std::is_same_v<V, std::int64_t>, "float, double, int32 or int64");
    return MPI_INT64_T;
  }
}

/// One MPI communicator: rank, size, and the collectives the distributed estimators use, each with a status word.
class Communicator {
 public:
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm get() const noexcept { return comm_; }

  /// What kind of failure a rank reports, so that every rank throws the exception type the failing rank threw
  /// (bad input stays gpuml::invalid_input on every rank, a ValueError in Python).
  enum class Failure : char { error = 1, invalid_input, unsupported, out_of_memory, cancelled };

  /// The kind of failure an exception is.
  static Failure failure_of(const std::exception& e) noexcept {
    if (dynamic_cast<const invalid_input*>(&e)) return Failure::invalid_input;
    if (dynamic_cast<const unsupported*>(&e)) return Failure::unsupported;
    if (dynamic_cast<const out_of_memory*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return Failure::out_of_memory;
    if (dynamic_cast<const cancelled*>(&e)) return Failure::cancelled;
    return Failure::error;
  }

  /// Collective: every rank passes its own problem ("" when it has none) and its kind; if any rank has one, every
  /// rank throws, as the exception of the first failing rank's kind (gpuml::error by default), a message naming that
  /// rank and its problem.
  void check(const std::string& problem, Failure kind = Failure::error) const {
    int mine = problem.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_);
    if (!any) return;
    constexpr int kText = 512;  // the kind, then the message
    std::array<char, kText> text{};
    if (!problem.empty()) {
      text[0] = static_cast<char>(kind);
      std::strncpy(text.data() + 1, problem.c_str(), kText - 2);
    }
    std::vector<char> all(static_cast<std::size_t>(kText) * static_cast<std::size_t>(size_));
    MPI_Allgather(text.data(), kText, MPI_CHAR, all.data(), kText, MPI_CHAR, comm_);
    for (int r = 0; r < size_; ++r) {
      const char* m = all.data() + static_cast<std::size_t>(r) * kText;
      if (m[0] == '\0') continue;
      const std::string what = "rank " + std::to_string(r) + " of " + std::to_string(size_) + ": " + std::string(m + 1);
      switch (static_cast<Failure>(m[0])) {
        case Failure::invalid_input: throw invalid_input(what);
        case Failure::unsupported: throw unsupported(what);
        case Failure::out_of_memory: throw out_of_memory(what);
        case Failure::cancelled: throw cancelled(what);
        default: throw error(what);
      }
    }
  }

  /// Collective: runs `work` on this rank, then check()s, so a failure on any rank ends the step on every rank,
  /// with the failing rank's kind of exception.
  template <class Work>
  void guarded(Work&& work) const {
    std::string problem;
    Failure kind = Failure::error;
    try {
      work();
    } catch (const std::exception& e) {
      problem = e.what();
      kind = failure_of(e);
      if (problem.empty()) problem = "an exception without a message";
    } catch (...) {
      problem = "an unknown exception";
    }
    check(problem, kind);
  }

  void sum(std::vector<double>& values) const {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, comm_);
  }
  std::int64_t sum(std::int64_t v) const {
    std::int64_t total = 0;
    MPI_Allreduce(&v, &total, 1, MPI_INT64_T, MPI_SUM, comm_);
    return total;
  }
  /// Every rank's values (any count, none included), concatenated in rank order, on every rank.
  template <class V>
  std::vector<V> concatenate(const std::vector<V>& mine) const {
    const auto counts64 = gather(static_cast<std::int64_t>(mine.size()));
    std::vector<int> counts, offsets;
    int total = 0;
    for (auto c : counts64) {
      counts.push_back(static_cast<int>(c));
      offsets.push_back(total);
      total += static_cast<int>(c);
    }
    std::vector<V> all(static_cast<std::size_t>(total));
    MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), mpi_type<V>(), all.data(), counts.data(), offsets.data(),
                   mpi_type<V>(), comm_);
    return all;
  }
  /// Each rank's value, in rank order.
  std::vector<std::int64_t> gather(std::int64_t v) const {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
    MPI_Allgather(&v, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, comm_);
    return all;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

namespace detail {

/// The local E-step of one rank as a LloydEngine over all ranks: sums, weights, the changed flag and the inertia
/// are added across ranks; labels are this rank's; empty clusters are relocated to the globally farthest samples.
template <class Local, class T>
class DistributedLloyd {
 public:
  DistributedLloyd(const Communicator& comm, Local& local, ShiftedView<T> X, VectorView<T> w, std::int64_t first_row)
      : comm_(comm), local_(local), X_(X), w_(w), first_(first_row) {}

  bool e_step(const Matrix<T>& C, algorithms::ClusterSums& sums) {
    const Eigen::Index k = C.rows(), d = C.cols();
    bool changed = false;
    comm_.guarded([&] { changed = local_.e_step(C, sums); });
    // The exact sums added as integers (the same on any number of ranks), with the changed flag.
    std::vector<std::int64_t> buffer(static_cast<std::size_t>(k * (d + 1) + 1));
    std::copy_n(sums.values.data(), k * d, buffer.begin());
    std::copy_n(sums.weights.data(), k, buffer.begin() + k * d);
    buffer.back() = changed ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_INT64_T, MPI_SUM, comm_.get());
    std::copy_n(buffer.begin(), k * d, sums.values.data());
    std::copy_n(buffer.begin() + k * d, k, sums.weights.data());
    return buffer.back() > 0;
  }

  const Labels& labels() { return local_.labels(); }

  void assign(const Matrix<T>& C) {
    comm_.guarded([&] { local_.assign(C); });
  }

  algorithms::ExactSum inertia(const Matrix<T>& C) {
    algorithms::ExactSum total;
    comm_.guarded([&] { total = local_.inertia(C); });
    total.value = comm_.sum(total.value);
    return total;
  }

  /// scikit-learn's relocation across ranks: the n_empty samples farthest from their old centers, over all ranks
  /// (ties: the higher global index first, as algorithms::relocate_empty_clusters), move to the empty clusters.
  void relocate_empty_clusters(const Matrix<T>& centers_old, Matrix<T>& sums, Vector<T>& weights) {
    const std::int64_t k = centers_old.rows(), d = centers_old.cols();
    std::vector<std::int64_t> empty;
    for (std::int64_t j = 0; j < k; ++j)
      if (weights[j] == T(0)) empty.push_back(j);
    if (empty.empty()) return;
    const auto n_empty = static_cast<std::int64_t>(empty.size());
    // This rank's candidates: its n_empty farthest samples as (distance, global index).
    const Labels& labels = local_.labels();
    const std::int64_t n = X_.rows();
    const std::vector<T> dist = algorithms::distances_to_own_centers(X_, centers_old, labels);  // as one process
    std::vector<std::pair<double, std::int64_t>> mine(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = {double(dist[static_cast<std::size_t>(i)]), first_ + i};
    auto farther = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second > b.second); };
    const auto keep = std::min<std::int64_t>(n_empty, n);
    std::partial_sort(mine.begin(), mine.begin() + keep, mine.end(), farther);
    std::vector<double> offer(static_cast<std::size_t>(2 * n_empty), -1.0);  // (distance, index) pairs; -1: none
    for (std::int64_t t = 0; t < keep; ++t) {
      offer[static_cast<std::size_t>(2 * t)] = mine[static_cast<std::size_t>(t)].first;
      offer[static_cast<std::size_t>(2 * t + 1)] = double(mine[static_cast<std::size_t>(t)].second);
    }
    std::vector<double> all(offer.size() * static_cast<std::size_t>(comm_.size()));
    MPI_Allgather(offer.data(), static_cast<int>(offer.size()), MPI_DOUBLE, all.data(), static_cast<int>(offer.size()),
                  MPI_DOUBLE, comm_.get());
    std::vector<std::pair<double, std::int64_t>> candidates;
    for (std::size_t c = 0; c + 1 < all.size(); c += 2)
      if (all[c + 1] >= 0) candidates.emplace_back(all[c], static_cast<std::int64_t>(all[c + 1]));
    if (candidates.empty()) return;
    std::sort(candidates.begin(), candidates.end(), farther);
    if (candidates.front().first == 0) return;  // more clusters than distinct points
    const auto moves = std::min<std::int64_t>(n_empty, static_cast<std::int64_t>(candidates.size()));
    // The chosen samples' rows, weights and old labels, from their owners (every other rank adds zeros).
    std::vector<double> chosen(static_cast<std::size_t>(moves * (d + 2)), 0.0);
    for (std::int64_t t = 0; t < moves; ++t) {
      const std::int64_t g = candidates[static_cast<std::size_t>(t)].second;
      if (g < first_ || g >= first_ + n) continue;
      const std::int64_t i = g - first_;
      double* row = chosen.data() + t * (d + 2);
      for (std::int64_t f = 0; f < d; ++f) row[f] = double(X_(i, f));
      row[d] = double(w_[i]);
      row[d + 1] = double(labels[i]);
    }
    comm_.sum(chosen);
    for (std::int64_t t = 0; t < moves; ++t) {
      const double* row = chosen.data() + t * (d + 2);
      const std::int64_t new_id = empty[static_cast<std::size_t>(t)], old_id = static_cast<std::int64_t>(row[d + 1]);
      const T wi = static_cast<T>(row[d]);
      for (std::int64_t f = 0; f < d; ++f) {
        const T x = static_cast<T>(row[f]);
        sums(old_id, f) -= x * wi;
        sums(new_id, f) = x * wi;
      }
      weights[new_id] = wi;
      weights[old_id] -= wi;
    }
  }

 private:
  const Communicator& comm_;
  Local& local_;
  ShiftedView<T> X_;
  VectorView<T> w_;
  std::int64_t first_;
};

/// The k-means++ sampling blocks of every rank's rows, in rank order: global block b holds global rows
/// [b * kPlusPlusBlock, (b + 1) * kPlusPlusBlock), as in one process, so a block may straddle ranks. Rank r's local
/// block lb (algorithms::SamplingBlocks with offset(r)) is global block first_block(r) + lb.
class RankBlocks {
 public:
  explicit RankBlocks(const std::vector<std::int64_t>& rows_per_rank) {
    std::int64_t row = 0;
    for (const std::int64_t rows : rows_per_rank) {
      first_row_.push_back(row);
      row += rows;
    }
    first_row_.push_back(row);
  }

  std::int64_t blocks() const { return (total_rows() + algorithms::kPlusPlusBlock - 1) / algorithms::kPlusPlusBlock; }
  /// The rank holding global row g (of the ranks starting at or before it, the last: empty ranks hold none).
  int owner_of_row(std::int64_t g) const {
    return static_cast<int>(std::upper_bound(first_row_.begin(), first_row_.end(), g) - first_row_.begin()) - 1;
  }
  std::int64_t first_row(int r) const { return first_row_[static_cast<std::size_t>(r)]; }
  std::int64_t rows(int r) const { return first_row(r + 1) - first_row(r); }
  std::int64_t total_rows() const { return first_row_.back(); }
  /// Rank r's first row's place in its block, and that block.
  std::int64_t offset(int r) const { return first_row(r) % algorithms::kPlusPlusBlock; }
  std::int64_t first_block(int r) const { return first_row(r) / algorithms::kPlusPlusBlock; }

  /// One rank's rows of a block: the rank, its local block and the row count.
  struct Part {
    int rank;
    std::int64_t local_block, rows;
  };
  /// The parts of block b, in rank order (ranks without rows in it left out).
  std::vector<Part> parts(std::int64_t b) const {
    const std::int64_t begin = b * algorithms::kPlusPlusBlock,
                       end = std::min(total_rows(), begin + algorithms::kPlusPlusBlock);
    std::vector<Part> out;
    for (int r = owner_of_row(begin); r + 1 < static_cast<int>(first_row_.size()) && first_row(r) < end; ++r) {
      const std::int64_t rows_in = std::min(end, first_row(r + 1)) - std::max(begin, first_row(r));
      if (rows_in > 0) out.push_back({r, b - first_block(r), rows_in});
    }
    return out;
  }

 private:
  std::vector<std::int64_t> first_row_;
};

/// A rank's sampling masses (its local blocks: algorithms::WeightMasses or a k-means++ engine) seen as the masses of
/// all ranks' rows in global blocks, as algorithms::Cumsum reads them. Block sums are exact integers, added across
/// ranks (a block straddling ranks adds each rank's part), then rounded once. Every call is collective: every rank
/// draws the same numbers from the same sums, so every rank asks for the same blocks in the same order.
template <class Local>
class SpreadMasses {
 public:
  SpreadMasses(const Communicator& comm, const RankBlocks& blocks, Local& local)
      : comm_(comm), blocks_(blocks), local_(local) {
    refresh();
  }
  /// Adds the ranks' block sums again (after the local masses changed).
  void refresh() {
    std::vector<std::int64_t> all(static_cast<std::size_t>(blocks_.blocks()), 0);
    int exponent = 0;
    comm_.guarded([&] {
      const algorithms::BlockSums& mine = local_.exact_block_sums();
      exponent = mine.exponent;  // the same on every rank: from the fit's frame
      const std::int64_t first = blocks_.first_block(comm_.rank());
      for (std::size_t lb = 0; lb < mine.exact.size(); ++lb) all[static_cast<std::size_t>(first) + lb] += mine.exact[lb];
    });
    MPI_Allreduce(MPI_IN_PLACE, all.data(), static_cast<int>(all.size()), MPI_INT64_T, MPI_SUM, comm_.get());
    sums_.exact = std::move(all);
    sums_.exponent = exponent;
    sums_.round();
  }

  std::int64_t block_rows() const { return algorithms::kPlusPlusBlock; }
  const std::vector<double>& block_sums() const { return sums_.values; }
  const algorithms::BlockSums& exact_block_sums() const { return sums_; }
  void prefetch_all() {
    comm_.guarded([&] {
      if constexpr (requires { local_.prefetch_all(); }) local_.prefetch_all();
    });
  }
  void prefetch(const std::vector<std::int64_t>& ids) {
    std::vector<std::int64_t> mine;
    for (std::int64_t b : ids)
      for (const RankBlocks::Part& part : blocks_.parts(b))
        if (part.rank == comm_.rank()) mine.push_back(part.local_block);
    comm_.guarded([&] {
      if (!mine.empty()) local_.prefetch(mine);
    });
  }
  /// Block b's masses: each rank's part read by that rank and broadcast, in rank order.
  std::vector<double> block(std::int64_t b) {
    std::vector<double> mass;
    for (const RankBlocks::Part& part : blocks_.parts(b)) {
      std::vector<double> piece(static_cast<std::size_t>(part.rows));
      comm_.guarded([&] {
        if (part.rank == comm_.rank()) piece = local_.block(part.local_block);
      });
      MPI_Bcast(piece.data(), static_cast<int>(piece.size()), MPI_DOUBLE, part.rank, comm_.get());
      mass.insert(mass.end(), piece.begin(), piece.end());
    }
    return mass;
  }

 private:
  const Communicator& comm_;
  const RankBlocks& blocks_;
  Local& local_;
  algorithms::BlockSums sums_;
};

/// A rank's k-means++ engine (host or device, on its own rows) as one engine over all ranks: the potentials' exact
/// integers are added across ranks, masses are spread (SpreadMasses).
template <class Local, class T>
class DistributedPlusPlus : public SpreadMasses<Local> {
 public:
  DistributedPlusPlus(const Communicator& comm, const RankBlocks& blocks, Local& local)
      : SpreadMasses<Local>(comm, blocks, local), comm_(comm), local_(local) {}

  void start(const Matrix<T>& c) {
    comm_.guarded([&] { local_.start(c); });
    this->refresh();
  }
  std::vector<algorithms::ExactSum> potentials(const Matrix<T>& cand) {
    std::vector<algorithms::ExactSum> pot(static_cast<std::size_t>(cand.rows()));
    comm_.guarded([&] { pot = local_.potentials(cand); });
    std::vector<std::int64_t> values;
    for (const algorithms::ExactSum& p : pot) values.push_back(p.value);
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, MPI_SUM, comm_.get());
    for (std::size_t t = 0; t < pot.size(); ++t) pot[t].value = values[t];
    return pot;
  }
  void keep(int t) {
    comm_.guarded([&] { local_.keep(t); });
    this->refresh();
  }

 private:
  const Communicator& comm_;
  Local& local_;
};

/// Rows of all ranks by global index, each sent by its owner (exactly: the bits of T).
template <class T>
Matrix<T> gather_rows(const Communicator& comm, const RankBlocks& blocks, MatrixView<T> X,
                      const std::vector<std::int64_t>& ids) {
  Matrix<T> out(static_cast<Eigen::Index>(ids.size()), X.cols());
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const int owner = blocks.owner_of_row(ids[t]);
    if (owner == comm.rank()) out.row(static_cast<Eigen::Index>(t)) = X.row(ids[t] - blocks.first_row(owner));
    MPI_Bcast(out.row(static_cast<Eigen::Index>(t)).data(), static_cast<int>(X.cols()), mpi_type<T>(), owner, comm.get());
  }
  return out;
}

/// scikit-learn's _is_same_clustering over every rank's labels: one mapping of a's clusters onto b's for all ranks.
inline bool same_clustering(const Communicator& comm, const Labels& a, const Labels& b, int k) {
  constexpr std::int32_t kUnseen = -1, kClash = -2;
  std::vector<std::int32_t> mapping(static_cast<std::size_t>(k), kUnseen);
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    auto& m = mapping[static_cast<std::size_t>(a[i])];
    if (m == kUnseen) m = b[i];
    else if (m != b[i]) m = kClash;
  }
  std::vector<std::int32_t> all(mapping.size() * static_cast<std::size_t>(comm.size()));
  MPI_Allgather(mapping.data(), k, MPI_INT32_T, all.data(), k, MPI_INT32_T, comm.get());
  for (int j = 0; j < k; ++j) {
    std::int32_t seen = kUnseen;
    for (int r = 0; r < comm.size(); ++r) {
      const std::int32_t m = all[static_cast<std::size_t>(r) * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
      if (m == kClash || (m != kUnseen && seen != kUnseen && m != seen)) return false;
      if (m != kUnseen) seen = m;
    }
  }
  return true;
}

/// The rows of every rank of a communicator, as the library's one k-means fit (fit_kmeans_on) asks for them: column
/// sums and weight summaries added across ranks, each rank's checks of its own rows made collective, and k-means++
/// seeding and Lloyd runs whose engines work on each rank's rows and add across ranks. Every call is collective.
template <class T>
class RankRows {
 public:
  RankRows(const Communicator& comm, Backend backend, std::int64_t n_local)
      : comm_(comm),
        backend_(n_local > 0 ? std::move(backend) : Backend::host()),  // a rank without rows needs no device
        rows_per_rank_(comm.gather(n_local)),
        blocks_(rows_per_rank_) {
    for (int r = 0; r < comm_.rank(); ++r) first_ += rows_per_rank_[static_cast<std::size_t>(r)];
    for (const std::int64_t rows : rows_per_rank_) n_ += rows;
  }

  void check_non_empty(MatrixView<T> X) const {
    if (n_ == 0 || X.cols() == 0)
      throw invalid_input("X is empty on every rank (" + std::to_string(n_) + " samples, " + std::to_string(X.cols()) +
                          " features); at least one sample and one feature are required");
  }
  std::int64_t total_rows(std::int64_t) const { return n_; }
  template <class Work>
  void guarded(Work&& work) const {
    comm_.guarded(std::forward<Work>(work));
  }
  /// `smallest` may differ between ranks (each rank's configuration): a rank that did not look offers 0, so the
  /// minimum says "unknown" on every rank.
  /// False on every rank where any rank's pass found a sum that is not finite (each rank then searches its rows).
  bool column_range(MatrixView<T> X, algorithms::ColumnRange& range, bool smallest) const {
    int finite = algorithms::column_range(X, range, smallest) ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &finite, 1, MPI_INT, MPI_LAND, comm_.get());
    // Extremes over every rank (a rank without rows offers +inf and -inf).
    MPI_Allreduce(MPI_IN_PLACE, range.lowest.data(), static_cast<int>(range.lowest.size()), MPI_DOUBLE, MPI_MIN, comm_.get());
    MPI_Allreduce(MPI_IN_PLACE, range.highest.data(), static_cast<int>(range.highest.size()), MPI_DOUBLE, MPI_MAX, comm_.get());
    MPI_Allreduce(MPI_IN_PLACE, range.smallest.data(), static_cast<int>(range.smallest.size()), MPI_DOUBLE, MPI_MIN, comm_.get());
    return finite != 0;
  }
  /// Exact: every rank's integers added, so the sums are one process's on any number of ranks.
  Eigen::RowVectorXd exact_column_sums(MatrixView<T> X, const Eigen::RowVectorXd* center,
                                       const Eigen::RowVectorXi& exponents) const {
    algorithms::ExactColumnSums sums = algorithms::exact_column_sums(X, center, exponents);
    MPI_Allreduce(MPI_IN_PLACE, sums.whole.data(), static_cast<int>(sums.whole.size()), MPI_INT64_T, MPI_SUM, comm_.get());
    MPI_Allreduce(MPI_IN_PLACE, sums.fraction.data(), static_cast<int>(sums.fraction.size()), MPI_INT64_T, MPI_SUM,
                  comm_.get());
    return sums.to_double();
  }
  /// The sum only decides whether any weight is positive (any grouping does); k-means++'s first draw normalises by
  /// an exact sum of its own (starting_centers).
  algorithms::WeightSummary weight_summary(VectorView<T> w) {
    algorithms::WeightSummary local;
    comm_.guarded([&] { local = algorithms::check_sample_weight(w); });
    std::vector<double> v{local.sum, static_cast<double>(local.positive)};
    comm_.sum(v);
    double largest = local.largest;
    MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, comm_.get());
    return {v[0], static_cast<Eigen::Index>(v[1]), largest};
  }

  /// Greedy k-means++ across ranks (algorithms::plus_plus_loop): each rank's engine works on its rows in the global
  /// sampling blocks (RankBlocks); draws read the block masses of every rank; the candidates' rows come from their
  /// owners. Every sum is exact in `frame`'s fixed point (the fit's, the same on every rank), so the draws are one
  /// process's bit for bit. `chosen` gets global indices.
  Matrix<T> starting_centers(const ShiftedView<T>& Xc, VectorView<T> w, const KMeansParams& p,
                             algorithms::NumpyRandomState& random, const algorithms::SumFrame& frame,
                             std::vector<std::int64_t>* chosen = nullptr) {
    const MatrixView<T> X = centred(Xc);
    const int k = p.n_clusters, trials = algorithms::plus_plus_trials(k);
    const std::int64_t offset = blocks_.offset(comm_.rank());
    std::optional<kernels::PlusPlusEngine<T>> on_device;
    std::optional<host::kmeans_detail::HostPlusPlus<T>> on_host;
    algorithms::ExactSum weight_total;
    comm_.guarded([&] {
      run_on<T>(
          backend_, "distributed k-means++ seeding",
          [&] { on_device.emplace(*backend_.device(), X, w, trials, 0, nullptr, frame, offset); },
          [&] { on_host.emplace(X, w, trials, frame, offset); });
      weight_total = algorithms::exact_weight_sum(w, frame.weight_exponent<T>());
    });
    weight_total.value = comm_.sum(weight_total.value);
    algorithms::WeightMasses<T> local_weights(w, weight_total, frame.probability_exponent<T>(), offset);
    SpreadMasses<algorithms::WeightMasses<T>> weights(comm_, blocks_, local_weights);
    auto rows = [&](const std::vector<std::int64_t>& ids) { return gather_rows<T>(comm_, blocks_, X, ids); };
    auto run = [&](auto& engine) {
      DistributedPlusPlus<std::decay_t<decltype(engine)>, T> spread(comm_, blocks_, engine);
      return algorithms::plus_plus_loop<T>(spread, weights, rows, n_, k, random, chosen);
    };
    return on_device ? run(*on_device) : run(*on_host);
  }

  /// One Lloyd run across ranks from `start`: each rank's engine on its rows (DistributedLloyd). A device engine
  /// centres the rows on its upload and takes the E-step one process would (bounded where it pays); the host
  /// engine reads the centred copy.
  algorithms::LloydResult<T> lloyd(const ShiftedView<T>& Xc, VectorView<T> w, const Matrix<T>& start,
                                   const KMeansParams& p, double tol_absolute, const algorithms::SumFrame& frame) {
    const auto k = static_cast<std::uint32_t>(start.rows());
    const KMeansEStep e_step = gpuml::detail::configured_e_step(p.e_step);
    std::optional<kernels::LloydEngine<T>> on_device;
    std::optional<host::kmeans_detail::HostLloyd<T>> on_host;
    comm_.guarded([&] {
      run_on<T>(
          backend_, "distributed KMeans",
          [&] {
            on_device.emplace(*backend_.device(), Xc, w.data(), k, e_step, nullptr, std::optional<KMeansTileParams>{},
                              frame);
            on_device->reset_labels();
          },
          [&] { on_host.emplace(centred(Xc), w, frame); });
    });
    auto run = [&](auto& engine) {
      DistributedLloyd<std::decay_t<decltype(engine)>, T> spread(comm_, engine, Xc, w, first_);
      return algorithms::lloyd_loop<T>(spread, Xc, w, start, p.max_iter, tol_absolute, p.verbose, p.on_iteration);
    };
    return on_device ? run(*on_device) : run(*on_host);
  }

  bool same_clustering(const Labels& a, const Labels& b, int k) const { return detail::same_clustering(comm_, a, b, k); }
  int distinct_labels(const Labels& labels, int k) const {
    std::vector<std::int32_t> seen(static_cast<std::size_t>(k), 0);
    for (Eigen::Index i = 0; i < labels.size(); ++i) seen[static_cast<std::size_t>(labels[i])] = 1;
    MPI_Allreduce(MPI_IN_PLACE, seen.data(), k, MPI_INT32_T, MPI_MAX, comm_.get());
    return static_cast<int>(std::count(seen.begin(), seen.end(), 1));
  }
  int uploads() const { return 0; }
  double upload_seconds() const { return 0; }

 private:
  /// This rank's rows less the mean, copied once: the distributed engines read a plain matrix.
  MatrixView<T> centred(const ShiftedView<T>& Xc) {
    if (centred_.rows() != Xc.rows() || centred_.cols() != Xc.cols()) {
      centred_.resize(Xc.rows(), Xc.cols());
      if (Xc.rows() > 0) Xc.copy_rows(0, Xc.rows(), centred_.data());
    }
    return centred_;
  }

  const Communicator& comm_;
  Backend backend_;
  std::vector<std::int64_t> rows_per_rank_;
  RankBlocks blocks_;
  std::int64_t first_ = 0, n_ = 0;
  Matrix<T> centred_;
};

}  // namespace detail

/// KMeans over the ranks of a communicator. Each rank passes its own rows to fit (shards of one data set in rank
/// order; any sizes, an empty shard included) and gets the same cluster_centers, inertia and n_iter as every other
/// rank, and labels for its own rows. Parameters are KMeansParams; every rank must pass the same ones. Initial
/// centers: an array (init_centers, rank 0's is used) or greedy k-means++ across ranks (init="k-means++", n_init
/// runs from random_state, as one process draws them); init="random" across ranks is refused with
/// gpuml::unsupported. on_iteration and keep_going may be set on any ranks: false on one stops every rank at the
/// same iteration with gpuml::cancelled (keep_going is asked once per iteration, not within an E-step).
template <class T>
class KMeans {
  static_assert(is_supported_scalar<T>, "KMeans supports float and double");

 public:
  explicit KMeans(KMeansParams params, MPI_Comm comm = MPI_COMM_WORLD, Backend backend = default_backend())
      : params_(std::move(params)), comm_(comm), backend_(std::move(backend)) {}

  /// Collective: every rank calls it with its rows (and, optionally, their weights).
  KMeans& fit(MatrixView<T> X) {
    const Vector<T> w = Vector<T>::Ones(X.rows());
    return fit(X, w);
  }

  KMeans& fit(MatrixView<T> X, VectorView<T> sample_weight) {
    algorithms::NumpyRandomState random(params_.random_state);
    return fit(X, sample_weight, random);
  }

  /// The same, drawing k-means++'s starting centers from numpy's stream in the given state (which every rank must
  /// pass the same; the Python binding passes a RandomState's) instead of from params.random_state, and leaving it
  /// advanced as one process's fit leaves it.
  KMeans& fit(MatrixView<T> X, VectorView<T> sample_weight, algorithms::NumpyRandomState& random) {
    KMeansParams p = params_;
    const std::int64_t n_local = X.rows(), d_local = X.cols();
    // Shapes first, on every rank, so that a bad shard ends every rank before any work.
    const auto features = comm_.gather(d_local);
    const auto scalar_bytes = comm_.gather(static_cast<std::int64_t>(sizeof(T)));
    std::string problem;
    for (int r = 0; r < comm_.size(); ++r) {
      if (features[static_cast<std::size_t>(r)] != features[0] && problem.empty())
        problem = "shards disagree on the number of features: rank 0 has " + std::to_string(features[0]) + ", rank " +
                  std::to_string(r) + " has " + std::to_string(features[static_cast<std::size_t>(r)]);
      if (scalar_bytes[static_cast<std::size_t>(r)] != scalar_bytes[0] && problem.empty())
        problem = "shards disagree on the scalar type (float32 against float64)";
    }
    comm_.check(comm_.rank() == 0 ? problem : std::string(), Communicator::Failure::invalid_input);
    comm_.guarded([&] {
      if (!p.init_centers && p.init != "k-means++")
        throw unsupported("distributed KMeans seeds with k-means++ or takes initial centers (init_centers); "
                          "init=\"random\" across ranks is not built");
    });
    // An array init: rank 0's, the same on every rank.
    std::vector<double> init;
    std::int64_t init_shape[2] = {0, 0};
    if (comm_.rank() == 0 && p.init_centers) {
      init.assign(p.init_centers->data(), p.init_centers->data() + p.init_centers->size());
      init_shape[0] = p.init_centers->rows();
      init_shape[1] = p.init_centers->cols();
    }
    MPI_Bcast(init_shape, 2, MPI_INT64_T, 0, comm_.get());
    if (init_shape[0] * init_shape[1] > 0) {
      init.resize(static_cast<std::size_t>(init_shape[0] * init_shape[1]));
      MPI_Bcast(init.data(), static_cast<int>(init.size()), MPI_DOUBLE, 0, comm_.get());
      p.init_centers = Eigen::Map<const Matrix<double>>(init.data(), init_shape[0], init_shape[1]);
    } else if (p.init_centers) {
      p.init_centers.reset();  // rank 0 gave none: every rank seeds
    }

    // Warnings and verbose lines from rank 0 only (every rank computes them: the inertia a verbose line prints is a
    // collective): rank 0 keeps this thread's handlers (a caller's, as the Python binding's), the others are silenced.
    // The handler must outlive the scope: a named object.
    const WarningHandler silent([](const std::string&) {});
    std::optional<ScopedThreadMessages> quiet_ranks;
    if (comm_.rank() != 0) quiet_ranks.emplace(silent, silent);
    // A cancellation on any rank (on_iteration or keep_going false) stops every rank at the same iteration with
    // gpuml::cancelled. keep_going is asked once per iteration, beside on_iteration, not between parts of an E-step:
    // one rank's parts are not another's, so a poll there could not be answered together. Whether any rank set a
    // callback is agreed first, so ranks that set none still join each iteration's vote.
    int mine = params_.on_iteration || params_.keep_going ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_.get());
    p.on_iteration = {};
    if (any)
      p.on_iteration = [&](const LloydIteration& it) {
        bool go_on = true;
        comm_.guarded([&] {
          go_on = (!params_.on_iteration || params_.on_iteration(it)) && (!params_.keep_going || params_.keep_going());
        });
        std::vector<double> stop(1, go_on ? 0.0 : 1.0);
        comm_.sum(stop);
        return stop[0] == 0;
      };
    p.keep_going = {};

    detail::RankRows<T> rows(comm_, backend_, n_local);
    KMeansFit<T> fit = fit_kmeans_on<T>(rows, X, &sample_weight, p, random);
    centers_ = std::move(fit.cluster_centers);
    labels_ = std::move(fit.labels);
    inertia_ = fit.inertia;
    n_iter_ = fit.n_iter;
    iteration_seconds_ = fit.iteration_seconds;
    fitted_ = true;
    return *this;
  }

  const Matrix<T>& cluster_centers() const { return require_fitted(), centers_; }
  /// This rank's labels (of the rows it passed to fit).
  const Labels& labels() const { return require_fitted(), labels_; }
  double inertia() const { return require_fitted(), inertia_; }
  int n_iter() const { return require_fitted(), n_iter_; }
  /// The nearest center of each of this rank's rows, as gpuml::KMeans::predict with these centers. Not collective:
  /// every rank holds the centers, so each rank predicts its own rows on its own backend (no rows: no labels).
  Labels predict(MatrixView<T> X_local) const {
    require_fitted();
    if (X_local.rows() == 0 && X_local.cols() == centers_.cols()) return Labels();
    gpuml::KMeans<T> local(params_, backend_);
    local.set_cluster_centers(centers_);
    return local.predict(X_local);
  }
  /// Wall time of the kept run's Lloyd iterations (E-steps, the collectives, M-steps), without seeding and set-up.
  double iteration_seconds() const { return require_fitted(), iteration_seconds_; }
  const Communicator& communicator() const noexcept { return comm_; }

 private:
  void require_fitted() const {
    if (!fitted_) throw not_fitted("This KMeans instance is not fitted yet. Call 'fit' with appropriate arguments first.");
  }

  KMeansParams params_;
  Communicator comm_;
  Backend backend_;
  Matrix<T> centers_;
  Labels labels_;
  double inertia_ = 0;
  int n_iter_ = 0;
  double iteration_seconds_ = 0;
  bool fitted_ = false;
};

}  // namespace gpuml::mpi
