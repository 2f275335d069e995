# cmake -DINPUT=x.spv -DOUTPUT=x.hpp -DSYMBOL=name -P EmbedSpirv.cmake
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR words "${hex_len} / 8")
# SPIR-V is little-endian 32-bit words: reverse each 4-byte group into one 0x... literal.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])" "0x\\4\\3\\2\\1u," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f]+u,){8})" "\\1\n" body "${body}")
file(WRITE ${OUTPUT} "// Generated from ${SYMBOL}: do not edit.\n#pragma once\n#include <cstdint>\n\nnamespace gpuml::shaders {\ninline constexpr std::uint32_t ${SYMBOL}[${words}] = {\n${body}\n};\n}  // namespace gpuml::shaders\n")
