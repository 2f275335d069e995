// Distributed KMeans (gpuml/mpi/kmeans.hpp), run under mpirun with several ranks (ctest uses 3): every rank makes
// the same data from one seed (rank 0's, broadcast), keeps its own rows, and checks the distributed fit against a
// fit of all the rows in one process; then bad shards and failures on one rank end every rank with an error.
#include "../support.hpp"

#include <gpuml/mpi/kmeans.hpp>
#include <gpuml/mpi/neighbors.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

using gpuml::KMeansParams;
using gpuml::Labels;
using gpuml::Matrix;
using gpuml::testing::random_matrix;

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int ranks() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Blobs: k centers far apart, uniform noise.
template <class T>
Matrix<T> blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt) {
  const Matrix<double> centers = random_matrix<double>(k, d, salt, -10.0, 10.0);
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -0.3, 0.3);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).template cast<T>();
  return X;
}

/// Blobs of small integers, mirrored (row n - 1 - i is minus row i, a middle row of zeros) so that every column's
/// mean is exactly 0: centring changes nothing, every distance and every partial sum (integer weights) is an exact
/// integer, and so a distributed fit has nothing to round differently from one process: it must be the same bit
/// for bit, and any difference is a fault of the distribution, not rounding.
template <class T>
Matrix<T> integer_blobs(Eigen::Index n, Eigen::Index d, Eigen::Index k, std::uint64_t salt) {
  const Matrix<double> centers = random_matrix<double>(k, d, salt, -10.0, 10.0).array().round().matrix();
  const Matrix<double> noise = random_matrix<double>(n, d, salt + 1, -2.49, 2.49).array().round().matrix();
  Matrix<T> X = Matrix<T>::Zero(n, d);
  for (Eigen::Index i = 0; i < n / 2; ++i) {
    X.row(i) = (centers.row(i % k) + noise.row(i)).template cast<T>();
    X.row(n - 1 - i) = -X.row(i);
  }
  return X;
}

/// This rank's first row and row count when n rows are cut into uneven shards (the last rank's may be empty).
std::pair<Eigen::Index, Eigen::Index> shard(Eigen::Index n, bool leave_last_empty) {
  const Eigen::Index parts = leave_last_empty && ranks() > 1 ? ranks() - 1 : ranks();
  if (rank() >= parts) return {n, 0};
  // Uneven on purpose: shard r gets a share proportional to r + 1.
  const Eigen::Index total = parts * (parts + 1) / 2;
  Eigen::Index first = 0;
  for (int r = 0; r < rank(); ++r) first += n * (r + 1) / total;
  const Eigen::Index rows = rank() == parts - 1 ? n - first : n * (rank() + 1) / total;
  return {first, rows};
}

std::vector<gpuml::testing::NamedBackend> rank_backends() { return gpuml::testing::backends(); }

/// A distributed fit against one process's fit on the same engine: n_iter, inertia, centers and the labels of this
/// rank's rows identical bit for bit (the per-cluster sums and the inertia are exact, algorithms::ClusterSums: no
/// cut of the rows into ranks changes them).
template <class T>
void expect_same_fit(const gpuml::mpi::KMeans<T>& many, const gpuml::KMeans<T>& one, Eigen::Index first,
                     Eigen::Index rows, const std::string& what) {
  EXPECT_EQ(many.n_iter(), one.n_iter()) << what;
  EXPECT_EQ(many.inertia(), one.inertia()) << what;
  EXPECT_TRUE(many.labels() == one.labels().segment(first, rows)) << what;
  EXPECT_TRUE(many.cluster_centers() == one.cluster_centers()) << what << ": centers differ by "
      << (many.cluster_centers() - one.cluster_centers()).cwiseAbs().maxCoeff();
}

template <class T>
class DistributedKMeans : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DistributedKMeans, Scalars);

// The distributed fit against one process's fit of all rows on the same engine: labels of this rank's rows,
// centers, inertia, n_iter. Empty clusters (two initial centers far from every sample) are relocated across ranks
// as in one process (integer distances tie often: the higher global index goes first on every rank). Integer data
// (integer_blobs) and real data, with random weights: the same bit for bit.
TYPED_TEST(DistributedKMeans, MatchesOneProcess) {
  using T = TypeParam;
  for (const auto& b : rank_backends()) {
    for (const bool integers : {true, false}) {
      for (const bool last_empty : {false, true}) {
        for (const bool with_empty_clusters : {false, true}) {
          const Eigen::Index n = 2003, d = 5, k = 7;
          const Matrix<T> X = integers ? integer_blobs<T>(n, d, k, 11) : blobs<T>(n, d, k, 11);
          const gpuml::Vector<T> w = random_matrix<T>(n, 1, 12, 0.25, 2.0).col(0);
          KMeansParams p;
          p.n_clusters = static_cast<int>(k);
          Matrix<double> init = (X.topRows(k).template cast<double>().array() + 0.5).matrix();
          if (with_empty_clusters) init.row(5).setConstant(1e3), init.row(6).setConstant(-1e3);
          p.init_centers.emplace(init);
          p.max_iter = 40;
          p.tol = 1e-6;
          gpuml::KMeans<T> one(p, b.backend);
          one.fit(X, w);
          const auto [first, rows] = shard(n, last_empty);
          gpuml::mpi::KMeans<T> many(p, MPI_COMM_WORLD, b.backend);
          many.fit(X.middleRows(first, rows), w.segment(first, rows));
          const std::string what = b.name + (integers ? " integers" : " reals") + (last_empty ? " last shard empty" : "") +
                                   (with_empty_clusters ? " relocation" : "");
          expect_same_fit(many, one, first, rows, what);
          // the same centers: each rank's predict is one process's on its rows
          EXPECT_TRUE(many.predict(X.middleRows(first, rows)) == one.predict(X).segment(first, rows)) << what;
        }
      }
    }
  }
}

// A shard with another feature count: refused on every rank, naming the ranks, before any work.
TEST(DistributedKMeansFaults, MismatchedShardsEndEveryRank) {
  const Matrix<double> X = random_matrix<double>(50, rank() == ranks() - 1 && ranks() > 1 ? 4 : 3, 21);
  KMeansParams p;
  p.n_clusters = 2;
  p.init_centers = Matrix<double>::Ones(2, 3);
  gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
  if (ranks() == 1) GTEST_SKIP() << "needs two ranks";
  try {
    km.fit(X);
    ADD_FAILURE() << "no error";
  } catch (const gpuml::error& e) {
    EXPECT_NE(std::string(e.what()).find("number of features"), std::string::npos) << e.what();
  }
}

// Bad values on one rank (NaN): every rank throws gpuml::invalid_input (that rank's kind), naming that rank.
TEST(DistributedKMeansFaults, BadValuesOnOneRankEndEveryRank) {
  Matrix<double> X = random_matrix<double>(40, 3, 22);
  if (rank() == ranks() - 1) X(7, 1) = std::nan("");
  KMeansParams p;
  p.n_clusters = 2;
  p.init_centers = Matrix<double>::Ones(2, 3);
  gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
  try {
    km.fit(X);
    ADD_FAILURE() << "no error";
  } catch (const gpuml::invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(ranks() - 1)), std::string::npos) << e.what();
  }
  EXPECT_FALSE(km.communicator().size() < 1);
}

// A failure during the iterations on one rank (its iteration callback throws at iteration 1): every rank stops at
// the same iteration with that rank's message, no rank waits for the others.
TEST(DistributedKMeansFaults, AFailureDuringTheFitEndsEveryRank) {
  const Matrix<double> X = blobs<double>(600, 3, 4, 23);
  KMeansParams p;
  p.n_clusters = 4;
  p.init_centers = (X.topRows(4).array() + 0.5).matrix();
  p.tol = 0;
  p.max_iter = 50;
  p.on_iteration = [](const gpuml::LloydIteration& it) {
    if (rank() == 0 && it.iteration == 1) throw std::runtime_error("rank 0 lost its disk");
    return true;
  };
  gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
  try {
    km.fit(X.middleRows(200 * (rank() % 3), 200));
    ADD_FAILURE() << "no error";
  } catch (const gpuml::error& e) {
    EXPECT_NE(std::string(e.what()).find("lost its disk"), std::string::npos) << e.what();
  }
}

// A cancellation asked on one rank alone (its on_iteration, or its keep_going, says stop; the other ranks set no
// callback): every rank stops at the same iteration with gpuml::cancelled, and no rank's estimator is fitted.
TEST(DistributedKMeansFaults, ACancellationOnOneRankStopsEveryRank) {
  const Matrix<double> X = random_matrix<double>(900, 3, 24);
  const Matrix<double> mine = X.middleRows(300 * (rank() % 3), 300);
  const bool asker = rank() == ranks() - 1;
  for (const bool by_keep_going : {false, true}) {
    SCOPED_TRACE(by_keep_going ? "keep_going" : "on_iteration");
    KMeansParams p;
    p.n_clusters = 8;
    p.init_centers = X.topRows(8);
    p.tol = 0;
    p.max_iter = 100;
    int polls = 0;
    if (asker && by_keep_going) p.keep_going = [&] { return ++polls < 2; };
    if (asker && !by_keep_going) p.on_iteration = [&](const gpuml::LloydIteration&) { return ++polls < 2; };
    int iterations = 0;  // seen by an observer on rank 0 that never stops the fit
    if (rank() == 0 && !asker) p.on_iteration = [&](const gpuml::LloydIteration&) { return ++iterations > 0; };
    gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
    EXPECT_THROW(km.fit(mine), gpuml::cancelled);
    EXPECT_THROW((void)km.labels(), gpuml::not_fitted);
    if (asker) {
      EXPECT_EQ(polls, 2);
    }
    if (rank() == 0 && !asker) {
      EXPECT_EQ(iterations, 2);
    }
  }
}

/// Rows [first, first + rows) of n for this rank under one of three cuts: 0, shard(n, false); 1, shard(n, true) (the
/// last shard empty); 2, the first shard empty, the second 700 rows (ending inside the first sampling block), the
/// last the rest.
std::pair<Eigen::Index, Eigen::Index> cut(Eigen::Index n, int mode) {
  if (mode < 2 || ranks() == 1) return shard(n, mode == 1);
  const Eigen::Index second = ranks() == 2 ? n : 700;
  if (rank() == 0) return {0, 0};
  if (rank() == 1) return {0, second};
  if (rank() == ranks() - 1) return {second, n - second};
  return {second, 0};
}

/// Real-valued rows mirrored through the origin (row n - 1 - i is minus row i, the middle row zero), drawn from
/// `points` distinct random points, with weights mirrored too and the zero row heavy: the first center is almost
/// surely the zero row, and then a candidate and its mirror image have equal potentials in exact arithmetic (the
/// same terms in another order), so any rounding that depends on the cut of the rows decides such a tie.
template <class T>
std::pair<Matrix<T>, gpuml::Vector<T>> mirrored(Eigen::Index n, Eigen::Index d, Eigen::Index points, std::uint64_t salt) {
  const Matrix<T> p = random_matrix<T>(points, d, salt, -10.0, 10.0);
  const gpuml::Vector<T> u = random_matrix<T>(n, 1, salt + 1, 0.25, 2.0).col(0);
  Matrix<T> X = Matrix<T>::Zero(n, d);
  gpuml::Vector<T> w(n);
  for (Eigen::Index i = 0; i < n / 2; ++i) {
    X.row(i) = p.row(i % points);
    X.row(n - 1 - i) = -X.row(i);
    w[i] = w[n - 1 - i] = u[i];
  }
  if (n % 2) w[n / 2] = T(1e5);
  return {X, w};
}

/// One k-means++ seeding (one run's draws) of the rows of `rows` (this process's, or every rank's): the chosen
/// samples' indices and the centers (centred), as the fit draws them.
template <class T, class Rows>
std::vector<std::int64_t> seeding(Rows& rows, const Matrix<T>& X, const gpuml::Vector<T>& w, const KMeansParams& p,
                                  Matrix<T>& centers) {
  const gpuml::VectorView<T> weights(w);
  const gpuml::detail::KMeansInputs<T> in(rows, X, &weights, p);
  const gpuml::ShiftedView<T> Xc(X, in.mean.data());
  gpuml::algorithms::NumpyRandomState random(p.random_state);
  std::vector<std::int64_t> chosen;
  centers = rows.starting_centers(Xc, in.w, p, random, in.frame, &chosen);
  return chosen;
}

// k-means++ seeding across ranks (greedy, n_init runs from one random_state) against one process on the same
// engine, on real-valued data with real-valued weights: sampling blocks are global (a block may straddle ranks) and
// every block sum, potential and the weights' total is an exact fixed-point sum, so the chosen samples, the seeds and
// the fit are the same bit for bit on any cut: shard boundaries inside blocks, an empty shard first or last. The
// mirrored data makes ties between a candidate and its mirror image, which inexact sums decide by their rounding.
TYPED_TEST(DistributedKMeans, PlusPlusSeedingAcrossRanksMatchesOneProcess) {
  using T = TypeParam;
  for (const auto& b : rank_backends()) {
    for (const bool mirror : {false, true}) {
      const Eigen::Index n = 3001, d = 5;  // 3 sampling blocks in one process, the last of 953 samples
      const int k = mirror ? 5 : 9;
      Matrix<T> X;
      gpuml::Vector<T> w;
      if (mirror) {
        std::tie(X, w) = mirrored<T>(n, d, 4, 43);
      } else {
        X = blobs<T>(n, d, k, 41);
        w = random_matrix<T>(n, 1, 42, 0.1, 2.5).col(0);
        for (Eigen::Index i = 0; i < n; i += 13) w[i] = T(0);
      }
      for (int s = 0; s < (mirror ? 3 : 1); ++s) {
        KMeansParams p;
        p.n_clusters = k;
        p.n_init = 2;
        p.random_state = (gpuml::testing::test_seed() + 7919 * s) % 100000;
        p.max_iter = 30;
        // One process's seeding and fit, then every cut's across the ranks.
        Matrix<T> one_centers;
        gpuml::detail::LocalRows<T> local(b.backend);
        const std::vector<std::int64_t> one_chosen = seeding<T>(local, X, w, p, one_centers);
        gpuml::KMeans<T> one(p, b.backend);
        one.fit(X, w);
        for (int mode = 0; mode < 3; ++mode) {
          const auto [first, rows] = cut(n, mode);
          const Matrix<T> X_local = X.middleRows(first, rows);
          const gpuml::Vector<T> w_local = w.segment(first, rows);
          const std::string what = b.name + (mirror ? " mirrored" : " blobs") + " cut " + std::to_string(mode) +
                                   " random_state " + std::to_string(p.random_state);
          Matrix<T> many_centers;
          gpuml::mpi::Communicator comm;
          gpuml::mpi::detail::RankRows<T> spread(comm, b.backend, rows);
          const std::vector<std::int64_t> many_chosen = seeding<T>(spread, X_local, w_local, p, many_centers);
          EXPECT_EQ(many_chosen, one_chosen) << what;
          EXPECT_TRUE(many_centers == one_centers) << what;
          gpuml::mpi::KMeans<T> many(p, MPI_COMM_WORLD, b.backend);
          many.fit(X_local, w_local);
          expect_same_fit(many, one, first, rows, what);
        }
      }
    }
  }
}

// verbose=1: rank 0 prints scikit-learn's lines, the other ranks print nothing (their sink is a named handler that
// outlives the fit: a temporary one crashed every rank but 0 at the first line).
TEST(DistributedKMeansFaults, VerboseFitPrintsOnRankZeroAndEndsOnEveryRank) {
  const Matrix<double> X = blobs<double>(300, 3, 4, 25);
  KMeansParams p;
  p.n_clusters = 4;
  p.verbose = true;
  p.max_iter = 5;
  gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
  km.fit(X.middleRows(100 * (rank() % 3), 100));
  EXPECT_GE(km.n_iter(), 1);
}

TEST(DistributedKMeansFaults, RandomInitAcrossRanksIsRefusedOnEveryRank) {
  KMeansParams p;
  p.n_clusters = 2;
  p.init = "random";
  gpuml::mpi::KMeans<double> km(p, MPI_COMM_WORLD, gpuml::Backend::host());
  try {
    km.fit(random_matrix<double>(20, 3, 24));
    ADD_FAILURE() << "no error";
  } catch (const gpuml::error& e) {
    EXPECT_NE(std::string(e.what()).find("init=\"random\""), std::string::npos) << e.what();
  }
}

// Distributed k-NN against one process on the host engine (whose selection values are exact, so the lists are
// the same): rank 0's queries, the database cut unevenly with an empty last part, every metric.
TYPED_TEST(DistributedKMeans, NeighboursMatchOneProcessOnTheHost) {
  using T = TypeParam;
  const Matrix<T> db = random_matrix<T>(1501, 9, 31), q = random_matrix<T>(rank() == 0 ? 67 : 3, 9, 32);
  const Matrix<T> q0 = random_matrix<T>(67, 9, 32);
  const auto [first, rows] = shard(db.rows(), true);
  for (const char* metric : {"euclidean", "sqeuclidean", "manhattan", "chebyshev", "cosine", "inner_product"}) {
    for (int k : {1, 10, 600}) {
      gpuml::NearestNeighbors<T> one({k, metric}, gpuml::Backend::host());
      one.fit(db);
      const auto expected = one.kneighbors(q0);
      gpuml::mpi::NearestNeighbors<T> many({k, metric}, MPI_COMM_WORLD, gpuml::Backend::host());
      many.fit(db.middleRows(first, rows));
      const auto got = many.kneighbors(q);  // only rank 0's queries count
      EXPECT_TRUE(got.indices == expected.indices) << metric << " k=" << k;
      EXPECT_TRUE(got.distances == expected.distances) << metric << " k=" << k;
    }
  }
}

// Distributed k-NN on every backend (the device under test too) against one process on the same backend, on
// integer data: every distance is an exact integer, so a device's float32 selection is exact and the lists are one
// process's bit for bit (ties by the lower global index), with the database cut unevenly and an empty last part.
TYPED_TEST(DistributedKMeans, NeighboursOfIntegerDataMatchOneProcessOnEveryBackend) {
  using T = TypeParam;
  const Matrix<T> db = integer_blobs<T>(1501, 7, 5, 34), q0 = integer_blobs<T>(67, 7, 5, 35);
  const Matrix<T> q = rank() == 0 ? q0 : Matrix<T>(q0.topRows(3));
  const auto [first, rows] = shard(db.rows(), true);
  for (const auto& b : rank_backends()) {
    for (const char* metric : {"euclidean", "sqeuclidean", "manhattan"}) {
      for (int k : {1, 10, 600}) {
        gpuml::NearestNeighbors<T> one({k, metric}, b.backend);
        one.fit(db);
        const auto expected = one.kneighbors(q0);
        gpuml::mpi::NearestNeighbors<T> many({k, metric}, MPI_COMM_WORLD, b.backend);
        many.fit(db.middleRows(first, rows));
        const auto got = many.kneighbors(q);  // rank 0's queries
        EXPECT_TRUE(got.indices == expected.indices) << b.name << " " << metric << " k=" << k;
        EXPECT_TRUE(got.distances == expected.distances) << b.name << " " << metric << " k=" << k;
      }
    }
  }
}

// Distributed KNeighborsClassifier and KNeighborsRegressor against one process on the same backend, on integer
// data (exact distances, many of them tied: the lower global index first everywhere): the same predictions,
// probabilities and (weighted) means bit for bit, with uniform and distance weights, and an empty last part.
TYPED_TEST(DistributedKMeans, NeighbourClassifierAndRegressorMatchOneProcess) {
  using T = TypeParam;
  const Eigen::Index n = 901;
  const Matrix<T> X = integer_blobs<T>(n, 5, 4, 51), q0 = integer_blobs<T>(43, 5, 4, 52);
  const Matrix<T> q = rank() == 0 ? q0 : Matrix<T>(q0.topRows(2));
  gpuml::Labels y(n);
  Matrix<T> targets(n, 2);
  for (Eigen::Index i = 0; i < n; ++i) {
    y[i] = static_cast<std::int32_t>((i * 7) % 5) * 3 - 4;
    targets(i, 0) = T(i % 11) * T(0.5);
    targets(i, 1) = -T(i % 7);
  }
  const auto [first, rows] = shard(n, true);
  for (const auto& b : rank_backends()) {
    for (const char* weights : {"uniform", "distance"}) {
      for (int k : {1, 7}) {
        gpuml::NeighborsParams p{k, "euclidean"};
        p.weights = weights;
        const std::string what = b.name + " " + weights + " k=" + std::to_string(k);
        gpuml::KNeighborsClassifier<T> one(p, b.backend);
        one.fit(X, y);
        gpuml::mpi::KNeighborsClassifier<T> many(p, MPI_COMM_WORLD, b.backend);
        many.fit(X.middleRows(first, rows), gpuml::Labels(y.segment(first, rows)));
        EXPECT_TRUE(many.classes() == one.classes()) << what;
        EXPECT_TRUE(many.predict(q) == one.predict(q0)) << what;
        EXPECT_TRUE(many.predict_proba(q) == one.predict_proba(q0)) << what;
        gpuml::KNeighborsRegressor<T> one_r(p, b.backend);
        one_r.fit(X, targets);
        gpuml::mpi::KNeighborsRegressor<T> many_r(p, MPI_COMM_WORLD, b.backend);
        many_r.fit(X.middleRows(first, rows), Matrix<T>(targets.middleRows(first, rows)));
        EXPECT_TRUE(many_r.predict(q) == one_r.predict(q0)) << what;
      }
    }
  }
}

TEST(DistributedKMeansFaults, NeighboursRefuseMismatchedPartsOnEveryRank) {
  const Matrix<double> db = random_matrix<double>(30, rank() == ranks() - 1 && ranks() > 1 ? 5 : 4, 33);
  gpuml::mpi::NearestNeighbors<double> nn({3, "euclidean"}, MPI_COMM_WORLD, gpuml::Backend::host());
  if (ranks() == 1) GTEST_SKIP() << "needs two ranks";
  EXPECT_THROW(nn.fit(db), gpuml::error);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  // One seed for every rank: rank 0's (GPUML_TEST_SEED or a fresh one), before any test data is made.
  unsigned long long seed = 0;
  if (rank() == 0) {
    const char* given = std::getenv("GPUML_TEST_SEED");
    seed = given ? std::strtoull(given, nullptr, 10) : std::random_device{}();
  }
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  setenv("GPUML_TEST_SEED", std::to_string(seed).c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
