// The backend: devices opened on first use, the one engine-choice rule (gpuml::run_on), and operations that follow
// the backend (KMeans.score on the device).
#include "support.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using gpuml::Backend;
using gpuml::KMeans;
using gpuml::KMeansParams;
using gpuml::Matrix;
using gpuml::Metric;
using gpuml::Vector;
using gpuml::testing::random_matrix;

/// The Vulkan backend under test, chosen afresh (so nothing else has opened it through this Backend), or nullopt.
std::optional<Backend> fresh_device_backend() {
  for (const auto& b : gpuml::testing::backends())
    if (b.backend.is_vulkan()) {
      const char* env = std::getenv("GPUML_TEST_DEVICE");
      return gpuml::select_backend(env && *env ? env : "cpu");
    }
  return std::nullopt;
}

struct CapturedWarnings {
  CapturedWarnings() : previous(gpuml::set_warning_handler([this](const std::string& m) { messages.push_back(m); })) {}
  ~CapturedWarnings() { gpuml::set_warning_handler(previous); }
  std::size_t containing(const std::string& text) const {
    return static_cast<std::size_t>(std::count_if(messages.begin(), messages.end(),
                                                   [&](const std::string& m) { return m.find(text) != std::string::npos; }));
  }
  std::vector<std::string> messages;
  gpuml::WarningHandler previous;
};

// Choosing a device and constructing estimators on it opens nothing; the first computation opens it, once, for
// every copy of the backend; the device's description needs no opening.
TEST(Backend, DeviceOpensOnFirstUse) {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Backend backend = *chosen;
  ASSERT_EQ(backend.device_count(), 1u);
  EXPECT_FALSE(backend.opened());
  EXPECT_FALSE(backend.device_info().name.empty());
  EXPECT_NE(gpuml::describe(backend).find(backend.device_info().name), std::string::npos);
  KMeansParams p;
  p.n_clusters = 3;
  KMeans<float> km(p, backend);
  gpuml::NearestNeighbors<float> nn({2, "euclidean"}, backend);
  const Backend copy = backend;
  EXPECT_FALSE(backend.opened()) << "constructing estimators opened the device";
  const Matrix<float> X = random_matrix<float>(61, 5, gpuml::testing::test_seed() + 1);
  km.fit(X);
  EXPECT_TRUE(backend.opened());
  EXPECT_TRUE(copy.opened()) << "a copy of the backend does not share its device";
  EXPECT_EQ(copy.device(), backend.device());
  EXPECT_EQ(backend.part(0).device(), backend.device());
}

// Threads asking for an unopened device at once get one device.
TEST(Backend, ConcurrentFirstUseOpensOneDevice) {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Backend backend = *chosen;
  std::vector<gpuml::vulkan::Device*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t) threads.emplace_back([&, t] { seen[t] = backend.device(); });
  for (auto& t : threads) t.join();
  for (auto* d : seen) EXPECT_EQ(d, seen.front());
  EXPECT_NE(seen.front(), nullptr);
}

// What the device cannot run goes to the host with one warning per reason, said once however often it recurs, and
// the result is the host engine's.
TEST(Backend, FallbackWarnsOnceAndMatchesTheHost) {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Backend backend = *chosen;
  constexpr int kmax = static_cast<int>(gpuml::kernels::kKnnMaxK);
  const int k = kmax + 3;  // beyond the device kernel's k
  const Matrix<float> db = random_matrix<float>(k + 11, 3, gpuml::testing::test_seed() + 2);
  const Matrix<float> q = random_matrix<float>(5, 3, gpuml::testing::test_seed() + 3);
  CapturedWarnings warnings;
  gpuml::NearestNeighbors<float> on_device({k, "euclidean"}, backend), on_host({k, "euclidean"}, Backend::host());
  on_device.fit(db);
  on_host.fit(db);
  const auto expected = on_host.kneighbors(q);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto got = on_device.kneighbors(q);
    EXPECT_EQ(got.indices, expected.indices);
    EXPECT_EQ(got.distances, expected.distances);
  }
  EXPECT_EQ(warnings.containing("k-NN search runs on the host backend"), 1u);
  EXPECT_EQ(warnings.containing("k = " + std::to_string(k)), 1u);
}

// The rule itself: the host backend never tries the device; unsupported on the device runs the host function;
// other errors propagate.
TEST(Backend, RunOnRule) {
  int device_calls = 0, host_calls = 0;
  auto device_fn = [&] { ++device_calls; return 1; };
  auto host_fn = [&] { ++host_calls; return 2; };
  EXPECT_EQ(gpuml::run_on<float>(Backend::host(), "test", device_fn, host_fn), 2);
  EXPECT_EQ(device_calls, 0);
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  EXPECT_EQ(gpuml::run_on<float>(*chosen, "test", device_fn, host_fn), 1);
  EXPECT_FALSE(chosen->opened()) << "the rule itself opened the device";
  CapturedWarnings warnings;
  EXPECT_EQ(gpuml::run_on<float>(
                *chosen, "the rule test", [&]() -> int { throw gpuml::unsupported("a limit of this test"); }, host_fn),
            2);
  EXPECT_EQ(warnings.containing("a limit of this test; the rule test runs on the host backend"), 1u);
  EXPECT_THROW(gpuml::run_on<float>(
                   *chosen, "test", [&]() -> int { throw gpuml::invalid_input("bad"); }, host_fn),
               gpuml::invalid_input);
  EXPECT_THROW(gpuml::run_on<float>(
                   *chosen, "test", [&]() -> int { throw gpuml::cancelled("stop"); }, host_fn),
               gpuml::cancelled);
}

// KMeans.score runs on the backend's engine: on the device it gives the host's value to rounding, with weights.
template <class T>
void score_matches_host() {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Backend backend = *chosen;
  const auto seed = gpuml::testing::test_seed();
  const Matrix<T> X = random_matrix<T>(1237, 7, seed + 4, -3.0, 5.0);
  const Matrix<T> Y = random_matrix<T>(977, 7, seed + 5, -3.0, 5.0);
  const Vector<T> w = (random_matrix<T>(977, 1, seed + 6, 0.1, 2.0)).col(0);
  KMeansParams p;
  p.n_clusters = 9;
  p.random_state = seed;
  KMeans<T> host(p, Backend::host());
  host.fit(X);
  KMeans<T> device(p, backend);
  device.set_cluster_centers(host.cluster_centers());
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  EXPECT_NEAR(device.score(Y), host.score(Y), tol * std::abs(host.score(Y)));
  EXPECT_NEAR(device.score(Y, w), host.score(Y, w), tol * std::abs(host.score(Y, w)));
  EXPECT_LT(device.score(Y, w), 0.0);
  if (std::is_same_v<T, float> || backend.device_info().float64) {
    EXPECT_TRUE(backend.opened()) << "score did not use the device";
  }
}

TEST(Backend, ScoreOnDeviceFloat) { score_matches_host<float>(); }
TEST(Backend, ScoreOnDeviceDouble) { score_matches_host<double>(); }

}  // namespace

namespace {

namespace vk = gpuml::vulkan;

/// What an application that uses Vulkan itself has made: its own instance (with the validation layer and gpuml's
/// message counter when validation is on), a logical device on the device under test with the features gpuml's own
/// device would enable, and a compute queue. Destroyed by the application, after gpuml is done with it.
class ApplicationDevice {
 public:
  explicit ApplicationDevice(const vk::DeviceInfo& want) {
    auto& f = vk::fn();
    api_ = VK_API_VERSION_1_1;
    if (auto enum_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
            f.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"))) {
      std::uint32_t v = 0;
      if (enum_version(&v) == VK_SUCCESS && v >= VK_API_VERSION_1_3) api_ = VK_API_VERSION_1_3;
    }
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "an application that owns its Vulkan device";
    app.apiVersion = api_;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* debug_ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    const bool validate = gpuml::config().validation() != gpuml::Validation::off;
    if (validate) {
      ci.enabledLayerCount = 1;
      ci.ppEnabledLayerNames = &layer;
      ci.enabledExtensionCount = 1;
      ci.ppEnabledExtensionNames = &debug_ext;
    }
    if (f.vkCreateInstance(&ci, nullptr, &instance_) != VK_SUCCESS) throw std::runtime_error("vkCreateInstance");
    auto get = [&](const char* name) { return f.vkGetInstanceProcAddr(instance_, name); };
    if (validate) {
      VkDebugUtilsMessengerCreateInfoEXT dbg{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
      dbg.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      dbg.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
      dbg.pfnUserCallback = vk::debug_callback;  // counted with gpuml's own messages: any one fails the test
      reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(get("vkCreateDebugUtilsMessengerEXT"))(instance_, &dbg, nullptr,
                                                                                                  &messenger_);
    }
    std::uint32_t n = 0;
    auto enumerate = reinterpret_cast<PFN_vkEnumeratePhysicalDevices>(get("vkEnumeratePhysicalDevices"));
    enumerate(instance_, &n, nullptr);
    std::vector<VkPhysicalDevice> all(n);
    enumerate(instance_, &n, all.data());
    auto properties = reinterpret_cast<PFN_vkGetPhysicalDeviceProperties>(get("vkGetPhysicalDeviceProperties"));
    for (auto pd : all) {
      VkPhysicalDeviceProperties p{};
      properties(pd, &p);
      if (want.name == p.deviceName) {
        physical_ = pd;
        device_api_ = p.apiVersion;
        break;
      }
    }
    if (!physical_) throw std::runtime_error("the device under test is not in the application's instance");
    auto families_of = reinterpret_cast<PFN_vkGetPhysicalDeviceQueueFamilyProperties>(
        get("vkGetPhysicalDeviceQueueFamilyProperties"));
    families_of(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    families_of(physical_, &n, families.data());
    while (family_ < n && !(families[family_].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family_;
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = family_;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.features.shaderFloat64 = float64 = want.float64;
    features.features.shaderInt64 = int64 = want.int64;
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    std::vector<const char*> extensions;
    if (want.subgroup_size_control) {
      sgc.subgroupSizeControl = VK_TRUE;
      features.pNext = &sgc;
      subgroup_size_control = true;
      if (std::min(api_, device_api_) < VK_API_VERSION_1_3) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    }
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &features;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    di.ppEnabledExtensionNames = extensions.data();
    if (reinterpret_cast<PFN_vkCreateDevice>(get("vkCreateDevice"))(physical_, &di, nullptr, &device_) != VK_SUCCESS)
      throw std::runtime_error("vkCreateDevice");
    reinterpret_cast<PFN_vkGetDeviceQueue>(get("vkGetDeviceQueue"))(device_, family_, 0, &queue_);
  }

  ~ApplicationDevice() {
    auto& f = vk::fn();
    auto get = [&](const char* name) { return f.vkGetInstanceProcAddr(instance_, name); };
    if (device_) reinterpret_cast<PFN_vkDestroyDevice>(get("vkDestroyDevice"))(device_, nullptr);
    if (messenger_)
      reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(get("vkDestroyDebugUtilsMessengerEXT"))(instance_, messenger_,
                                                                                                   nullptr);
    reinterpret_cast<PFN_vkDestroyInstance>(get("vkDestroyInstance"))(instance_, nullptr);
  }
  ApplicationDevice(const ApplicationDevice&) = delete;
  ApplicationDevice& operator=(const ApplicationDevice&) = delete;

  vk::ExternalDevice handed_over() const {
    vk::ExternalDevice e;
    e.instance = instance_;
    e.instance_api_version = api_;
    e.physical_device = physical_;
    e.device = device_;
    e.queue = queue_;
    e.queue_family = family_;
    e.shader_float64 = float64;
    e.shader_int64 = int64;
    e.subgroup_size_control = subgroup_size_control;
    return e;
  }
  /// The application still uses its device: every gpuml submission is complete and nothing of gpuml's is lost.
  VkResult wait_idle() const {
    return reinterpret_cast<PFN_vkDeviceWaitIdle>(vk::fn().vkGetInstanceProcAddr(instance_, "vkDeviceWaitIdle"))(device_);
  }

  bool float64 = false, int64 = false, subgroup_size_control = false;

 private:
  std::uint32_t api_ = VK_API_VERSION_1_1, device_api_ = VK_API_VERSION_1_1;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
};

// gpuml on a VkInstance / VkDevice / queue the application owns: the same results, bit for bit, as on gpuml's own
// device of the same GPU (same kernels, same features); gpuml's objects are all gone when its backend is, and the
// device stays the application's (the validation layer reports any object left at the application's
// vkDestroyDevice, which fails the run).
TEST(ExternalDevice, RunsOnTheApplicationsDeviceWithTheSameResults) {
  auto own = fresh_device_backend();
  if (!own) GTEST_SKIP() << "no Vulkan device";
  const auto messages_before = vk::validation_message_count();
  {
    ApplicationDevice app(own->device_info());
    {
      const Backend external = gpuml::external_backend(app.handed_over());
      ASSERT_TRUE(external.is_vulkan());
      EXPECT_FALSE(external.device()->owned());
      EXPECT_EQ(external.device_info().name, own->device_info().name);
      const auto seed = gpuml::testing::test_seed();
      const Matrix<float> X = random_matrix<float>(2311, 9, seed + 7);
      const Matrix<float> q = random_matrix<float>(37, 9, seed + 8);
      KMeansParams p;
      p.n_clusters = 13;
      p.random_state = seed;
      KMeans<float> a(p, external), b(p, *own);
      a.fit(X);
      b.fit(X);
      EXPECT_EQ(a.labels(), b.labels());
      EXPECT_EQ(a.cluster_centers(), b.cluster_centers());
      EXPECT_EQ(a.inertia(), b.inertia());
      EXPECT_EQ(a.n_iter(), b.n_iter());
      EXPECT_EQ(a.predict(q), b.predict(q));
      gpuml::NearestNeighbors<float> na({6, "euclidean"}, external), nb({6, "euclidean"}, *own);
      na.fit(X);
      nb.fit(X);
      const auto ra = na.kneighbors(q), rb = nb.kneighbors(q);
      EXPECT_EQ(ra.indices, rb.indices);
      EXPECT_EQ(ra.distances, rb.distances);
      if (app.float64) {
        const Matrix<double> Xd = X.cast<double>();
        KMeans<double> ad(p, external), bd(p, *own);
        EXPECT_EQ(ad.fit(Xd).labels(), bd.fit(Xd).labels());
        EXPECT_EQ(ad.inertia(), bd.inertia());
      }
    }
    EXPECT_EQ(app.wait_idle(), VK_SUCCESS);
  }  // the application destroys its device and instance here
  EXPECT_EQ(vk::validation_message_count(), messages_before);
}

// Handles that do not fit together are refused with a message naming the problem, before anything is made.
TEST(ExternalDevice, RefusesIncompleteHandles) {
  auto own = fresh_device_backend();
  if (!own) GTEST_SKIP() << "no Vulkan device";
  vk::ExternalDevice none;
  EXPECT_THROW(gpuml::external_backend(none), gpuml::invalid_input);
  ApplicationDevice app(own->device_info());
  vk::ExternalDevice e = app.handed_over();
  e.queue = VK_NULL_HANDLE;
  try {
    gpuml::external_backend(e);
    ADD_FAILURE() << "a missing queue was accepted";
  } catch (const gpuml::invalid_input& error) {
    EXPECT_NE(std::string(error.what()).find("queue"), std::string::npos) << error.what();
  }
  e = app.handed_over();
  e.vulkan_memory_model = true;  // without device scope
  EXPECT_THROW(gpuml::external_backend(e), gpuml::unsupported);
  e = app.handed_over();
  e.queue_family = 1000;
  EXPECT_THROW(gpuml::external_backend(e), gpuml::invalid_input);
}

}  // namespace

namespace {

// KMeans.transform runs on the device: distances from differences, the host's to rounding, exactly 0 where a row
// is a center; awkward sizes (rows not a multiple of the workgroup, k not a power of two).
template <class T>
void transform_matches_host() {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Backend backend = *chosen;
  if (std::is_same_v<T, double> && !backend.device_info().float64) GTEST_SKIP() << "no float64 on the device";
  const auto seed = gpuml::testing::test_seed();
  Matrix<T> X = random_matrix<T>(1031, 11, seed + 9, -4.0, 6.0);
  const Matrix<T> C = random_matrix<T>(13, 11, seed + 10, -4.0, 6.0);
  X.row(77) = C.row(5);
  X.row(1030) = C.row(12);
  KMeans<T> device({}, backend), host({}, Backend::host());
  device.set_cluster_centers(C);
  host.set_cluster_centers(C);
  const Matrix<T> got = device.transform(X), expected = host.transform(X);
  EXPECT_TRUE(backend.opened()) << "transform did not use the device";
  ASSERT_EQ(got.rows(), X.rows());
  ASSERT_EQ(got.cols(), C.rows());
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = 0; j < C.rows(); ++j)
      ASSERT_NEAR(got(i, j), expected(i, j), tol * (1 + std::abs(double(expected(i, j))))) << i << "," << j;
  EXPECT_EQ(got(77, 5), T(0));
  EXPECT_EQ(got(1030, 12), T(0));
}

TEST(Backend, TransformOnDeviceFloat) { transform_matches_host<float>(); }
TEST(Backend, TransformOnDeviceDouble) { transform_matches_host<double>(); }

// A fit's device timing comes back with the fit (KMeans::step_times), one E-step per iteration; the host engine's
// is empty.
TEST(Backend, FitReturnsItsDeviceStepTimes) {
  auto chosen = fresh_device_backend();
  if (!chosen) GTEST_SKIP() << "no Vulkan device";
  const Matrix<float> X = random_matrix<float>(997, 6, gpuml::testing::test_seed() + 11);
  KMeansParams p;
  p.n_clusters = 7;
  p.max_iter = 5;
  p.tol = 0;
  p.init_centers = X.topRows(7).cast<double>();
  KMeans<float> device(p, *chosen), host(p, Backend::host());
  device.fit(X);
  host.fit(X);
  EXPECT_EQ(device.step_times().e_steps, device.n_iter());
  EXPECT_EQ(device.step_times().e_step_each_ms.size(), static_cast<std::size_t>(device.n_iter()));
  EXPECT_EQ(host.step_times().e_steps, 0);
}

}  // namespace

// The sharded engines' threads (ShardThreads): every index runs once per call, index 0 on the calling thread and the
// others on the same threads of their own call after call; a failure is rethrown (the first by index) only once every
// index has finished, and the team goes on working after it.
TEST(Parallel, ShardThreadsRunEveryIndexOnceOnKeptThreads) {
  for (const std::size_t count : {1u, 2u, 4u}) {
    gpuml::ShardThreads threads(count);
    ASSERT_EQ(threads.size(), count);
    std::vector<std::thread::id> first(count);
    for (int call = 0; call < 50; ++call) {
      std::vector<std::atomic<int>> ran(count);
      std::vector<std::thread::id> on(count);
      threads.run([&](std::size_t i) {
        ran[i].fetch_add(1);
        on[i] = std::this_thread::get_id();
      });
      for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(ran[i].load(), 1) << "index " << i << ", call " << call;
      EXPECT_EQ(on[0], std::this_thread::get_id());
      for (std::size_t i = 1; i < count; ++i) EXPECT_NE(on[i], std::this_thread::get_id());
      if (call == 0) first = on;
      EXPECT_TRUE(on == first) << "call " << call << " ran on other threads";
    }
    if (count < 2) continue;
    std::atomic<int> finished{0};
    try {
      threads.run([&](std::size_t i) {
        if (i == count - 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          finished.fetch_add(1);
          throw std::runtime_error("late");
        }
        if (i == 0) throw std::runtime_error("first");
        finished.fetch_add(1);
      });
      ADD_FAILURE() << "no failure rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "first");
      EXPECT_EQ(finished.load(), static_cast<int>(count) - 1) << "run returned before every index had finished";
    }
    std::atomic<int> after{0};
    threads.run([&](std::size_t) { after.fetch_add(1); });
    EXPECT_EQ(after.load(), static_cast<int>(count));
  }
}
