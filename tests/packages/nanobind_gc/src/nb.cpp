#include <nanobind/nanobind.h>

NB_MODULE(_nb, m) { m.def("answer", []() { return 42; }); }
