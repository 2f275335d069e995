// Tuning: the store (round trip, lookups keyed by device and driver, corrupt files), device classes and the
// catalogue, the k-means tile checks, the k-means and k-NN default policies' order (override, stored winner,
// catalogue), and short tuning runs on the Vulkan device: an unrunnable candidate is never dispatched, a candidate
// must beat the default by the margin to win, the k-NN problems on CPU devices are cut like real searches, the
// k-means winner fits the same clustering as the catalogue's tile, the k-NN winner finds the same neighbours.
#include "support.hpp"

#include <gpuml/tuning/tuner.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

namespace {

/// The tile the k-means kernel resolves for a problem (override, stored winner, catalogue).
struct KMeansResolved {
  template <class T>
  static gpuml::KMeansTileParams params(const gpuml::vulkan::DeviceInfo& device, std::uint32_t k, std::uint32_t d) {
    return gpuml::kernels::resolve_tile<gpuml::KMeansTileTraits, T>(device, {k, d});
  }
};

namespace tuning = gpuml::tuning;
using gpuml::KMeansTileParams;
using gpuml::Matrix;
using gpuml::vulkan::DeviceInfo;
using gpuml::vulkan::DeviceType;

/// A fresh cache directory (where the store lives) for one test; the process's store is read again.
class TempCacheDir {
 public:
  TempCacheDir() : path_(make()), config_(gpuml::config().set_cache_dir(path_)) { tuning::reload_store(); }
  ~TempCacheDir() {
    std::filesystem::remove_all(path_);
    tuning::reload_store();
  }
  std::string store_file() const { return path_ + "/tuning.json"; }

 private:
  static std::string make() {
    char name[] = "/tmp/gpuml-tuning-XXXXXX";
    return mkdtemp(name);
  }
  std::string path_;
  gpuml::ScopedConfig config_;
};

/// Collects gpuml's warnings for one scope.
class CapturedWarnings {
 public:
  CapturedWarnings() : previous_(gpuml::set_warning_handler([this](const std::string& m) { messages.push_back(m); })) {}
  ~CapturedWarnings() { gpuml::set_warning_handler(previous_); }
  std::vector<std::string> messages;

 private:
  gpuml::WarningHandler previous_;
};

/// An NVIDIA-like discrete GPU described by hand, so policy logic runs without Vulkan.
DeviceInfo fake_gpu() {
  DeviceInfo d;
  d.name = "Test GPU";
  d.type = DeviceType::discrete;
  d.vendor_id = tuning::kVendorNvidia;
  d.driver_version = 555;
  d.driver_info = "test driver 1.0";
  for (std::uint8_t i = 0; i < VK_UUID_SIZE; ++i) d.device_uuid[i] = i + 1;
  d.subgroup_size = d.min_subgroup_size = d.max_subgroup_size = 32;
  d.subgroup_size_control = true;
  d.max_workgroup_subgroups = 32;
  d.max_shared_memory = 48 * 1024;
  d.max_workgroup_invocations = 1024;
  d.max_workgroup_size = {1024, 1024, 64};
  d.max_workgroup_count = {65535, 65535, 65535};
  d.float64 = true;
  return d;
}

const tuning::TuneKey kSeedKey{gpuml::kKMeansKernel, "d<=32,k<=128", "f32"};

TEST(TuningStore, RoundTrip) {
  TempCacheDir dir;
  const DeviceInfo gpu = fake_gpu();
  tuning::TuningStore store;
  store.put(gpu, kSeedKey, {256, 2, 8, 16, 128, 0}, 1.5);
  store.put(gpu, {gpuml::kKMeansKernel, "d>32,k>128", "f64"}, {64, 4, 4, 32, 512, 0}, 7.25);
  store.put(gpu, kSeedKey, {128, 4, 8, 16, 128, 0}, 1.25);  // replaces the first
  ASSERT_EQ(tuning::TuningStore::default_path(), dir.store_file());
  ASSERT_TRUE(store.save(dir.store_file()));

  CapturedWarnings warnings;
  const auto loaded = tuning::TuningStore::load(dir.store_file());
  EXPECT_TRUE(warnings.messages.empty());
  ASSERT_EQ(loaded.entries().size(), 2u);
  const auto* e = loaded.find(gpu, kSeedKey);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->params, (tuning::Params{128, 4, 8, 16, 128, 0}));
  EXPECT_DOUBLE_EQ(e->ms, 1.25);
  EXPECT_EQ(e->device_name, "Test GPU");
  ASSERT_NE(loaded.find(gpu, {gpuml::kKMeansKernel, "d>32,k>128", "f64"}), nullptr);
  EXPECT_EQ(tuning::stored_params(gpu, kSeedKey), (tuning::Params{128, 4, 8, 16, 128, 0}));
}

TEST(TuningStore, LookupIsKeyedByDeviceDriverKernelShapeAndScalar) {
  const DeviceInfo gpu = fake_gpu();
  tuning::TuningStore store;
  store.put(gpu, kSeedKey, {256, 2, 8, 16, 128, 0}, 1.0);
  ASSERT_NE(store.find(gpu, kSeedKey), nullptr);

  DeviceInfo other = gpu;
  other.device_uuid[0] ^= 0xFF;
  EXPECT_EQ(store.find(other, kSeedKey), nullptr) << "another device";
  other = gpu;
  other.driver_version += 1;
  EXPECT_EQ(store.find(other, kSeedKey), nullptr) << "another driver version";
  other = gpu;
  other.driver_info = "test driver 1.1";
  EXPECT_EQ(store.find(other, kSeedKey), nullptr) << "another driver build";
  EXPECT_EQ(store.find(gpu, {gpuml::kKMeansKernel, "d<=32,k>128", "f32"}), nullptr);
  EXPECT_EQ(store.find(gpu, {gpuml::kKMeansKernel, "d<=32,k<=128", "f64"}), nullptr);
  EXPECT_EQ(store.find(gpu, {"knn_select", "d<=32,k<=128", "f32"}), nullptr);
}

TEST(TuningStore, CorruptFilesAreIgnoredWithAWarning) {
  TempCacheDir dir;
  const DeviceInfo gpu = fake_gpu();
  for (const std::string& text : {std::string("{\"format\": \"gpuml-tuning-1\", \"entries\": [{\"dev"),
                                 std::string("\x01\x02 not json at all"), std::string("{\"format\": \"other\", \"entries\": []}"),
                                 std::string("{\"format\": \"gpuml-tuning-1\", \"entries\": 3}"), std::string("[1, 2, 3]")}) {
    std::ofstream(dir.store_file(), std::ios::binary) << text;
    CapturedWarnings warnings;
    EXPECT_TRUE(tuning::TuningStore::load(dir.store_file()).entries().empty()) << text;
    ASSERT_EQ(warnings.messages.size(), 1u) << text;
    EXPECT_NE(warnings.messages[0].find(dir.store_file()), std::string::npos) << warnings.messages[0];

    tuning::reload_store();  // the process's store: the same warning, and the catalogue tile
    EXPECT_FALSE(tuning::stored_params(gpu, kSeedKey));
    EXPECT_EQ(KMeansResolved::params<float>(gpu, 127, 14), gpuml::kmeans_catalogue_tile(gpu));
    EXPECT_EQ(warnings.messages.size(), 2u);
  }

  // Entries not understood are dropped one by one; the rest of the file still counts.
  tuning::TuningStore good;
  good.put(gpu, kSeedKey, {256, 2, 8, 16, 128, 0}, 1.0);
  ASSERT_TRUE(good.save(dir.store_file()));
  std::string text;
  {
    std::ifstream in(dir.store_file());
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t list = text.find('[');
  text.insert(list + 1, "{\"device\": \"x\", \"params\": [-1]}, 17, {\"device\": \"y\", \"params\": [1.5]},");
  std::ofstream(dir.store_file(), std::ios::binary) << text;
  CapturedWarnings warnings;
  const auto loaded = tuning::TuningStore::load(dir.store_file());
  EXPECT_EQ(loaded.entries().size(), 1u);
  EXPECT_EQ(warnings.messages.size(), 3u);
  ASSERT_NE(loaded.find(gpu, kSeedKey), nullptr);
}

TEST(DeviceClass, TellsVendorsAndGenerationsApart) {
  using tuning::DeviceClass;
  DeviceInfo d = fake_gpu();
  EXPECT_EQ(tuning::device_class(d), DeviceClass::nvidia);
  d.vendor_id = tuning::kVendorAmd;
  d.min_subgroup_size = 32, d.max_subgroup_size = 64;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::amd_rdna);
  d.min_subgroup_size = 64;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::amd_gcn);
  d.vendor_id = tuning::kVendorIntel;
  d.min_subgroup_size = 8, d.max_subgroup_size = 32;
  d.type = DeviceType::integrated;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::intel_gen_igpu);
  d.type = DeviceType::discrete;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::intel_gen_dgpu);
  d.min_subgroup_size = 16;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::intel_xe2_dgpu);
  d.type = DeviceType::integrated;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::intel_xe2_igpu);
  d.subgroup_size_control = false;  // the minimum is not known then
  EXPECT_EQ(tuning::device_class(d), DeviceClass::intel_gen_igpu);
  d.type = DeviceType::cpu;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::cpu);
  d.type = DeviceType::discrete;
  d.vendor_id = 0x1234;
  EXPECT_EQ(tuning::device_class(d), DeviceClass::other);
}

TEST(KMeansTile, CatalogueTilesRunTheirClassAndCheckedLimitsHold) {
  DeviceInfo gpu = fake_gpu();
  for (std::uint32_t vendor : {tuning::kVendorNvidia, tuning::kVendorAmd, tuning::kVendorIntel, 0x1234u}) {
    gpu.vendor_id = vendor;
    const KMeansTileParams tile = gpuml::kmeans_catalogue_tile(gpu);
    EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(gpu, tile, 127, 14), "") << tile.text();
    EXPECT_EQ(gpuml::kmeans_tile_misfit<double>(gpu, tile, 1024, 1024), "") << tile.text();
  }
  gpu = fake_gpu();
  // Shared memory: 1024 threads keep a k-bit mask word per 32 threads and cluster: 4 * 512 * 32 bytes > 48 KiB.
  const KMeansTileParams wide{1024, 1, 1, 16, 128};
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, wide, 512, 16).find("shared memory"), std::string::npos)
      << gpuml::kmeans_tile_misfit<float>(gpu, wide, 512, 16);
  EXPECT_TRUE(gpuml::kmeans_can_implement<float>(gpu, wide, 64, 16));
  gpu.max_workgroup_invocations = 256;
  EXPECT_FALSE(gpuml::kmeans_can_implement<float>(gpu, wide, 64, 16));
  gpu = fake_gpu();
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {128, 8, 8, 32, 128}, 127, 64), "") << "register tile";
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {100, 4, 8, 16, 128}, 127, 14), "") << "threads";
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {128, 4, 8, 16, 100}, 127, 14), "") << "center tile";
  // Subgroup sizes: only within the device's range, with subgroup size control, and the workgroup bound.
  EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(gpu, {128, 4, 8, 16, 128, 32}, 127, 14), "");
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {128, 4, 8, 16, 128, 16}, 127, 14), "");
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {1024, 1, 8, 16, 128, 16}, 127, 14), "");
  gpu.min_subgroup_size = 16;
  EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(gpu, {128, 4, 8, 16, 128, 16}, 127, 14), "");
  gpu.max_workgroup_subgroups = 4;
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {128, 4, 8, 16, 128, 16}, 127, 14), "") << "128 > 4 x 16";
  gpu.subgroup_size_control = false;
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(gpu, {64, 4, 8, 16, 128, 16}, 127, 14), "");
  // CPU devices: no register tile above kCpuMaxRegisterTile (lavapipe miscomputes them).
  DeviceInfo cpu = fake_gpu();
  cpu.type = DeviceType::cpu;
  EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(cpu, gpuml::kmeans_catalogue_tile(cpu), 127, 14), "");
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(cpu, {128, 4, 8, 16, 128}, 127, 14), "");
  // ... nor more center x feature tiles per sample tile than llvmpipe's shared loop limiter leaves room for.
  EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(cpu, {128, 4, 4, 4, 128}, 256, 64), "");
  EXPECT_NE(gpuml::kmeans_tile_misfit<float>(cpu, {128, 4, 4, 4, 128}, 1024, 1024).find("loop limit"), std::string::npos);
  EXPECT_EQ(gpuml::kmeans_tile_misfit<float>(fake_gpu(), {128, 4, 4, 4, 128}, 1024, 1024), "");
  // Every candidate the tuner would try on these devices is at least a well-formed tile.
  for (const auto& device : {fake_gpu(), cpu})
    for (const auto& shape : tuning::kmeans_shape_classes())
      for (const auto& p : tuning::kmeans_candidates(device, shape)) {
        const auto tile = KMeansTileParams::from_params(p);
        ASSERT_TRUE(tile);
        EXPECT_EQ(gpuml::kmeans_tile_shape_misfit(device, *tile), "") << tile->text();
      }
  EXPECT_EQ((KMeansTileParams{128, 4, 8, 16, 128}.text()), "128,4,8,16,128");
  EXPECT_EQ((KMeansTileParams{128, 4, 8, 16, 128, 32}.text()), "128,4,8,16,128,32");
}

TEST(KMeansPolicy, OverrideThenStoredWinnerThenCatalogue) {
  TempCacheDir dir;
  const DeviceInfo gpu = fake_gpu();
  const KMeansTileParams winner{256, 2, 8, 16, 128};
  tuning::TuningStore store;
  store.put(gpu, kSeedKey, winner.to_params(), 1.0);
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  using Resolve = KMeansResolved;
  const KMeansTileParams catalogue = gpuml::kmeans_catalogue_tile(gpu);
  ASSERT_NE(winner, catalogue);

  EXPECT_EQ(Resolve::params<float>(gpu, 127, 14), winner);
  EXPECT_EQ(Resolve::params<float>(gpu, 2, 32), winner) << "the same shape class";
  EXPECT_EQ(Resolve::params<double>(gpu, 127, 14), catalogue) << "no float64 winner";
  EXPECT_EQ(Resolve::params<float>(gpu, 129, 14), catalogue) << "another shape class";
  DeviceInfo other = gpu;
  other.driver_version += 1;
  EXPECT_EQ(Resolve::params<float>(other, 127, 14), catalogue) << "another driver";
  {
    gpuml::ScopedConfig off(gpuml::config().set_tuning(false));
    EXPECT_EQ(Resolve::params<float>(gpu, 127, 14), catalogue);
  }
  {
    gpuml::ScopedConfig tile(gpuml::config().set_kmeans_tile("64,4,4,8,128"));
    EXPECT_EQ(Resolve::params<float>(gpu, 127, 14), (KMeansTileParams{64, 4, 4, 8, 128}));
  }
  CapturedWarnings warnings;
  for (const char* bad : {"64,4,4,8", "64,4,4,8,128,32,1", "64;4;4;8;128", "100,4,4,8,128", "64,4,4,8,128x"}) {
    gpuml::ScopedConfig tile(gpuml::config().set_kmeans_tile(bad));
    EXPECT_EQ(Resolve::params<float>(gpu, 127, 14), winner) << bad;
  }
  EXPECT_EQ(warnings.messages.size(), 5u);
}

TEST(KMeansPolicy, StoredWinnersThatCannotRunAreNotUsed) {
  TempCacheDir dir;
  DeviceInfo gpu = fake_gpu();
  tuning::TuningStore store;
  store.put(gpu, kSeedKey, {1024, 1, 8, 16, 128, 0}, 1.0);                            // fits 48 KiB for k = 127
  store.put(gpu, {gpuml::kKMeansKernel, "d<=32,k>128", "f32"}, {128, 4, 8, 16}, 1.0);  // not a tile
  store.put(gpu, {gpuml::kKMeansKernel, "d>32,k<=128", "f32"}, {128, 4, 8, 16, 100, 0}, 1.0);
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  using Resolve = KMeansResolved;
  const KMeansTileParams catalogue = gpuml::kmeans_catalogue_tile(gpu);

  CapturedWarnings warnings;
  EXPECT_EQ(Resolve::params<float>(gpu, 127, 14), (KMeansTileParams{1024, 1, 8, 16, 128}));
  // 1024 threads cannot run 127 centers' masks beside centers in 8 KiB of shared memory: quietly the catalogue.
  DeviceInfo small = gpu;
  small.max_shared_memory = 8 * 1024;
  ASSERT_TRUE(gpuml::kmeans_can_implement<float>(small, catalogue, 127, 14));
  EXPECT_EQ(Resolve::params<float>(small, 127, 14), catalogue);
  EXPECT_TRUE(warnings.messages.empty());
  // Entries that are not tiles: the catalogue, with one warning each however often they are looked up.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Resolve::params<float>(gpu, 512, 16), catalogue);
    EXPECT_EQ(Resolve::params<float>(gpu, 64, 64), catalogue);
  }
  EXPECT_EQ(warnings.messages.size(), 2u);

  // On a CPU device, a winner tuned at k = 256, d = 64 is not used where its loops would pass llvmpipe's limit.
  DeviceInfo cpu = fake_gpu();
  cpu.type = DeviceType::cpu;
  const KMeansTileParams cpu_winner{64, 4, 4, 4, 128};
  store.put(cpu, {gpuml::kKMeansKernel, "d>32,k>128", "f32"}, cpu_winner.to_params(), 1.0);
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  EXPECT_EQ(Resolve::params<float>(cpu, 256, 64), cpu_winner);
  // There the catalogue itself gives way to the CPU tile with the fewest center x feature tiles: 8 centers per
  // thread, whose split search takes 64 centers by 16 features per tile (4 centers per thread split 32 centers by
  // 32 features, but its arrays do not fit 48 KiB beside the sums' masks: the walk, 4 centers per tile).
  const KMeansTileParams wide = Resolve::params<float>(cpu, 1024, 1024);
  EXPECT_EQ(wide, gpuml::kmeans_catalogue_tile<float>(cpu, 1024, 1024));
  EXPECT_NE(wide, gpuml::kmeans_catalogue_tile(cpu));
  EXPECT_EQ(wide, (gpuml::KMeansTile<128, 1, 8, 16, 128>::tile));
  EXPECT_EQ(gpuml::kmeans_catalogue_tile<float>(cpu, 127, 14), gpuml::kmeans_catalogue_tile(cpu));
}

// ---- the tile-policy system -------------------------------------------------------------------------------

static_assert(gpuml::kernels::TileTraits<gpuml::KMeansTileTraits>);
static_assert(gpuml::kernels::TileTraits<gpuml::kernels::KnnTileTraits>);
static_assert(gpuml::kernels::TileTraits<gpuml::kernels::DistanceTileTraits>);

// can_implement answers without throwing and says why, for every kernel's traits; the one resolver gives each
// kernel's catalogue where nothing overrides or is stored.
TEST(TilePolicy, CanImplementSaysWhyAndTheResolverFallsToTheCatalogue) {
  TempCacheDir dir;
  namespace k = gpuml::kernels;
  DeviceInfo small = fake_gpu();
  small.max_shared_memory = 8 * 1024;
  std::string why;
  // k-means: a 1024-thread tile cannot hold 127 centers' masks in 8 KiB (plan_lloyd's limit, reported, not thrown).
  EXPECT_FALSE((k::can_implement<gpuml::KMeansTileTraits, float>(small, {1024, 1, 8, 16, 128}, {127, 14}, &why)));
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE((k::can_implement<gpuml::KMeansTileTraits, float>(fake_gpu(), {128, 4, 8, 16, 128}, {127, 14}, &why))) << why;
  // k-NN and distances: shapes the kernel cannot take, and shared memory beyond the device's.
  EXPECT_FALSE((k::can_implement<k::KnnTileTraits, float>(fake_gpu(), {16, 16, 6, 8, 16, 1024}, {10, 128}, &why)));
  EXPECT_NE(why.find("multiples of 4"), std::string::npos) << why;
  EXPECT_FALSE((k::can_implement<k::DistanceTileTraits, double>(small, {16, 16, 8, 8, 16}, {0, 128}, &why)));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  EXPECT_TRUE((k::can_implement<k::DistanceTileTraits, float>(fake_gpu(), {16, 16, 8, 8, 16}, {0, 128}, &why))) << why;
  // Nothing stored, no override: the catalogues.
  EXPECT_EQ((k::resolve_tile<gpuml::KMeansTileTraits, float>(fake_gpu(), {127, 14})),
            gpuml::kmeans_catalogue_tile<float>(fake_gpu(), 127, 14));
  EXPECT_EQ(k::KnnTileTraits::encode(k::resolve_tile<k::KnnTileTraits, float>(fake_gpu(), {10, 128})),
            k::KnnTileTraits::encode(k::KnnTileTraits::catalogue<float>(fake_gpu())));
  EXPECT_EQ(k::DistanceTileTraits::encode(k::resolve_tile<k::DistanceTileTraits, double>(fake_gpu(), {0, 128})),
            (std::vector<std::uint32_t>{16, 16, 8, 8, 8}));
  // A kernel's tile: the fixed one where given (a compile-time policy's, the tuner's candidate), else the resolver's.
  EXPECT_EQ((k::choose_tile<gpuml::KMeansTileTraits, float>(KMeansTileParams{64, 2, 4, 8, 128}, fake_gpu(), {127, 14})),
            (KMeansTileParams{64, 2, 4, 8, 128}));
  EXPECT_EQ((k::choose_tile<gpuml::KMeansTileTraits, float>(std::nullopt, fake_gpu(), {127, 14})),
            gpuml::kmeans_catalogue_tile<float>(fake_gpu(), 127, 14));
  EXPECT_EQ((k::choose_tile<gpuml::KMeansTileTraits, float>(gpuml::KMeansTile<64, 2, 4, 8, 128>::fixed_tile, fake_gpu(),
                                                             {127, 14})),
            (KMeansTileParams{64, 2, 4, 8, 128}))
      << "a compile-time policy's tile";
  EXPECT_FALSE(gpuml::kmeans_default_policy::fixed_tile) << "the default policy leaves the tile to the resolver";
}

// ---- k-NN ----------------------------------------------------------------------------------------------------

using KnnTraits = gpuml::kernels::KnnTileTraits;
/// The tile the k-NN kernel resolves for a problem (override, stored winner, catalogue).
struct KnnResolved {
  template <class T>
  static gpuml::kernels::KnnTileParams params(const gpuml::vulkan::DeviceInfo& device, std::uint32_t k, std::uint32_t d) {
    return gpuml::kernels::resolve_tile<KnnTraits, T>(device, {k, d});
  }
};
using gpuml::kernels::KnnTileParams;
tuning::Params P(const KnnTileParams& t) { return KnnTraits::encode(t); }

TEST(KnnPolicy, OverrideThenStoredWinnerThenCatalogue) {
  TempCacheDir dir;
  const DeviceInfo gpu = fake_gpu();
  const KnnTileParams winner{16, 8, 8, 8, 8, 2048};
  tuning::TuningStore store;
  store.put(gpu, {KnnTraits::kernel, "d>32,k<=32", "f32"}, P(winner), 1.0);
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  const KnnTileParams catalogue = KnnTraits::catalogue<float>(gpu);
  ASSERT_NE(P(winner), P(catalogue));

  EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 128)), P(winner));
  EXPECT_EQ(P(KnnResolved::params<float>(gpu, 32, 33)), P(winner)) << "the same shape class";
  EXPECT_EQ(P(KnnResolved::params<float>(gpu, 100, 128)), P(catalogue)) << "another shape class";
  EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 16)), P(catalogue)) << "another shape class";
  EXPECT_EQ(P(KnnResolved::params<double>(gpu, 10, 128)), P(KnnTraits::catalogue<double>(gpu))) << "no float64 winner";
  {
    gpuml::ScopedConfig off(gpuml::config().set_tuning(false));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 128)), P(catalogue));
  }
  {
    gpuml::ScopedConfig tile(gpuml::config().set_knn_tile("8,8,4,4,8"));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 128)), P(KnnTileParams{8, 8, 4, 4, 8, 1024}));
  }
  {
    gpuml::ScopedConfig tile(gpuml::config().set_knn_tile("8,16,8,4,16,4096"));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 100, 16)), P(KnnTileParams{8, 16, 8, 4, 16, 4096}));
  }
  CapturedWarnings warnings;
  for (const char* bad : {"8,8,4,4", "8,8,4,4,8,1024,1", "8;8;4;4;8", "8,8,6,4,8", "64,64,8,8,8", "8,8,4,4,8x"}) {
    gpuml::ScopedConfig tile(gpuml::config().set_knn_tile(bad));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 128)), P(winner)) << bad;
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 128)), P(winner)) << bad;
  }
  EXPECT_EQ(warnings.messages.size(), 6u) << "one warning per value";
}

TEST(KnnPolicy, StoredEntriesThatCannotRunGiveTheCatalogue) {
  TempCacheDir dir;
  const DeviceInfo gpu = fake_gpu();
  tuning::TuningStore store;
  store.put(gpu, {KnnTraits::kernel, "d<=32,k<=32", "f32"}, {16, 16, 8, 8}, 1.0);                // not a tile
  store.put(gpu, {KnnTraits::kernel, "d<=32,k>32", "f32"}, {16, 16, 6, 8, 8, 1024}, 1.0);         // tm not a multiple of 4
  store.put(gpu, {KnnTraits::kernel, "d>32,k>32", "f32"}, P(KnnTileParams{32, 32, 8, 8, 16}), 1.0);  // > 48 KiB shared
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  const KnnTileParams catalogue = KnnTraits::catalogue<float>(gpu);
  CapturedWarnings warnings;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 10, 16)), P(catalogue));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 100, 16)), P(catalogue));
    EXPECT_EQ(P(KnnResolved::params<float>(gpu, 100, 128)), P(catalogue));
  }
  EXPECT_EQ(warnings.messages.size(), 3u) << "one warning per entry";
  // A valid entry for the same device is used.
  store.put(gpu, {KnnTraits::kernel, "d>32,k>32", "f32"}, P(KnnTileParams{8, 8, 8, 8, 16, 512}), 1.0);
  ASSERT_TRUE(store.save(tuning::TuningStore::default_path()));
  tuning::reload_store();
  EXPECT_EQ(P(KnnResolved::params<float>(gpu, 100, 128)), P(KnnTileParams{8, 8, 8, 8, 16, 512}));
}

// ---- On the Vulkan device (lavapipe in CI) -----------------------------------------------------------------

std::shared_ptr<gpuml::vulkan::Device> test_device() {
  for (auto& b : gpuml::testing::backends())
    if (b.backend.is_vulkan()) return b.backend.shared_device();
  return nullptr;
}

// A compile-time policy at the API reaches the kernels as a value: a fixed tile the device can run gives the default
// policy's result, one it cannot (a subgroup size no device has, k above the policy's max_k) sends the work to the
// host with run_on's warning, and the host's result comes back.
TEST(CompileTimePolicy, ReachesTheKernelsThroughTheEstimators) {
  gpuml::Backend backend = gpuml::Backend::host();
  for (auto& b : gpuml::testing::backends())
    if (b.backend.is_vulkan()) backend = b.backend;
  if (!backend.is_vulkan()) GTEST_SKIP() << "no Vulkan device";
  const std::uint64_t seed = gpuml::testing::test_seed();
  const Matrix<double> centers = gpuml::testing::random_matrix<double>(7, 6, seed + 1, -10.0, 10.0);
  const Matrix<double> noise = gpuml::testing::random_matrix<double>(3001, 6, seed + 2, -0.5, 0.5);
  Matrix<float> X(3001, 6);
  for (Eigen::Index i = 0; i < X.rows(); ++i) X.row(i) = (centers.row(i % 7) + noise.row(i)).cast<float>();
  const Matrix<float> Q = gpuml::testing::random_matrix<double>(41, 6, seed + 3, -10.0, 10.0).cast<float>();

  // k-NN: KnnTile's tile and max_k (8) travel in KnnSearchOptions::policy.
  using SmallKnn = gpuml::kernels::KnnTile<4, 4, 4, 4, 4, 8>;
  gpuml::NearestNeighbors<float> plain({}, backend);
  gpuml::NearestNeighbors<float, SmallKnn> small({}, backend);
  plain.fit(X);
  small.fit(X);
  {
    CapturedWarnings warnings;
    EXPECT_TRUE(small.kneighbors(Q, 8).indices == plain.kneighbors(Q, 8).indices);
    EXPECT_TRUE(warnings.messages.empty()) << warnings.messages.front();
  }
  {
    CapturedWarnings warnings;
    const auto wide = small.kneighbors(Q, 9);
    EXPECT_TRUE(wide.indices == plain.kneighbors(Q, 9).indices);
    ASSERT_EQ(warnings.messages.size(), 1u) << "k = 9 is above the policy's max_k: the host searched";
    EXPECT_NE(warnings.messages[0].find("k <= 8"), std::string::npos) << warnings.messages[0];
  }

  // k-means: a runnable fixed tile, and one pinning a subgroup size of 128 lanes, which no device runs.
  gpuml::KMeansParams p;
  p.n_clusters = 7;
  p.random_state = seed;
  gpuml::KMeans<float> by_default(p, backend);
  gpuml::KMeans<float, gpuml::KMeansTile<64, 2, 4, 8, 128>> fixed(p, backend);
  gpuml::KMeans<float, gpuml::KMeansTile<128, 4, 4, 8, 128, 128>> unrunnable(p, backend);
  gpuml::KMeans<float> on_host(p, gpuml::Backend::host());
  by_default.fit(X);
  {
    CapturedWarnings warnings;
    fixed.fit(X);
    EXPECT_TRUE(warnings.messages.empty()) << warnings.messages.front();
  }
  EXPECT_TRUE(fixed.labels() == by_default.labels());
  EXPECT_NEAR(fixed.inertia(), by_default.inertia(), 1e-5 * by_default.inertia());
  on_host.fit(X);
  {
    CapturedWarnings warnings;
    unrunnable.fit(X);
    ASSERT_FALSE(warnings.messages.empty()) << "the device cannot run the tile: the host fitted";
    EXPECT_NE(warnings.messages[0].find("subgroup"), std::string::npos) << warnings.messages[0];
  }
  EXPECT_TRUE(unrunnable.labels() == on_host.labels());
  EXPECT_EQ(unrunnable.inertia(), on_host.inertia());
  EXPECT_TRUE(unrunnable.predict(Q) == on_host.predict(Q));
}

TEST(Tuner, PinnedSubgroupSizeBuildsWhereTheDeviceAllowsIt) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  const auto& info = device->info();
  KMeansTileParams tile = gpuml::kmeans_catalogue_tile(info);
  tile.subgroup_size = info.max_subgroup_size;
  if (!info.subgroup_size_control) {
    EXPECT_FALSE(gpuml::kmeans_can_implement<float>(info, tile, 127, 14));
    GTEST_SKIP() << info.name << " cannot pin a subgroup size";
  }
  ASSERT_EQ(gpuml::kmeans_tile_misfit<float>(info, tile, 127, 14), "");
  // The pipeline with VkPipelineShaderStageRequiredSubgroupSizeCreateInfo: the validation layer (strict in the
  // tests) checks the feature is enabled and the size is allowed.
  gpuml::kernels::LloydPlan plan;
  ASSERT_EQ(gpuml::kernels::plan_lloyd<float>(info, tile, 127, 14, false, plan), "");
  const std::uint64_t before = gpuml::vulkan::validation_message_count();
  device->kernel(gpuml::shaders::kmeans_lloyd_kernel::spec(plan.constants(), tile.subgroup_size));
  EXPECT_EQ(gpuml::vulkan::validation_message_count(), before);
}

/// Records which parameter sets a bench was asked to time.
class RecordingBench final : public tuning::ShapeBench {
 public:
  RecordingBench(std::unique_ptr<tuning::ShapeBench> inner, std::vector<tuning::Params>& timed)
      : inner_(std::move(inner)), timed_(timed) {}
  std::string problem() const override { return inner_->problem(); }
  double time_ms(const tuning::Params& p, int warmups, int reps) override {
    timed_.push_back(p);
    return inner_->time_ms(p, warmups, reps);
  }

 private:
  std::unique_ptr<tuning::ShapeBench> inner_;
  std::vector<tuning::Params>& timed_;
};

TEST(Tuner, UnrunnableCandidateIsRejectedAndNeverDispatched) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  const std::string shape = "d<=32,k>128";  // k = 512
  const KMeansTileParams unrunnable{1024, 1, 1, 16, 128};  // 1024 threads' masks for 512 centers: 64 KiB shared
  ASSERT_FALSE(gpuml::kmeans_can_implement<float>(device->info(), unrunnable, 512, 16));

  std::vector<tuning::Params> timed;
  tuning::TunableKernel kernel = tuning::kmeans_tunable();
  kernel.candidates = [&](const DeviceInfo& info, const std::string& s) {
    auto all = tuning::kmeans_candidates(info, s);
    return std::vector<tuning::Params>{all[0], unrunnable.to_params(), all[1]};
  };
  const auto make_bench = kernel.bench;
  kernel.bench = [&](gpuml::vulkan::Device& d, const std::string& s, const std::string& scalar, std::uint64_t rows) {
    return std::unique_ptr<tuning::ShapeBench>(std::make_unique<RecordingBench>(make_bench(d, s, scalar, rows), timed));
  };
  tuning::TuneOptions options;
  options.budget_seconds = 20;
  options.shapes = {shape};
  options.store = false;
  const auto report = tuning::tune(*device, options, {kernel});
  ASSERT_EQ(report.shapes.size(), 1u);
  const auto& r = report.shapes[0];
  ASSERT_EQ(r.candidates.size(), 3u);
  EXPECT_EQ(r.candidates[1].status.rfind("rejected: ", 0), 0u) << r.candidates[1].status;
  EXPECT_NE(r.candidates[1].status.find("shared memory"), std::string::npos) << r.candidates[1].status;
  EXPECT_FALSE(r.candidates[1].timed());
  EXPECT_TRUE(r.candidates[0].timed()) << r.candidates[0].status;
  EXPECT_TRUE(r.candidates[2].timed()) << r.candidates[2].status;
  EXPECT_FALSE(timed.empty());
  for (const auto& p : timed) EXPECT_NE(p, unrunnable.to_params()) << "an unrunnable tile was dispatched";
  EXPECT_TRUE(report.store_path.empty());
  EXPECT_EQ(report.stored, 0);
}

/// Fixed times per candidate (its first parameter), so the tuner's choice is checked without timing anything.
/// With `loaded_default_ms`, the default (parameter 1) takes that long in calls of several repetitions, as if other
/// load slowed those down, and its fixed time in single calls.
class FixedBench final : public tuning::ShapeBench {
 public:
  FixedBench(std::map<std::uint32_t, double> ms, double loaded_default_ms)
      : ms_(std::move(ms)), loaded_default_ms_(loaded_default_ms) {}
  std::string problem() const override { return "fixed"; }
  double time_ms(const tuning::Params& p, int, int reps) override {
    if (p.at(0) == 1 && reps > 1 && loaded_default_ms_ > 0) return loaded_default_ms_;
    return ms_.at(p.at(0));
  }

 private:
  std::map<std::uint32_t, double> ms_;
  double loaded_default_ms_;
};

tuning::TunableKernel fixed_kernel(const std::map<std::uint32_t, double>& ms, double loaded_default_ms = 0) {
  tuning::TunableKernel k;
  k.name = "fixed";
  k.shapes = {"any"};
  k.candidates = [ms](const DeviceInfo&, const std::string&) {
    std::vector<tuning::Params> out;
    for (const auto& [p, t] : ms) out.push_back({p});  // 1 first: the default
    return out;
  };
  k.misfit = [](const DeviceInfo&, const tuning::Params&, const std::string&, const std::string&) {
    return std::string();
  };
  k.describe = [](const tuning::Params& p) { return std::to_string(p.at(0)); };
  k.rows = [](const DeviceInfo&, const std::string&, const std::string&) { return tuning::RowRange{1, 1}; };
  k.bench = [ms, loaded_default_ms](gpuml::vulkan::Device&, const std::string&, const std::string&, std::uint64_t) {
    return std::unique_ptr<tuning::ShapeBench>(std::make_unique<FixedBench>(ms, loaded_default_ms));
  };
  return k;
}

TEST(Tuner, ACandidateMustBeatTheDefaultByTheMargin) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  auto run = [&](const std::map<std::uint32_t, double>& ms, double min_gain, double loaded_default_ms = 0) {
    tuning::TuneOptions options;
    options.store = false;
    options.min_gain = min_gain;
    const auto report = tuning::tune(*device, options, {fixed_kernel(ms, loaded_default_ms)});
    EXPECT_EQ(report.shapes.size(), 1u);
    return report.shapes.at(0);
  };
  // 3% faster than the default: not enough for a 5% margin; the default is kept, the fastest still reported.
  auto r = run({{1, 100.0}, {2, 97.0}, {3, 150.0}}, 0.05);
  EXPECT_EQ(r.winner, 0);
  EXPECT_EQ(r.fastest, 1);
  EXPECT_EQ(r.worst, 2);
  EXPECT_DOUBLE_EQ(r.min_gain, 0.05);
  EXPECT_LT(r.paired_ratio, 0) << "no pairs: the best times already fall short";
  // 10% faster: wins, in best times and in pairs.
  r = run({{1, 100.0}, {2, 90.0}, {3, 150.0}}, 0.05);
  EXPECT_EQ(r.winner, 1);
  EXPECT_EQ(r.fastest, 1);
  EXPECT_DOUBLE_EQ(r.paired_ratio, 0.9);
  // 3% faster, but the default's timings of several calls were slowed to 110: 12% in best times, 3% in pairs.
  r = run({{1, 100.0}, {2, 97.0}, {3, 150.0}}, 0.05, 110.0);
  EXPECT_EQ(r.fastest, 1);
  EXPECT_EQ(r.winner, 0);
  EXPECT_DOUBLE_EQ(r.paired_ratio, 0.97);
  // No margin: the fastest wins however small its lead, and no pairs are timed.
  r = run({{1, 100.0}, {2, 99.5}, {3, 150.0}}, 0);
  EXPECT_EQ(r.winner, 1);
  EXPECT_LT(r.paired_ratio, 0);
  // The default fastest: it wins.
  r = run({{1, 90.0}, {2, 95.0}, {3, 150.0}}, 0.05);
  EXPECT_EQ(r.winner, 0);
  EXPECT_EQ(r.fastest, 0);
  // The device's default margin: 5% on CPU devices, none on GPUs.
  const bool cpu = device->info().type == DeviceType::cpu;
  r = run({{1, 100.0}, {2, 97.0}, {3, 150.0}}, -1);
  EXPECT_DOUBLE_EQ(r.min_gain, cpu ? 0.05 : 0.0);
  EXPECT_EQ(r.winner, cpu ? 0 : 1);
  // Margins no candidate could meet, and budgets that are not a time: refused before anything is timed.
  for (double bad : {1.0, 2.5, std::nan("")}) {
    tuning::TuneOptions options;
    options.store = false;
    options.min_gain = bad;
    EXPECT_THROW(tuning::tune(*device, options, {fixed_kernel({{1, 100.0}}, 0)}), gpuml::invalid_input) << bad;
  }
  for (double bad : {0.0, -3.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    tuning::TuneOptions options;
    options.store = false;
    options.budget_seconds = bad;
    EXPECT_THROW(tuning::tune(*device, options, {fixed_kernel({{1, 100.0}}, 0)}), gpuml::invalid_input) << bad;
  }
}

TEST(Tuner, KnnProblemsOnCpuDevicesAreCutLikeRealSearches) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  const auto& info = device->info();
  if (info.type != DeviceType::cpu) GTEST_SKIP() << info.name << " is not a CPU device";
  // Every candidate runs each class's problem as several workgroups (llvmpipe runs one per core at a time, so a
  // problem of one or two favours the tiles that make more), and the queries leave the last query tile part idle.
  for (const auto& shape : tuning::knn_shape_classes()) {
    const auto s = tuning::knn_representative(shape);
    const auto range = tuning::knn_rows(info, shape, "f32");
    EXPECT_EQ(range.probe, range.max) << shape;
    const std::uint64_t m = tuning::knn_queries(info, s);
    for (const auto& p : tuning::knn_candidates(info, shape)) {
      const auto tile = KnnTraits::decode(p);
      ASSERT_TRUE(tile);
      if (!KnnTraits::shape_misfit<float>(info, *tile).empty()) continue;
      EXPECT_NE(m % tile->block_queries(), 0u) << shape << " " << KnnTraits::text(*tile);
      const auto plan = gpuml::kernels::knn_detail::cut<float>(info, device->max_buffer_bytes(), *tile, range.max, m, s.d, s.k);
      const std::uint64_t groups = (m + tile->block_queries() - 1) / tile->block_queries() * plan.splits;
      EXPECT_GE(groups, 4u) << shape << " " << KnnTraits::text(*tile);
      EXPECT_GE(plan.splits, 2u) << shape << " " << KnnTraits::text(*tile);
    }
  }
}

TEST(Tuner, TinyRunStoresAWinnerThatFitsLikeTheCatalogueTile) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  TempCacheDir dir;
  const auto& info = device->info();
  tuning::TuneOptions options;
  options.budget_seconds = 5;  // tight: fewer candidates than the list may be timed
  options.kernels = {gpuml::kKMeansKernel};
  options.shapes = {"d<=32,k<=128"};
  const auto report = tuning::tune(*device, options);
  ASSERT_EQ(report.shapes.size(), 1u);
  const auto& r = report.shapes[0];
  ASSERT_TRUE(r.candidates[0].timed()) << r.candidates[0].status;
  ASSERT_GE(r.winner, 0);
  ASSERT_GE(r.worst, 0);
  EXPECT_LE(r.candidates[r.winner].ms, r.candidates[0].ms);
  EXPECT_GE(r.candidates[r.worst].ms, r.candidates[r.winner].ms);
  EXPECT_TRUE(r.stored);
  EXPECT_EQ(report.store_path, dir.store_file());
  ASSERT_TRUE(std::filesystem::exists(dir.store_file()));

  // gpuml now uses the winner by default.
  const auto winner = KMeansTileParams::from_params(r.candidates[r.winner].params);
  ASSERT_TRUE(winner);
  EXPECT_EQ(KMeansResolved::params<float>(info, 127, 14), *winner);

  // The winner's, the catalogue's and the worst tile's fits agree: separated blobs, the same initial centers.
  const Eigen::Index n = 3000, d = 14, k = 127;
  const Matrix<double> centers = gpuml::testing::random_matrix<double>(k, d, 71, -10.0, 10.0);
  const Matrix<double> noise = gpuml::testing::random_matrix<double>(n, d, 72, -0.3, 0.3);
  Matrix<float> X(n, d);
  for (Eigen::Index i = 0; i < n; ++i) X.row(i) = (centers.row(i % k) + noise.row(i)).cast<float>();
  const Matrix<float> init = X.topRows(k);
  const gpuml::Vector<float> w = gpuml::Vector<float>::Ones(n);
  const auto tuned = gpuml::kernels::lloyd<float>(*device, X, w, init, 20, 0.0, false);
  for (int other : {0, r.worst}) {
    const auto tile = KMeansTileParams::from_params(r.candidates[other].params);
    const auto fit = gpuml::kernels::lloyd<float>(*device, X, w, init, 20, 0.0, false, {}, {},
                                                  gpuml::KMeansEStep::automatic, nullptr, *tile);
    EXPECT_TRUE((fit.labels.array() == tuned.labels.array()).all()) << "tile " << tile->text();
    EXPECT_NEAR(fit.inertia, tuned.inertia, 1e-5 * tuned.inertia) << "tile " << tile->text();
    EXPECT_EQ(fit.n_iter, tuned.n_iter);
  }
}

TEST(Tuner, TinyKnnRunStoresAWinnerThatSearchesLikeTheCatalogueTile) {
  auto device = test_device();
  if (!device) GTEST_SKIP() << "no Vulkan device";
  TempCacheDir dir;
  const auto& info = device->info();
  tuning::TuneOptions options;
  options.budget_seconds = 4;
  options.kernels = {KnnTraits::kernel};
  options.shapes = {"d<=32,k<=32"};
  const auto report = tuning::tune(*device, options);
  ASSERT_EQ(report.shapes.size(), 1u);
  const auto& r = report.shapes[0];
  ASSERT_TRUE(r.candidates[0].timed()) << r.candidates[0].status;
  ASSERT_GE(r.winner, 0);
  EXPECT_LE(r.candidates[r.winner].ms, r.candidates[0].ms);
  EXPECT_TRUE(r.stored);
  EXPECT_EQ(report.store_path, dir.store_file());

  // gpuml now uses the winner by default.
  const auto winner = KnnTraits::decode(r.candidates[r.winner].params);
  ASSERT_TRUE(winner);
  EXPECT_EQ(P(KnnResolved::params<float>(info, 10, 16)), P(*winner));

  // The winner's, the catalogue's and the worst tile's searches find the same neighbours.
  const Matrix<float> X = gpuml::testing::random_matrix<double>(5000, 16, 81, -1.0, 1.0).cast<float>();
  const Matrix<float> Q = gpuml::testing::random_matrix<double>(70, 16, 82, -1.0, 1.0).cast<float>();
  const auto tuned = gpuml::kernels::knn_search<float>(*device, X, Q, 10, gpuml::Metric::euclidean);
  for (int other : {0, r.worst}) {
    const auto tile = KnnTraits::decode(r.candidates[other].params);
    gpuml::kernels::KnnSearchOptions search = gpuml::kernels::KnnSearchOptions::from(gpuml::config());
    search.policy.tile = *tile;
    const auto found = gpuml::kernels::knn_search<float>(*device, X, Q, 10, gpuml::Metric::euclidean, nullptr, search);
    EXPECT_TRUE((found.indices.array() == tuned.indices.array()).all()) << "tile " << KnnTraits::text(*tile);
  }
}

}  // namespace
