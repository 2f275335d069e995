// The configuration object: the environment read by Config::from_environment, one on/off grammar, setters, and a
// configuration set in C++ reaching the code that reads it.
#include <gpuml/gpuml.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace {

/// Sets (or, with std::nullopt, removes) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

gpuml::Config read(std::vector<std::string>* warnings = nullptr) {
  return gpuml::Config::from_environment([&](const std::string& m) {
    if (warnings) warnings->push_back(m);
  });
}

TEST(Config, OneGrammarForEverySwitch) {
  for (const char* on : {"1", "on", "ON", "true", "True", "yes"}) EXPECT_EQ(gpuml::parse_switch(on), true) << on;
  for (const char* off : {"0", "off", "OFF", "false", "no"}) EXPECT_EQ(gpuml::parse_switch(off), false) << off;
  for (const char* bad : {"", "2", "of", "strict", "enable"}) EXPECT_EQ(gpuml::parse_switch(bad), std::nullopt) << bad;
}

TEST(Config, DefaultsWithoutTheEnvironment) {
  // ScopedEnv restores its variable when destroyed: reserved up front, none is moved (and restored) early.
  const char* const names[] = {"GPUML_DEVICE", "GPUML_NUM_THREADS", "GPUML_VALIDATION", "GPUML_PIPELINE_CACHE",
                               "GPUML_TUNING", "GPUML_KMEANS_TILE", "GPUML_KNN_TILE", "GPUML_KNN_SAMPLE",
                               "GPUML_KNN_APPEND", "GPUML_KNN_COOP", "GPUML_DEVICE_MEMORY_LIMIT", "GPUML_UPLOAD",
                               "GPUML_DEVICE_CENTRING", "GPUML_DEVICE_CHECKS"};
  std::vector<ScopedEnv> cleared;
  cleared.reserve(std::size(names));
  for (const char* name : names)
    cleared.emplace_back(name, std::nullopt);
  ScopedEnv cache("GPUML_CACHE_DIR", std::nullopt), xdg("XDG_CACHE_HOME", "/tmp/xdg-gpuml-test");
  const gpuml::Config c = read();
  EXPECT_EQ(c.device(), "auto");
  EXPECT_EQ(c.num_threads(), 0);
  EXPECT_EQ(c.validation(), gpuml::Validation::off);
  EXPECT_EQ(c.cache_dir(), "/tmp/xdg-gpuml-test/gpuml");
  EXPECT_TRUE(c.pipeline_cache());
  EXPECT_TRUE(c.tuning());
  EXPECT_EQ(c.kmeans_tile(), "");
  EXPECT_EQ(c.knn_tile(), "");
  EXPECT_EQ(c.knn_sample(), 16u);
  EXPECT_TRUE(c.knn_append());
  EXPECT_TRUE(c.knn_coop());
  EXPECT_EQ(c.device_memory_limit(), 0u);
  EXPECT_EQ(c.upload(), gpuml::Upload::staged);
  EXPECT_TRUE(c.device_centring());
  EXPECT_TRUE(c.device_checks());
  EXPECT_EQ(c.device_checks_min_bytes(), std::uint64_t(32) << 20);
}

TEST(Config, EveryVariableFeedsItsKnob) {
  ScopedEnv device("GPUML_DEVICE", "integrated"), threads("GPUML_NUM_THREADS", "3"), validation("GPUML_VALIDATION", "strict"),
      cache("GPUML_CACHE_DIR", "/tmp/c"), pipelines("GPUML_PIPELINE_CACHE", "off"), tuning("GPUML_TUNING", "false"),
      kmeans("GPUML_KMEANS_TILE", "64,4,4,8,128"), knn("GPUML_KNN_TILE", "8,8,4,4,8"), sample("GPUML_KNN_SAMPLE", "0"),
      append("GPUML_KNN_APPEND", "no"), coop("GPUML_KNN_COOP", "0"), memory("GPUML_DEVICE_MEMORY_LIMIT", "3M"),
      upload("GPUML_UPLOAD", "imported"), centring("GPUML_DEVICE_CENTRING", "off"), checks("GPUML_DEVICE_CHECKS", "0");
  const gpuml::Config c = read();
  EXPECT_EQ(c.device(), "integrated");
  EXPECT_EQ(c.num_threads(), 3);
  EXPECT_EQ(c.validation(), gpuml::Validation::strict);
  EXPECT_EQ(c.cache_dir(), "/tmp/c");
  EXPECT_FALSE(c.pipeline_cache());
  EXPECT_FALSE(c.tuning());
  EXPECT_EQ(c.kmeans_tile(), "64,4,4,8,128");
  EXPECT_EQ(c.knn_tile(), "8,8,4,4,8");
  EXPECT_EQ(c.knn_sample(), 0u);
  EXPECT_FALSE(c.knn_append());
  EXPECT_FALSE(c.knn_coop());
  EXPECT_EQ(c.device_memory_limit(), 3u << 20);
  EXPECT_EQ(c.upload(), gpuml::Upload::imported);
  EXPECT_FALSE(c.device_centring());
  EXPECT_FALSE(c.device_checks());
  ScopedEnv on("GPUML_VALIDATION", "yes");
  EXPECT_EQ(read().validation(), gpuml::Validation::on);
}

TEST(Config, UnreadableValuesKeepTheDefaultWithAWarning) {
  ScopedEnv tuning("GPUML_TUNING", "maybe"), sample("GPUML_KNN_SAMPLE", "1"), validation("GPUML_VALIDATION", "loud"),
      memory("GPUML_DEVICE_MEMORY_LIMIT", "2T"), upload("GPUML_UPLOAD", "pinned");
  std::vector<std::string> warnings;
  const gpuml::Config c = read(&warnings);
  EXPECT_TRUE(c.tuning());
  EXPECT_EQ(c.knn_sample(), 16u);
  EXPECT_EQ(c.validation(), gpuml::Validation::off);
  EXPECT_EQ(c.device_memory_limit(), 0u);
  EXPECT_EQ(c.upload(), gpuml::Upload::staged);
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_NE(warnings[0].find("GPUML_VALIDATION=loud"), std::string::npos) << warnings[0];
}

TEST(Config, SettersReachTheCodeThatReadsThem) {
  const int before = gpuml::host_threads();
  {
    gpuml::ScopedConfig scoped(gpuml::config().set_num_threads(3).set_knn_coop(false).set_tuning(false));
    EXPECT_EQ(gpuml::host_threads(), 3);
    EXPECT_FALSE(gpuml::config().knn_coop());
    EXPECT_FALSE(gpuml::tuning::store_enabled());
  }
  EXPECT_EQ(gpuml::host_threads(), before) << "restored after the scope";
  EXPECT_TRUE(gpuml::tuning::store_enabled());
}

TEST(Config, ByteCounts) {
  EXPECT_EQ(gpuml::Config::parse_bytes("123"), 123u);
  EXPECT_EQ(gpuml::Config::parse_bytes("64K"), 64u << 10);
  EXPECT_EQ(gpuml::Config::parse_bytes("512m"), 512u << 20);
  EXPECT_EQ(gpuml::Config::parse_bytes("2G"), 2ull << 30);
  for (const char* bad : {"", "G", "1.5G", "12GB", "-1", "99999999999999999999", "17179869184G"})
    EXPECT_FALSE(gpuml::Config::parse_bytes(bad).has_value()) << bad;
}

TEST(Config, TheEnvironmentIsReadOnce) {
  const std::string device = gpuml::config().device();
  ScopedEnv changed("GPUML_DEVICE", device + "-changed");
  EXPECT_EQ(gpuml::config().device(), device) << "the process's configuration does not follow later changes";
}

}  // namespace
