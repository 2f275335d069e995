// gpuml's exact sums (algorithms::SumFrame in C++): a term v becomes round(v * 2^e) in int64, ties to even, with one
// exponent e per kind of sum for the whole fit, so sums over any cut of the rows are the same integers. `scale` is
// 2^e (the product is exact). The including shader enables GL_EXT_shader_explicit_arithmetic_types_int64.
#ifndef GPUML_EXACT_SUM_GLSL
#define GPUML_EXACT_SUM_GLSL

scalar exact_scale(int exponent) { return ldexp(scalar(1), exponent); }

int64_t fixed_point(scalar v, scalar scale) { return int64_t(roundEven(v * scale)); }

#endif
