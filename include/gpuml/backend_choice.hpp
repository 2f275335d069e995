// Choosing a backend, the functions that name no Vulkan type: select_backend, default_backend,
// set_default_backend, describe (defined in select.hpp, which documents them). In the compiled mode (core/compiled.hpp)
// they are declared here and defined in the library, so estimators' headers need not read select.hpp and Vulkan.
#pragma once

#include <gpuml/core/backend.hpp>
#include <gpuml/core/compiled.hpp>

#if !defined(GPUML_COMPILED)
#include <gpuml/select.hpp>
#else
#include <string>
#include <string_view>

namespace gpuml {

Backend select_backend(std::string_view choice);
Backend default_backend();
void set_default_backend(Backend backend);
std::string describe(const Backend& backend);

}  // namespace gpuml
#endif
