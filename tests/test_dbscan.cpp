// DBSCAN against an independent reference: neighbourhoods from plain double loops and scikit-learn's dbscan_inner
// followed literally (a depth-first search from each unlabelled core sample in index order). Integer data make
// pairs at exactly eps (and duplicates) exact in float and double; continuous data use an eps away from every
// pairwise distance, so rounding cannot decide a neighbourhood. Every metric, float and double, weights (zero,
// fractional, negative), host and device backends. The components alone (the host's union-find, the device's
// kernel) against a breadth-first search on random graphs: many small components, long chains, cliques, rows
// spanning pieces of a few edges; the host's threaded phases at several thread counts.
#include "support.hpp"

#include <gpuml/algorithms/dbscan.hpp>
#include <gpuml/estimators/dbscan.hpp>
#include <gpuml/kernels/dbscan.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using gpuml::DBSCAN;
using gpuml::DBSCANParams;
using gpuml::Matrix;
using gpuml::Metric;
using gpuml::Vector;
using gpuml::testing::backends;
using gpuml::testing::NamedBackend;
using gpuml::testing::random_matrix;
using gpuml::testing::reference_value;
using gpuml::testing::test_seed;

struct Reference {
  std::vector<std::int64_t> labels, core;
};

/// scikit-learn's DBSCAN on neighbourhoods `hood` (each in index order, the sample itself included), written as
/// _dbscan.py and dbscan_inner write it.
Reference reference_dbscan(const std::vector<std::vector<std::int64_t>>& hood, const std::vector<double>* weight,
                           double min_samples) {
  const std::size_t n = hood.size();
  std::vector<bool> is_core(n);
  Reference r;
  for (std::size_t i = 0; i < n; ++i) {
    double size = 0;
    for (std::int64_t j : hood[i]) size += weight ? (*weight)[std::size_t(j)] : 1.0;
    is_core[i] = size >= min_samples;
    if (is_core[i]) r.core.push_back(std::int64_t(i));
  }
  r.labels.assign(n, -1);
  std::int64_t label_num = 0;
  std::vector<std::int64_t> stack;
  for (std::size_t start = 0; start < n; ++start) {
    if (r.labels[start] != -1 || !is_core[start]) continue;
    std::size_t i = start;
    while (true) {
      if (r.labels[i] == -1) {
        r.labels[i] = label_num;
        if (is_core[i])
          for (std::int64_t v : hood[i])
            if (r.labels[std::size_t(v)] == -1) stack.push_back(v);
      }
      if (stack.empty()) break;
      i = std::size_t(stack.back());
      stack.pop_back();
    }
    ++label_num;
  }
  return r;
}

/// Neighbourhoods by the reference distance in double: every j with d(i, j) <= eps, in index order.
template <class T>
std::vector<std::vector<std::int64_t>> reference_hoods(const Matrix<T>& X, double eps, Metric m) {
  std::vector<std::vector<std::int64_t>> hood(std::size_t(X.rows()));
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < X.rows(); ++j)
      if (reference_value<T>(X, i, X, j, m) <= eps) hood[std::size_t(i)].push_back(j);
  return hood;
}

/// An eps near the q-quantile of the pairwise distances, halfway between two distinct values far enough apart that
/// float rounding cannot put a pair on the other side.
template <class T>
double clear_eps(const Matrix<T>& X, Metric m, double q) {
  std::vector<double> d;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = i + 1; j < X.rows(); ++j) d.push_back(reference_value<T>(X, i, X, j, m));
  std::sort(d.begin(), d.end());
  for (std::size_t k = std::size_t(q * double(d.size())); k + 1 < d.size(); ++k) {
    const double gap = d[k + 1] - d[k], mid = 0.5 * (d[k] + d[k + 1]);
    if (gap > 1e-3 * mid + 1e-6) return mid;
  }
  ADD_FAILURE() << "no clear eps";
  return 1;
}

/// Integer coordinates in [0, span): duplicates and distances exactly eps are common and exact in float.
template <class T>
Matrix<T> grid_data(Eigen::Index n, Eigen::Index d, int span, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::uniform_int_distribution<int> coord(0, span - 1);
  Matrix<T> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index f = 0; f < d; ++f) X(i, f) = T(coord(rng));
  return X;
}

/// Weights whose every sum is exact in float: zero, fractional (dyadic), larger than min_samples, negative.
std::vector<double> dyadic_weights(Eigen::Index n, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  const double choices[] = {0.0, 0.25, 0.5, 1.0, 1.0, 1.5, 2.0, 6.0, -1.0};
  std::uniform_int_distribution<int> pick(0, 8);
  std::vector<double> w(static_cast<std::size_t>(n));
  for (double& v : w) v = choices[pick(rng)];
  return w;
}

template <class T>
void expect_matches(const DBSCAN<T>& model, const Matrix<T>& X, const Reference& want, const std::string& what) {
  const auto& labels = model.labels();
  ASSERT_EQ(labels.size(), X.rows()) << what;
  std::int64_t differing = 0, first = -1;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (labels[i] != want.labels[std::size_t(i)]) {
      ++differing;
      if (first < 0) first = i;
    }
  EXPECT_EQ(differing, 0) << what << ": first at sample " << first << " (got " << (first >= 0 ? labels[first] : 0)
                          << ", want " << (first >= 0 ? want.labels[std::size_t(first)] : 0) << ")";
  const auto& core = model.core_sample_indices();
  ASSERT_EQ(std::size_t(core.size()), want.core.size()) << what;
  for (Eigen::Index c = 0; c < core.size(); ++c) {
    ASSERT_EQ(core[c], want.core[std::size_t(c)]) << what;
    ASSERT_TRUE(model.components().row(c) == X.row(core[c])) << what;
  }
  const std::int64_t clusters = want.labels.empty() ? 0 : *std::max_element(want.labels.begin(), want.labels.end()) + 1;
  EXPECT_EQ(model.n_clusters(), clusters) << what;
}

class DbscanTest : public ::testing::TestWithParam<NamedBackend> {};

template <class T>
void grid_case(const gpuml::Backend& backend, const std::string& metric, double p, Metric reference_metric,
               double eps, std::uint64_t salt) {
  // Awkward sizes; a narrow span in 2-d makes dense clusters with many duplicates, 3-d sparser ones with noise.
  for (auto [n, d, span] : {std::tuple<Eigen::Index, Eigen::Index, int>{157, 2, 12}, {211, 3, 9}}) {
    const Matrix<T> X = grid_data<T>(n, d, span, salt + std::uint64_t(n));
    const auto hood = reference_hoods<T>(X, eps, reference_metric);
    const std::vector<double> w = dyadic_weights(n, salt + 7);
    Vector<T> wt(n);
    for (Eigen::Index i = 0; i < n; ++i) wt[i] = T(w[std::size_t(i)]);
    for (int min_samples : {1, 3, 6}) {
      DBSCANParams params;
      params.set_eps(eps).set_min_samples(min_samples).set_metric(metric).set_p(p);
      DBSCAN<T> model(params, backend);
      const std::string what = metric + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
                               " min_samples=" + std::to_string(min_samples);
      model.fit(X);
      expect_matches(model, X, reference_dbscan(hood, nullptr, min_samples), what);
      model.fit(X, wt);
      expect_matches(model, X, reference_dbscan(hood, &w, min_samples), what + " weighted");
    }
  }
}

TEST_P(DbscanTest, IntegerDataWithTiesAtEpsEveryMetric) {
  const auto& b = GetParam().backend;
  const double inf = std::numeric_limits<double>::infinity();
  // eps = 2 in euclidean holds pairs at exactly 2 (and 5 = sqrt(25) ties the (3, 4) pairs when eps = 5).
  grid_case<float>(b, "euclidean", 2, Metric::euclidean, 2.0, 11);
  grid_case<double>(b, "euclidean", 2, Metric::euclidean, 2.0, 12);
  grid_case<float>(b, "minkowski", 2, Metric::euclidean, 5.0, 13);
  grid_case<double>(b, "sqeuclidean", 2, Metric::sqeuclidean, 4.0, 14);
  grid_case<float>(b, "manhattan", 2, Metric::manhattan, 3.0, 15);
  grid_case<double>(b, "minkowski", 1, Metric::manhattan, 2.0, 16);
  grid_case<float>(b, "chebyshev", 2, Metric::chebyshev, 1.0, 17);
  grid_case<double>(b, "minkowski", inf, Metric::chebyshev, 2.0, 18);
}

template <class T>
void continuous_case(const gpuml::Backend& backend, Metric metric, std::uint64_t salt) {
  const Eigen::Index n = 173, d = 5;
  Matrix<T> X = random_matrix<T>(n, d, salt);
  for (Eigen::Index i = 0; i < n; i += 13) X.row(i) = X.row((i * 7 + 3) % n);  // duplicates
  if (metric == Metric::cosine) X.row(5).setZero();  // a zero row: distance 1 from everything, itself included
  const double eps = clear_eps<T>(X, metric, 0.04);
  const auto hood = reference_hoods<T>(X, eps, metric);
  for (int min_samples : {2, 5}) {
    DBSCAN<T> model(DBSCANParams{}.set_eps(eps).set_min_samples(min_samples).set_metric(gpuml::metric_name(metric)),
                    backend);
    model.fit(X);
    expect_matches(model, X, reference_dbscan(hood, nullptr, min_samples),
                   std::string(gpuml::metric_name(metric)) + " min_samples=" + std::to_string(min_samples));
  }
}

TEST_P(DbscanTest, ContinuousDataEveryMetricFloatAndDouble) {
  const auto& b = GetParam().backend;
  std::uint64_t salt = 100;
  for (Metric m : {Metric::euclidean, Metric::sqeuclidean, Metric::manhattan, Metric::cosine, Metric::chebyshev}) {
    continuous_case<float>(b, m, ++salt);
    continuous_case<double>(b, m, ++salt);
  }
}

TEST_P(DbscanTest, FractionalWeightsDecideCoreSamples) {
  // Weights of 1/3: whether three of them reach min_samples = 1 depends on the order and type of the sum, which
  // must be numpy's (pairwise, in the weights' type, in index order).
  const auto& b = GetParam().backend;
  const Eigen::Index n = 40;
  Matrix<double> X = Matrix<double>::Zero(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) X(i, 0) = double(i / 3) * 10.0;  // groups of three equal samples
  Vector<double> w = Vector<double>::Constant(n, 1.0 / 3.0);
  DBSCAN<double> model(DBSCANParams{}.set_eps(0.5).set_min_samples(1), b);
  model.fit(X, w);
  const double third = 1.0 / 3.0, three_thirds = third + third + third;
  for (Eigen::Index i = 0; i + 2 < n; i += 3) {
    const bool core = model.labels()[i] != -1;
    EXPECT_EQ(core, three_thirds >= 1.0) << "sample " << i;
  }
  // The last sample is alone: a third is below min_samples, noise.
  EXPECT_EQ(model.labels()[n - 1], -1);
}

TEST_P(DbscanTest, FloatDataBeyondFloatRangeDecidedInDouble) {
  const auto& b = GetParam().backend;
  Matrix<float> X(6, 2);
  X << 0, 0, 1e19f, 0, 2e19f, 0, 3e20f, 1e20f, 3e20f, 1.5e20f, -3e38f, 0;
  DBSCAN<float> model(DBSCANParams{}.set_eps(1.5e19).set_min_samples(2), b);
  model.fit(X);
  const std::vector<std::int32_t> want = {0, 0, 0, -1, -1, -1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(model.labels()[i], want[std::size_t(i)]) << i;
}

TEST_P(DbscanTest, ScikitLearnDocstringExample) {
  Matrix<double> X(6, 2);
  X << 1, 2, 2, 2, 2, 3, 8, 7, 8, 8, 25, 80;
  DBSCAN<double> model(DBSCANParams{}.set_eps(3).set_min_samples(2), GetParam().backend);
  const gpuml::Labels labels = model.fit_predict(X);
  const std::vector<std::int32_t> want = {0, 0, 0, 1, 1, -1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(labels[i], want[std::size_t(i)]);
  EXPECT_EQ(model.core_sample_indices().size(), 5);
}

TEST_P(DbscanTest, FitStatsTellWhereTheTimeWent) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = grid_data<float>(300, 2, 14, 61);
  DBSCAN<float> model(DBSCANParams{}.set_eps(1.0).set_min_samples(3), b);
  model.fit(X);
  const auto& stats = model.fit_stats();
  EXPECT_EQ(stats.components_on_device, !b.is_host());
  EXPECT_EQ(stats.graph_on_device, !b.is_host()) << stats.graph_on_host_because;
  if (!b.is_host()) {
    // The device graph, and the rows with pairs at exactly eps resolved on the host as a piece of their own.
    EXPECT_EQ(stats.components.pieces, 2u);
    EXPECT_GE(stats.components.rounds, 1u);
    EXPECT_GT(stats.search.uncertain, 0u);
    // Weights keep the graph on the host (their sums follow index order), with the reason said.
    DBSCAN<float> weighted(DBSCANParams{}.set_eps(1.0).set_min_samples(3), b);
    weighted.fit(X, Vector<float>::Constant(X.rows(), 1.0f));
    EXPECT_FALSE(weighted.fit_stats().graph_on_device);
    EXPECT_NE(weighted.fit_stats().graph_on_host_because.find("weight"), std::string::npos);
    EXPECT_TRUE(weighted.fit_stats().components_on_device);
    for (Eigen::Index i = 0; i < X.rows(); ++i) ASSERT_EQ(weighted.labels()[i], model.labels()[i]) << i;
  }
  const auto hood = reference_hoods<float>(X, 1.0, Metric::euclidean);
  std::int64_t edges = 0;
  for (const auto& h : hood) edges += std::int64_t(h.size());
  EXPECT_EQ(stats.n_edges, edges);
  const auto& t = stats.times;
  for (double v : {t.neighbourhoods, t.core_samples, t.components, t.labels}) EXPECT_GE(v, 0.0);
  EXPECT_GT(t.total, 0.0);
  EXPECT_LE(t.setup + t.neighbourhoods + t.core_samples + t.components + t.labels, t.total);
}

TEST_P(DbscanTest, BadInputNamesTheProblem) {
  const auto& b = GetParam().backend;
  const Matrix<float> X = random_matrix<float>(9, 2, 3);
  auto message = [&](DBSCANParams p, Vector<float> w = {}) -> std::string {
    try {
      DBSCAN<float>(p, b).fit(X, w);
    } catch (const gpuml::invalid_input& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(DBSCANParams{}.set_eps(0)).find("eps must be > 0"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_eps(std::nan(""))).find("eps"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_min_samples(0)).find("min_samples must be >= 1"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("minkowski").set_p(3)).find("p = 1, 2 or inf"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("inner_product")).find("similarity"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}.set_metric("hamming")).find("unknown metric 'hamming'"), std::string::npos);
  EXPECT_NE(message(DBSCANParams{}, Vector<float>::Ones(8)).find("sample_weight has length 8"), std::string::npos);
  Vector<float> nan_weight = Vector<float>::Ones(9);
  nan_weight[4] = std::nanf("");
  EXPECT_NE(message(DBSCANParams{}, nan_weight).find("sample_weight contains NaN"), std::string::npos);
  EXPECT_THROW(DBSCAN<float>({}, b).labels(), gpuml::not_fitted);
  EXPECT_THROW(DBSCAN<float>({}, b).fit(Matrix<float>(0, 2)), gpuml::invalid_input);
}

TEST_P(DbscanTest, CancelledFitKeepsTheEarlierOne) {
  const auto& b = GetParam().backend;
  const Matrix<double> X = grid_data<double>(50, 2, 6, 21);
  int stages = 0;
  bool cancel = false;
  DBSCANParams p = DBSCANParams{}.set_eps(1.0).set_min_samples(3);
  p.on_progress = [&](const gpuml::WorkProgress& w) {
    ++stages;
    EXPECT_EQ(w.total, 3u);
    return !(cancel && w.done == 2);
  };
  DBSCAN<double> model(p, b);
  model.fit(X);
  EXPECT_EQ(stages, 3);
  const gpuml::Labels before = model.labels();
  cancel = true;
  EXPECT_THROW(model.fit(X.topRows(20)), gpuml::cancelled);
  EXPECT_EQ(model.labels(), before);
}

INSTANTIATE_TEST_SUITE_P(Backends, DbscanTest, ::testing::ValuesIn(backends()), gpuml::testing::backend_name);

// The components alone. A graph as compressed rows, each row increasing (the sample itself in most rows, as in a
// radius graph), with core flags.
struct Graph {
  gpuml::algorithms::RadiusResult<float> hood;
  std::vector<std::uint8_t> core;
};

Graph graph_from_rows(const std::vector<std::set<std::int64_t>>& rows, std::vector<std::uint8_t> core) {
  Graph g;
  g.hood.offsets.push_back(0);
  for (const auto& r : rows) {
    g.hood.indices.insert(g.hood.indices.end(), r.begin(), r.end());
    g.hood.offsets.push_back(std::int64_t(g.hood.indices.size()));
  }
  g.core = std::move(core);
  return g;
}

/// Roots by a breadth-first search over core-core edges (either direction joins), the smallest index of each
/// component; a non-core sample's smallest root among the cores whose row holds it.
std::vector<std::int64_t> reference_roots(const Graph& g) {
  const std::size_t n = g.core.size();
  std::vector<std::vector<std::int64_t>> adjacent(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::int64_t p = g.hood.offsets[i]; p < g.hood.offsets[i + 1]; ++p) {
      const auto j = std::size_t(g.hood.indices[std::size_t(p)]);
      if (g.core[i] && g.core[j] && i != j) {
        adjacent[i].push_back(std::int64_t(j));
        adjacent[j].push_back(std::int64_t(i));
      }
    }
  std::vector<std::int64_t> roots(n, -1);
  for (std::size_t start = 0; start < n; ++start) {
    if (!g.core[start] || roots[start] != -1) continue;
    std::vector<std::int64_t> queue{std::int64_t(start)};
    roots[start] = std::int64_t(start);  // visited in index order: the first of a component is its smallest
    for (std::size_t q = 0; q < queue.size(); ++q)
      for (std::int64_t j : adjacent[std::size_t(queue[q])])
        if (roots[std::size_t(j)] == -1) {
          roots[std::size_t(j)] = std::int64_t(start);
          queue.push_back(j);
        }
  }
  std::vector<std::int64_t> out = roots;
  for (std::size_t i = 0; i < n; ++i) {
    if (!g.core[i]) continue;
    for (std::int64_t p = g.hood.offsets[i]; p < g.hood.offsets[i + 1]; ++p) {
      const auto j = std::size_t(g.hood.indices[std::size_t(p)]);
      if (!g.core[j] && (out[j] == -1 || roots[i] < out[j])) out[j] = roots[i];
    }
  }
  return out;
}

/// Many small components: samples in runs of 1 to 8 (in a shuffled order, so a component's indices are scattered),
/// each linked to a few others of its run, some links one way only; a fraction of the samples core.
Graph small_components(std::int64_t n, double core_fraction, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::set<std::int64_t>> rows(static_cast<std::size_t>(n));
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t a = 0; a < n;) {
    const std::int64_t len = std::min<std::int64_t>(n - a, 1 + std::int64_t(rng() % 8));
    for (std::int64_t k = a; k < a + len; ++k) {
      const std::int64_t i = order[std::size_t(k)];
      rows[std::size_t(i)].insert(i);
      for (int link = 0; link < 2; ++link) {
        const std::int64_t j = order[std::size_t(a + std::int64_t(rng() % std::uint64_t(len)))];
        rows[std::size_t(i)].insert(j);
        if (u(rng) < 0.8) rows[std::size_t(j)].insert(i);
      }
    }
    a += len;
  }
  std::vector<std::uint8_t> core(static_cast<std::size_t>(n));
  for (auto& c : core) c = u(rng) < core_fraction;
  return graph_from_rows(rows, core);
}

/// One chain through every sample (in index order, reversed, or shuffled), every sample core but a few, whose
/// chain neighbours then stay apart.
Graph chain(std::int64_t n, int kind, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (kind == 1) std::reverse(order.begin(), order.end());
  if (kind == 2) std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::set<std::int64_t>> rows(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t i = order[std::size_t(k)];
    rows[std::size_t(i)].insert(i);
    if (k > 0) rows[std::size_t(i)].insert(order[std::size_t(k - 1)]);
    if (k + 1 < n) rows[std::size_t(i)].insert(order[std::size_t(k + 1)]);
  }
  std::vector<std::uint8_t> core(static_cast<std::size_t>(n), 1);
  for (int cut = 0; cut < 3; ++cut) core[std::size_t(rng() % std::uint64_t(n))] = 0;
  return graph_from_rows(rows, core);
}

/// Cliques of duplicates (every member in every member's row) of random sizes, some joined by one shared border or
/// core sample, and a hub whose row holds a sample of every clique (longer than a piece).
Graph cliques(std::int64_t n, std::uint64_t salt) {
  std::mt19937_64 rng(test_seed() * 0x9E3779B97F4A7C15ull + salt);
  std::vector<std::set<std::int64_t>> rows(static_cast<std::size_t>(n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const std::int64_t hub = order.back();
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t a = 0; a + 1 < n;) {
    const std::int64_t len = std::min<std::int64_t>(n - 1 - a, 1 + std::int64_t(rng() % 12));
    for (std::int64_t k = a; k < a + len; ++k)
      for (std::int64_t l = a; l < a + len; ++l) rows[std::size_t(order[std::size_t(k)])].insert(order[std::size_t(l)]);
    if (a > 0 && u(rng) < 0.3) {  // the previous clique's last sample joins this one
      const std::int64_t shared = order[std::size_t(a - 1)];
      rows[std::size_t(shared)].insert(order[std::size_t(a)]);
      rows[std::size_t(order[std::size_t(a)])].insert(shared);
    }
    if (u(rng) < 0.5) {
      rows[std::size_t(hub)].insert(order[std::size_t(a)]);
      rows[std::size_t(order[std::size_t(a)])].insert(hub);
    }
    a += len;
  }
  rows[std::size_t(hub)].insert(hub);
  std::vector<std::uint8_t> core(static_cast<std::size_t>(n));
  for (auto& c : core) c = u(rng) < 0.75;
  core[std::size_t(hub)] = u(rng) < 0.5;
  return graph_from_rows(rows, core);
}

class DbscanComponentsTest : public ::testing::TestWithParam<NamedBackend> {
 protected:
  /// The backend's components: the union-find on the host, the kernel on a device (checked against the union-find
  /// too); both against the breadth-first reference.
  void expect_roots(const Graph& g, const std::string& what, gpuml::kernels::DbscanComponentsOptions options = {}) {
    const auto want = reference_roots(g);
    const auto host = gpuml::algorithms::union_find_roots(g.hood, g.core);
    EXPECT_EQ(host, want) << what << " (union-find)";
    const auto& backend = GetParam().backend;
    if (backend.is_host()) return;
    gpuml::kernels::DbscanComponentsStats stats;
    const auto got = gpuml::kernels::dbscan_components(*backend.device(), g.hood, g.core, options, &stats);
    std::int64_t differing = 0, first = -1;
    for (std::size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && differing++ == 0) first = std::int64_t(i);
    EXPECT_EQ(differing, 0) << what << ": first at sample " << first << " (got "
                            << (first >= 0 ? got[std::size_t(first)] : 0) << ", want "
                            << (first >= 0 ? want[std::size_t(first)] : 0) << "), " << stats.pieces << " pieces, "
                            << stats.rounds << " rounds";
    if (options.max_piece_edges) {
      EXPECT_EQ(stats.pieces, (std::uint64_t(g.hood.indices.size()) + options.max_piece_edges - 1) / options.max_piece_edges)
          << what;
    }
  }
};

TEST_P(DbscanComponentsTest, ManySmallComponents) {
  for (double core_fraction : {1.0, 0.6, 0.2})
    expect_roots(small_components(3001, core_fraction, std::uint64_t(core_fraction * 10) + 1),
                 "small components, core fraction " + std::to_string(core_fraction));
}

TEST_P(DbscanComponentsTest, LongChains) {
  for (int kind : {0, 1, 2}) expect_roots(chain(20011, kind, 30 + std::uint64_t(kind)), "chain kind " + std::to_string(kind));
}

TEST_P(DbscanComponentsTest, CliquesOfDuplicatesAndRowsSpanningPieces) {
  const Graph g = cliques(311, 41);
  expect_roots(g, "cliques");
  // Pieces of a few edges: most rows, and the hub's always, span several.
  for (std::uint64_t piece : {1u, 7u, 64u}) {
    gpuml::kernels::DbscanComponentsOptions options;
    options.max_piece_edges = piece;
    options.rounds_per_submit = 1 + std::uint32_t(piece % 3);
    expect_roots(g, "cliques in pieces of " + std::to_string(piece), options);
  }
  gpuml::kernels::DbscanComponentsOptions options;
  options.max_piece_edges = 13;
  expect_roots(small_components(997, 0.7, 43), "small components in pieces of 13", options);
  expect_roots(chain(1009, 2, 44), "shuffled chain in pieces of 13", options);
}

TEST_P(DbscanComponentsTest, NoCoreSamplesAndEmptyRows) {
  std::vector<std::set<std::int64_t>> rows = {{0, 2}, {}, {0, 2, 3}, {}, {4}};
  expect_roots(graph_from_rows(rows, {0, 0, 0, 0, 0}), "no core samples");
  expect_roots(graph_from_rows(rows, {1, 0, 1, 0, 1}), "empty rows");
}

INSTANTIATE_TEST_SUITE_P(Backends, DbscanComponentsTest, ::testing::ValuesIn(backends()), gpuml::testing::backend_name);

// The host's threaded phases (neighbourhood check, weighted core samples, numbering) give one result at any thread
// count; weights whose float sums depend on their order.
TEST(DbscanAlgorithm, ThreadCountChangesNothing) {
  const Graph g = small_components(100003, 0.5, 51);
  std::mt19937_64 rng(test_seed() + 52);
  std::uniform_real_distribution<float> u(0.05f, 0.6f);
  std::vector<float> w(g.core.size());
  for (float& v : w) v = u(rng);
  std::vector<std::uint8_t> core_at_1;
  gpuml::algorithms::DbscanResult at_1;
  for (int threads : {1, 3, 8}) {
    gpuml::ScopedConfig scoped(gpuml::config().set_num_threads(threads));
    gpuml::algorithms::check_neighbourhoods(g.hood, std::int64_t(g.core.size()));
    const auto core = gpuml::algorithms::core_samples(g.hood, w.data(), 1);
    const auto r = gpuml::algorithms::label_components(g.hood, core);
    if (threads == 1) {
      // The weighted sums are numpy's, sample by sample.
      for (std::size_t i = 0; i < core.size(); ++i) {
        const std::int64_t b = g.hood.offsets[i], e = g.hood.offsets[i + 1];
        const float sum = gpuml::algorithms::numpy_sum<float>(e - b, [&](std::int64_t p) {
          return w[std::size_t(g.hood.indices[std::size_t(b + p)])];
        });
        ASSERT_EQ(core[i], sum >= 1.0f) << i;
      }
      core_at_1 = core;
      at_1 = r;
      continue;
    }
    EXPECT_EQ(core, core_at_1) << threads << " threads";
    EXPECT_EQ(r.labels, at_1.labels) << threads << " threads";
    EXPECT_EQ(r.core_sample_indices, at_1.core_sample_indices) << threads << " threads";
    EXPECT_EQ(r.n_clusters, at_1.n_clusters) << threads << " threads";
  }
  // A defect far into the rows is reported at its sample, whatever the thread count.
  Graph bad = g;
  bad.hood.indices[std::size_t(bad.hood.offsets[90001])] = std::int64_t(g.core.size());
  for (int threads : {1, 3}) {
    gpuml::ScopedConfig scoped(gpuml::config().set_num_threads(threads));
    try {
      gpuml::algorithms::check_neighbourhoods(bad.hood, std::int64_t(g.core.size()));
      ADD_FAILURE() << "no error";
    } catch (const gpuml::invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find("sample 90001 "), std::string::npos) << e.what();
    }
  }
}

// The algorithm layer alone: a border sample reached from two clusters takes the smaller label, whatever the
// order of its neighbours; numpy's summation order over 300 neighbours.
TEST(DbscanAlgorithm, BorderTakesTheFirstClusterAndSumsAreNumpys) {
  // 0-1 core cluster A, 3-4 core cluster B, 2 a border of both; 5 noise.
  gpuml::algorithms::RadiusResult<double> hood;
  const std::vector<std::vector<std::int64_t>> rows = {{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4}, {5}};
  hood.offsets.push_back(0);
  for (const auto& r : rows) {
    hood.indices.insert(hood.indices.end(), r.begin(), r.end());
    hood.offsets.push_back(std::int64_t(hood.indices.size()));
  }
  const std::vector<std::uint8_t> core = {1, 1, 0, 1, 1, 0};
  const auto r = gpuml::algorithms::label_components(hood, core);
  EXPECT_EQ(r.labels, (std::vector<std::int64_t>{0, 0, 0, 1, 1, -1}));
  EXPECT_EQ(r.core_sample_indices, (std::vector<std::int64_t>{0, 1, 3, 4}));

  // numpy: np.sum of 300 float32 values 0.1 (pairwise: 128 + 172, split at multiples of 8).
  std::vector<float> v(300, 0.1f);
  const float got = gpuml::algorithms::numpy_sum<float>(300, [&](std::int64_t i) { return v[std::size_t(i)]; });
  float sequential = 0;
  for (float x : v) sequential += x;
  // An independent pairwise sum: halves down to blocks of at most 128, each as eight interleaved lanes.
  auto block = [&](std::size_t first, std::size_t count) {
    float lanes[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8)
      for (int j = 0; j < 8; ++j) lanes[j] = i == 0 ? v[first + j] : lanes[j] + v[first + i + j];
    float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; i < count; ++i) s += v[first + i];
    return s;
  };
  // 300 -> 144 (150 less 150 % 8) + 156 -> each at most 128? 144 -> 72 + 72; 156 -> 72 + 84.
  const float want = (block(0, 72) + block(72, 72)) + (block(144, 72) + block(216, 84));
  EXPECT_EQ(got, want);
  EXPECT_NE(got, sequential);  // otherwise the check above would not tell the orders apart
}

}  // namespace
