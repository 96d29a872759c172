// The default training step of a backend that runs synchronously on the host.
#include "engine/core/network.hpp"

#include <exception>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/init.hpp"
#include "engine/core/timer.hpp"

namespace tb {

float Network::train_step(StepTimes& times) {
  const double t0 = wall_seconds();
  const float loss = forward();
  const double t1 = wall_seconds();
  backward();
  const double t2 = wall_seconds();
  update();
  const double t3 = wall_seconds();
  times = StepTimes{.forward = t1 - t0, .backward = t2 - t1, .update = t3 - t2, .device = -1};
  return loss;
}

void Network::start_step() { started_loss_ = train_step(started_times_); }

float Network::finish_step(StepTimes& times) {
  times = started_times_;
  return started_loss_;
}

void rethrow_for_node(const ModelSpec& model, int node) {
  const Node& n = model.nodes.at(std::size_t(node));
  const std::string where = fmt::format("{}/{} ({}): ", model.name, n.name, kind_name(n.spec));
  try {
    throw;
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(where + e.what());
  } catch (const BackendError& e) {
    throw BackendError(where + e.what());
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  } catch (const CheckFailed& e) {
    throw CheckFailed(where + e.what());
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
}

void initialize_parameters(Network& network, const ModelSpec& model, const std::vector<Dims>& shapes,
                           std::uint64_t seed) {
  std::uint64_t s = seed * 1000003;
  for (std::size_t i = 1; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    const auto specs = node_params(node.spec, shapes[std::size_t(node.inputs.at(0))]);
    for (std::size_t k = 0; k < specs.size(); ++k) network.write_param(int(i), int(k), init_param(specs[k], ++s));
  }
}

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "tf32") return Precision::TF32;
  if (name == "fp16") return Precision::FP16;
  if (name == "bf16") return Precision::BF16;
  throw InputError(fmt::format("--precisions: unknown precision '{}'; use fp32, tf32, fp16 or bf16", name));
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::TF32:
      return "tf32";
    case Precision::FP16:
      return "fp16";
    case Precision::BF16:
      return "bf16";
  }
  return "?";
}

const char* layout_name(Layout l) { return l == Layout::NHWC ? "NHWC" : "NCHW"; }

std::optional<Layout> parse_layout(const std::string& name) {
  if (name == "nhwc") return Layout::NHWC;
  if (name == "nchw") return Layout::NCHW;
  if (name == "auto") return std::nullopt;
  throw InputError(fmt::format("--gpu_layout: unknown layout '{}'; use auto, nchw or nhwc", name));
}

}  // namespace tb
