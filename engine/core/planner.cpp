// Lifetimes and arena offsets for the values and gradients of one training step.
#include "engine/core/planner.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb {

namespace {

std::size_t align_up(std::size_t n, std::size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Offsets by lifetime: the largest blocks first, each at the lowest offset where it overlaps no
// block already placed whose life meets its own (the greedy-by-size assignment of static
// memory planners; within a few percent of the live peak on these graphs).
std::size_t assign_offsets(std::vector<MemoryPlan::Block>& blocks) {
  std::vector<int> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (blocks[a].region.bytes != blocks[b].region.bytes) return blocks[a].region.bytes > blocks[b].region.bytes;
    return blocks[a].begin < blocks[b].begin;
  });
  std::vector<int> placed;
  std::size_t arena = 0;
  std::vector<const Region*> busy;
  for (int i : order) {
    MemoryPlan::Block& block = blocks[i];
    busy.clear();
    for (int j : placed)
      if (blocks[j].meets(block)) busy.push_back(&blocks[j].region);
    std::sort(busy.begin(), busy.end(), [](const Region* a, const Region* b) { return a->offset < b->offset; });
    std::size_t offset = 0;
    for (const Region* r : busy) {
      if (r->offset >= offset + block.region.bytes) break;  // the gap before r fits
      offset = std::max(offset, r->offset + r->bytes);
    }
    block.region.offset = offset;
    arena = std::max(arena, offset + block.region.bytes);
    placed.push_back(i);
  }
  return arena;
}

}  // namespace

bool MemoryPlan::Block::meets(const Block& other) const {
  // Each block is at most two intervals: [begin, hole_begin - 1] and [hole_end + 1, end]. A
  // fixed array: offsets are assigned by testing every pair of blocks.
  struct Lives {
    int count;
    std::pair<int, int> span[2];
  };
  const auto lives = [](const Block& b) {
    if (b.hole_begin > b.hole_end) return Lives{1, {{b.begin, b.end}, {}}};
    return Lives{2, {{b.begin, b.hole_begin - 1}, {b.hole_end + 1, b.end}}};
  };
  const Lives mine = lives(*this), theirs = lives(other);
  for (int i = 0; i < mine.count; ++i)
    for (int j = 0; j < theirs.count; ++j)
      if (mine.span[i].first <= theirs.span[j].second && theirs.span[j].first <= mine.span[i].second) return true;
  return false;
}

int MemoryPlan::step_of_node(int node) const { return node_step.at(std::size_t(node)); }

std::vector<int> MemoryPlan::ending_at(int time) const {
  std::vector<int> out;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const Block& k = blocks[b];
    if (k.end == time || (k.hole_begin <= k.hole_end && k.hole_begin - 1 == time)) out.push_back(int(b));
  }
  return out;
}

bool MemoryPlan::intact_at(int block, int time) const {
  const Block& mine = blocks.at(std::size_t(block));
  if (mine.hole_begin <= time && time <= mine.hole_end) return false;  // lent to others now
  for (const Block& other : blocks)
    if (other.begin > mine.end && other.begin <= time && other.region.overlaps(mine.region)) return false;
  return true;
}

void MemoryPlan::check_readable(int block, int time, bool poisoned, const std::string& name, const char* what) const {
  if (block < 0 || blocks.at(std::size_t(block)).end >= time) return;
  TB_CHECK(!poisoned && intact_at(block, time),
           "{}: its {} shares bytes with others after its last use in the step; build the network with keep_values "
           "to read it",
           name, what);
}

std::size_t MemoryPlan::peak_live_bytes() const {
  std::size_t peak = 0;
  for (int t = 0; t <= last_time(); ++t) {
    std::size_t live = 0;
    for (const Block& b : blocks)
      if (b.alive(t)) live += b.region.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

MemoryPlan plan_memory(const ModelSpec& model, const std::vector<PlanStep>& steps, const PlanOptions& options) {
  const int n = int(model.nodes.size());
  const int S = int(steps.size());
  MemoryPlan plan;
  plan.steps = S;
  plan.node_step.assign(std::size_t(n), -1);
  plan.values.resize(std::size_t(n));
  plan.grads.resize(std::size_t(n));
  plan.value_block.assign(std::size_t(n), -1);
  plan.grad_block.assign(std::size_t(n), -1);
  plan.input_grads.resize(std::size_t(S));
  plan.recompute_before.resize(std::size_t(S));
  const auto name = [&](int node) { return fmt::format("{}/{}", model.name, model.nodes[std::size_t(node)].name); };

  // Which step computes each node, and that every input is computed before it is read.
  std::vector<char> absorbed(std::size_t(n), 0);  // computed inside a fused step, never stored
  for (int s = 0; s < S; ++s) {
    TB_CHECK(!steps[s].nodes.empty(), "{}: plan step {} computes no node", model.name, s);
    for (int node : steps[s].nodes) {
      TB_CHECK(node > 0 && node < n, "{}: plan step {} names node {}, which is not a layer", model.name, s, node);
      TB_CHECK(plan.node_step[std::size_t(node)] < 0, "{}: computed by two plan steps", name(node));
      plan.node_step[std::size_t(node)] = s;
      if (node != steps[s].node()) absorbed[std::size_t(node)] = 1;
    }
    for (int p : steps[s].inputs) {
      TB_CHECK(p >= 0 && p < n, "{}: plan step {} reads node {}", model.name, s, p);
      TB_CHECK(p == 0 || (plan.node_step[std::size_t(p)] >= 0 && plan.node_step[std::size_t(p)] < s),
               "{}: read by {} before it is computed", name(p), name(steps[s].node()));
      TB_CHECK(!absorbed[std::size_t(p)], "{}: fused into a later layer, but {} reads it", name(p),
               name(steps[s].node()));
    }
  }
  for (int node = 1; node < n; ++node)
    TB_CHECK(plan.node_step[std::size_t(node)] >= 0, "{}: no plan step computes it", name(node));

  // Consumers of each step's output, and the last of them (the first to run in backward).
  auto consumers = std::vector<std::vector<int>>(std::size_t(S));
  for (int c = 0; c < S; ++c)
    for (int p : steps[c].inputs)
      if (p != 0) {
        const int ps = plan.node_step[std::size_t(p)];
        if (consumers[std::size_t(ps)].empty() || consumers[std::size_t(ps)].back() != c)
          consumers[std::size_t(ps)].push_back(c);
      }
  for (int s = 0; s + 1 < S; ++s)
    TB_CHECK(!consumers[std::size_t(s)].empty(), "{}: output is never used", name(steps[s].node()));

  const std::size_t align = std::max<std::size_t>(options.alignment, 1);
  auto add_block = [&](std::size_t bytes, int begin, int end, std::string what) {
    MemoryPlan::Block block;
    block.region = Region{0, align_up(bytes, align)};
    block.begin = begin;
    block.end = end;
    block.what = std::move(what);
    plan.blocks.push_back(std::move(block));
    return int(plan.blocks.size()) - 1;
  };

  // Values, with a layer that may write over its input taking that input's block.
  for (int s = 0; s < S; ++s) {
    const PlanStep& step = steps[s];
    if (step.bytes == 0) continue;
    // Its uses: the consumers' forwards (the last ends the forward life), and the backwards that
    // read it (a consumer's, reading it as an input, or its own, reading its output).
    int forward_end = plan.forward_time(s), first_backward = plan.last_time() + 1, last_backward = -1;
    const auto read_in_backward = [&](int t) {
      first_backward = std::min(first_backward, t);
      last_backward = std::max(last_backward, t);
    };
    for (int c : consumers[std::size_t(s)]) {
      forward_end = std::max(forward_end, plan.forward_time(c));
      for (std::size_t j = 0; j < steps[c].inputs.size(); ++j)
        if (steps[c].inputs[j] == step.node() && steps[c].reads.reads_input(j)) read_in_backward(plan.backward_time(c));
    }
    if (step.reads.output) read_in_backward(plan.backward_time(s));
    int end = std::max(forward_end, last_backward);
    if (consumers[std::size_t(s)].empty() || options.keep_all) end = plan.last_time();
    // A recomputed value: alive in forward until its last forward use, then again from its
    // first backward use, recomputed there.
    int hole_begin = 0, hole_end = -1;
    if (step.recompute_output && !options.keep_all && !consumers[std::size_t(s)].empty() &&
        first_backward <= plan.last_time() && forward_end + 1 <= first_backward - 1) {
      hole_begin = forward_end + 1;
      hole_end = first_backward - 1;
      plan.recompute_before[std::size_t(2 * S - first_backward)].push_back(s);
    }
    const std::string what = fmt::format("value of {}", model.nodes[std::size_t(step.node())].name);
    int block = -1;
    const int p = step.inputs.empty() ? 0 : step.inputs[0];
    if (step.output_over_input && !options.keep_all && p != 0 && !step.reads.reads_input(0) && hole_end < hole_begin) {
      const int pb = plan.value_block[std::size_t(p)];
      const int ps = plan.node_step[std::size_t(p)];
      // p's last use is this step's forward: nothing reads it afterwards.
      if (pb >= 0 && steps[ps].bytes == step.bytes && plan.blocks[pb].end == plan.forward_time(s) &&
          plan.blocks[pb].hole_end < plan.blocks[pb].hole_begin) {
        block = pb;
        plan.blocks[pb].end = end;
        plan.blocks[pb].what += ", then " + what;
      }
    }
    if (block < 0) {
      block = add_block(step.bytes, plan.forward_time(s), end, what);
      plan.blocks[std::size_t(block)].hole_begin = hole_begin;
      plan.blocks[std::size_t(block)].hole_end = hole_end;
    }
    plan.value_block[std::size_t(step.node())] = block;
  }

  auto edge_block = std::vector<std::vector<int>>(std::size_t(S));
  for (int s = 0; s < S; ++s) edge_block[std::size_t(s)].assign(steps[s].inputs.size(), -1);
  // Gradients, last step first, so that a layer writing its input gradient over its output
  // gradient finds that block made.
  for (int s = S - 1; s >= 0; --s) {
    const PlanStep& step = steps[s];
    plan.input_grads[std::size_t(s)].resize(step.inputs.size());
    if (step.bytes > 0) {
      const std::string what = fmt::format("gradient of {}", model.nodes[std::size_t(step.node())].name);
      const int begin = consumers[std::size_t(s)].empty() ? plan.forward_time(S - 1)  // given after forward
                                                          : plan.backward_time(consumers[std::size_t(s)].back());
      const int end = options.keep_all ? plan.last_time() : plan.backward_time(s);
      if (plan.grad_block[std::size_t(step.node())] < 0)
        plan.grad_block[std::size_t(step.node())] = add_block(step.bytes, begin, end, what);
    }
    for (std::size_t j = 0; j < step.inputs.size(); ++j) {
      const int p = step.inputs[j];
      if (p == 0) continue;  // the model input: no gradient
      const int ps = plan.node_step[std::size_t(p)];
      TB_CHECK(steps[ps].bytes > 0, "{}: reads {}, which keeps no value", name(step.node()), name(p));
      const bool first_use = std::find(step.inputs.begin(), step.inputs.begin() + j, p) == step.inputs.begin() + j;
      InputGrad& g = plan.input_grads[std::size_t(s)][j];
      g.direct = consumers[std::size_t(ps)].back() == s && first_use;
      if (!g.direct) {
        edge_block[std::size_t(s)][j] =
            add_block(steps[ps].bytes, plan.backward_time(s), plan.backward_time(s),
                      fmt::format("edge gradient {} -> {}", model.nodes[std::size_t(p)].name,
                                  model.nodes[std::size_t(step.node())].name));
        continue;
      }
      // In place: the input's gradient takes the output gradient's block, which dies here.
      if (j == 0 && step.dinput_over_doutput && !options.keep_all && steps[ps].bytes == step.bytes &&
          plan.grad_block[std::size_t(p)] < 0) {
        const int gb = plan.grad_block[std::size_t(step.node())];
        if (gb >= 0 && plan.blocks[gb].end == plan.backward_time(s)) {
          plan.blocks[gb].end = plan.backward_time(ps);
          plan.blocks[gb].what += fmt::format(", then gradient of {}", model.nodes[std::size_t(p)].name);
          plan.grad_block[std::size_t(p)] = gb;
        }
      }
    }
  }

  plan.arena_bytes = assign_offsets(plan.blocks);
  for (int node = 0; node < n; ++node) {
    if (plan.value_block[std::size_t(node)] >= 0)
      plan.values[std::size_t(node)] = plan.blocks[std::size_t(plan.value_block[std::size_t(node)])].region;
    if (plan.grad_block[std::size_t(node)] >= 0)
      plan.grads[std::size_t(node)] = plan.blocks[std::size_t(plan.grad_block[std::size_t(node)])].region;
  }
  for (int s = 0; s < S; ++s)
    for (std::size_t j = 0; j < steps[s].inputs.size(); ++j)
      if (const int e = edge_block[std::size_t(s)][j]; e >= 0)
        plan.input_grads[std::size_t(s)][j].edge = plan.blocks[std::size_t(e)].region;
  return plan;
}

void check_plan(const MemoryPlan& plan) {
  const auto& blocks = plan.blocks;
  for (std::size_t a = 0; a < blocks.size(); ++a) {
    TB_CHECK(blocks[a].region.offset + blocks[a].region.bytes <= plan.arena_bytes,
             "{} ends at byte {}, past the arena's {}", blocks[a].what,
             blocks[a].region.offset + blocks[a].region.bytes, plan.arena_bytes);
    TB_CHECK(blocks[a].begin <= blocks[a].end, "{} ends (time {}) before it begins (time {})", blocks[a].what,
             blocks[a].end, blocks[a].begin);
    for (std::size_t b = a + 1; b < blocks.size(); ++b) {
      const bool meet = blocks[a].meets(blocks[b]);
      TB_CHECK(!(meet && blocks[a].region.overlaps(blocks[b].region)),
               "{} (times {}-{}, bytes {}+{}) and {} (times {}-{}, bytes {}+{}) are alive at once and share bytes",
               blocks[a].what, blocks[a].begin, blocks[a].end, blocks[a].region.offset, blocks[a].region.bytes,
               blocks[b].what, blocks[b].begin, blocks[b].end, blocks[b].region.offset, blocks[b].region.bytes);
    }
  }
}

}  // namespace tb
