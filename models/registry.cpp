// The registered workloads (models.hpp): each model file adds a maker at start-up; the list is
// built once, on first use, in the files' order.
#include "models/models.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.hpp"

namespace tb::models {
namespace {

struct Maker {
  int order;
  std::vector<Workload> (*make)();
};

// A function-local static: the model files' registrations run during static initialisation, in
// an order across files that C++ leaves open.
std::vector<Maker>& makers() {
  static std::vector<Maker> all;
  return all;
}

}  // namespace

RegisterWorkloads::RegisterWorkloads(int order, std::vector<Workload> (*make)()) {
  makers().push_back(Maker{order, make});
}

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = [] {
    std::vector<Maker> sorted = makers();
    std::stable_sort(sorted.begin(), sorted.end(), [](const Maker& a, const Maker& b) { return a.order < b.order; });
    std::vector<Workload> out;
    std::set<std::pair<std::string, std::string>> seen;
    for (const Maker& m : sorted)
      for (Workload& w : m.make()) {
        TB_CHECK(seen.insert({w.model, w.dataset}).second, "workload {}/{} is registered twice", w.model, w.dataset);
        TB_CHECK(w.spec.name == w.model, "workload {}/{} builds a model named '{}'", w.model, w.dataset, w.spec.name);
        out.push_back(std::move(w));
      }
    return out;
  }();
  return all;
}

const Workload& workload(const std::string& model, const std::string& dataset) {
  std::vector<std::string> names;
  for (const Workload& w : workloads()) {
    if (w.model == model && w.dataset == dataset) return w;
    names.push_back(w.model + "/" + w.dataset);
  }
  throw InputError(
      fmt::format("no workload {}/{}; the registered ones are {}", model, dataset, fmt::join(names, ", ")));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const Workload& w : workloads())
    if (std::find(names.begin(), names.end(), w.model) == names.end()) names.push_back(w.model);
  return names;
}

OptimizerConfig Workload::optimizer_for(i64 batch_size) const {
  OptimizerConfig c = optimizer;
  if (lr_reference_batch > 0) c.lr = optimizer.lr * double(batch_size) / double(lr_reference_batch);
  return c;
}

}  // namespace tb::models
