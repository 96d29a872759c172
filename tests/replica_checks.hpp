// What the data-parallel tests (test_parallel.cpp, test_mpi.cpp) share: one network on the
// whole batch starts from a replica's weights, and every parameter is compared after training.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/network.hpp"
#include "engine/core/spec.hpp"

namespace tb::testing_support {

// f(node, index, "node.parameter") for every canonical parameter of the model.
inline void for_each_param(const ModelSpec& spec, i64 batch,
                           const std::function<void(int, int, const std::string&)>& f) {
  const auto shapes = infer_shapes(spec, batch);
  for (std::size_t i = 1; i < spec.nodes.size(); ++i) {
    const auto params = node_params(spec.nodes[i].spec, shapes[spec.nodes[i].inputs[0]]);
    for (std::size_t k = 0; k < params.size(); ++k) f(int(i), int(k), spec.nodes[i].name + "." + params[k].name);
  }
}

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    diff += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
    norm += double(b[k]) * b[k];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline void copy_params(const ModelSpec& spec, i64 batch, const Network& from, Network& to) {
  for_each_param(spec, batch,
                 [&](int node, int k, const std::string&) { to.write_param(node, k, from.read_param(node, k)); });
}

// Every parameter of `replica` within `tol` (relative L2) of the whole-batch network's.
inline void expect_params_match(const ModelSpec& spec, i64 batch, const Network& replica, const Network& whole,
                                double tol, const std::string& who) {
  for_each_param(spec, batch, [&](int node, int k, const std::string& name) {
    EXPECT_LT(relative_difference(replica.read_param(node, k), whole.read_param(node, k)), tol) << who << " " << name;
  });
}

}  // namespace tb::testing_support
