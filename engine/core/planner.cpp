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
  // A block writes its bytes where a life of it starts: at its begin, and a recomputed value
  // again after its hole.
  const auto starts_between = [&](const Block& other) {
    const auto within = [&](int start) { return start > mine.end && start <= time; };
    return within(other.begin) || (other.hole_begin <= other.hole_end && within(other.hole_end + 1));
  };
  for (const Block& other : blocks)
    if (starts_between(other) && other.region.overlaps(mine.region)) return false;
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

namespace {

// plan_memory's stages, in order: which step computes each node, who consumes each output, the
// values' blocks, the gradients' blocks (last step first), then the offsets.
class Planner {
 public:
  Planner(const ModelSpec& model, const std::vector<PlanStep>& steps, const PlanOptions& options)
      : model_(model), steps_(steps), options_(options), n_(int(model.nodes.size())), S_(int(steps.size())) {
    plan_.steps = S_;
    plan_.node_step.assign(std::size_t(n_), -1);
    plan_.values.resize(std::size_t(n_));
    plan_.grads.resize(std::size_t(n_));
    plan_.value_block.assign(std::size_t(n_), -1);
    plan_.grad_block.assign(std::size_t(n_), -1);
    plan_.input_grads.resize(std::size_t(S_));
    plan_.recompute_before.resize(std::size_t(S_));
    edge_block_.resize(std::size_t(S_));
    for (int s = 0; s < S_; ++s) edge_block_[std::size_t(s)].assign(steps[s].inputs.size(), -1);
  }

  MemoryPlan run() {
    assign_steps();
    find_consumers();
    for (int s = 0; s < S_; ++s) place_value(s);
    // Gradients, last step first, so that a layer writing its input gradient over its output
    // gradient finds that block made.
    for (int s = S_ - 1; s >= 0; --s) place_gradients(s);
    assign_regions();
    return std::move(plan_);
  }

 private:
  std::string name(int node) const { return fmt::format("{}/{}", model_.name, model_.nodes[std::size_t(node)].name); }
  const std::string& node_name(int node) const { return model_.nodes[std::size_t(node)].name; }
  int step_of(int node) const { return plan_.node_step[std::size_t(node)]; }
  const std::vector<int>& consumers(int s) const { return consumers_[std::size_t(s)]; }

  // Which step computes each node, and that every input is computed before it is read.
  void assign_steps() {
    std::vector<char> absorbed(std::size_t(n_), 0);  // computed inside a fused step, never stored
    for (int s = 0; s < S_; ++s) {
      TB_CHECK(!steps_[s].nodes.empty(), "{}: plan step {} computes no node", model_.name, s);
      for (int node : steps_[s].nodes) {
        TB_CHECK(node > 0 && node < n_, "{}: plan step {} names node {}, which is not a layer", model_.name, s, node);
        TB_CHECK(step_of(node) < 0, "{}: computed by two plan steps", name(node));
        plan_.node_step[std::size_t(node)] = s;
        if (node != steps_[s].node()) absorbed[std::size_t(node)] = 1;
      }
      for (int p : steps_[s].inputs) {
        TB_CHECK(p >= 0 && p < n_, "{}: plan step {} reads node {}", model_.name, s, p);
        TB_CHECK(p == 0 || (step_of(p) >= 0 && step_of(p) < s), "{}: read by {} before it is computed", name(p),
                 name(steps_[s].node()));
        TB_CHECK(!absorbed[std::size_t(p)], "{}: fused into a later layer, but {} reads it", name(p),
                 name(steps_[s].node()));
      }
    }
    for (int node = 1; node < n_; ++node) TB_CHECK(step_of(node) >= 0, "{}: no plan step computes it", name(node));
  }

  // Consumers of each step's output, and the last of them (the first to run in backward).
  void find_consumers() {
    consumers_.assign(std::size_t(S_), {});
    for (int c = 0; c < S_; ++c)
      for (int p : steps_[c].inputs)
        if (p != 0) {
          std::vector<int>& of = consumers_[std::size_t(step_of(p))];
          if (of.empty() || of.back() != c) of.push_back(c);
        }
    for (int s = 0; s + 1 < S_; ++s)
      TB_CHECK(!consumers(s).empty(), "{}: output is never used", name(steps_[s].node()));
  }

  int add_block(std::size_t bytes, int begin, int end, std::string what) {
    MemoryPlan::Block block;
    block.region = Region{0, align_up(bytes, std::max<std::size_t>(options_.alignment, 1))};
    block.begin = begin;
    block.end = end;
    block.what = std::move(what);
    plan_.blocks.push_back(std::move(block));
    return int(plan_.blocks.size()) - 1;
  }

  // The life of step s's value: its forward uses (the last ends the forward life), and the
  // backwards that read it (a consumer's, reading it as an input, or its own, reading its output).
  struct ValueLife {
    int forward_end = 0, first_backward = 0, end = 0;
    int hole_begin = 0, hole_end = -1;  // a recomputed value's gap, empty where none
  };
  ValueLife value_life(int s) const {
    const PlanStep& step = steps_[s];
    ValueLife life{plan_.forward_time(s), plan_.last_time() + 1};
    int last_backward = -1;
    const auto read_in_backward = [&](int t) {
      life.first_backward = std::min(life.first_backward, t);
      last_backward = std::max(last_backward, t);
    };
    for (int c : consumers(s)) {
      life.forward_end = std::max(life.forward_end, plan_.forward_time(c));
      for (std::size_t j = 0; j < steps_[c].inputs.size(); ++j)
        if (steps_[c].inputs[j] == step.node() && steps_[c].reads.reads_input(j))
          read_in_backward(plan_.backward_time(c));
    }
    if (step.reads.output) read_in_backward(plan_.backward_time(s));
    life.end = std::max(life.forward_end, last_backward);
    if (consumers(s).empty() || options_.keep_all) life.end = plan_.last_time();
    // A recomputed value: alive in forward until its last forward use, then again from its
    // first backward use, recomputed there.
    if (step.recompute_output && !options_.keep_all && !consumers(s).empty() &&
        life.first_backward <= plan_.last_time() && life.forward_end + 1 <= life.first_backward - 1) {
      life.hole_begin = life.forward_end + 1;
      life.hole_end = life.first_backward - 1;
    }
    return life;
  }

  // Values, with a layer that may write over its input taking that input's block.
  void place_value(int s) {
    const PlanStep& step = steps_[s];
    if (step.bytes == 0) return;
    const ValueLife life = value_life(s);
    if (life.hole_begin <= life.hole_end)
      plan_.recompute_before[std::size_t(2 * S_ - life.first_backward)].push_back(s);
    const std::string what = fmt::format("value of {}", node_name(step.node()));
    int block = -1;
    const int p = step.inputs.empty() ? 0 : step.inputs[0];
    if (step.output_over_input && !options_.keep_all && p != 0 && !step.reads.reads_input(0) &&
        life.hole_end < life.hole_begin) {
      const int pb = plan_.value_block[std::size_t(p)];
      // p's last use is this step's forward: nothing reads it afterwards.
      if (pb >= 0 && steps_[step_of(p)].bytes == step.bytes && plan_.blocks[pb].end == plan_.forward_time(s) &&
          plan_.blocks[pb].hole_end < plan_.blocks[pb].hole_begin) {
        block = pb;
        plan_.blocks[pb].end = life.end;
        plan_.blocks[pb].what += ", then " + what;
      }
    }
    if (block < 0) {
      block = add_block(step.bytes, plan_.forward_time(s), life.end, what);
      plan_.blocks[std::size_t(block)].hole_begin = life.hole_begin;
      plan_.blocks[std::size_t(block)].hole_end = life.hole_end;
    }
    plan_.value_block[std::size_t(step.node())] = block;
  }

  // Step s's output gradient, then where each input gradient goes: its producer's gradient
  // (direct), or an edge block added into it after the step.
  void place_gradients(int s) {
    const PlanStep& step = steps_[s];
    plan_.input_grads[std::size_t(s)].resize(step.inputs.size());
    if (step.bytes > 0) {
      const std::string what = fmt::format("gradient of {}", node_name(step.node()));
      const int begin = consumers(s).empty() ? plan_.forward_time(S_ - 1)  // given after forward
                                             : plan_.backward_time(consumers(s).back());
      const int end = options_.keep_all ? plan_.last_time() : plan_.backward_time(s);
      if (plan_.grad_block[std::size_t(step.node())] < 0)
        plan_.grad_block[std::size_t(step.node())] = add_block(step.bytes, begin, end, what);
    }
    for (std::size_t j = 0; j < step.inputs.size(); ++j) {
      const int p = step.inputs[j];
      if (p == 0) continue;  // the model input: no gradient
      const int ps = step_of(p);
      TB_CHECK(steps_[ps].bytes > 0, "{}: reads {}, which keeps no value", name(step.node()), name(p));
      const bool first_use = std::find(step.inputs.begin(), step.inputs.begin() + j, p) == step.inputs.begin() + j;
      InputGrad& g = plan_.input_grads[std::size_t(s)][j];
      g.direct = consumers(ps).back() == s && first_use;
      if (!g.direct)
        edge_block_[std::size_t(s)][j] =
            add_block(steps_[ps].bytes, plan_.backward_time(s), plan_.backward_time(s),
                      fmt::format("edge gradient {} -> {}", node_name(p), node_name(step.node())));
      else if (j == 0)
        reuse_output_gradient(s, p);
    }
  }

  // In place: the input's gradient takes the output gradient's block, which dies here.
  void reuse_output_gradient(int s, int p) {
    const PlanStep& step = steps_[s];
    const int ps = step_of(p);
    if (!step.dinput_over_doutput || options_.keep_all || steps_[ps].bytes != step.bytes ||
        plan_.grad_block[std::size_t(p)] >= 0)
      return;
    const int gb = plan_.grad_block[std::size_t(step.node())];
    if (gb < 0 || plan_.blocks[gb].end != plan_.backward_time(s)) return;
    plan_.blocks[gb].end = plan_.backward_time(ps);
    plan_.blocks[gb].what += fmt::format(", then gradient of {}", node_name(p));
    plan_.grad_block[std::size_t(p)] = gb;
  }

  void assign_regions() {
    plan_.arena_bytes = assign_offsets(plan_.blocks);
    for (int node = 0; node < n_; ++node) {
      if (const int b = plan_.value_block[std::size_t(node)]; b >= 0)
        plan_.values[std::size_t(node)] = plan_.blocks[std::size_t(b)].region;
      if (const int b = plan_.grad_block[std::size_t(node)]; b >= 0)
        plan_.grads[std::size_t(node)] = plan_.blocks[std::size_t(b)].region;
    }
    for (int s = 0; s < S_; ++s)
      for (std::size_t j = 0; j < steps_[s].inputs.size(); ++j)
        if (const int e = edge_block_[std::size_t(s)][j]; e >= 0)
          plan_.input_grads[std::size_t(s)][j].edge = plan_.blocks[std::size_t(e)].region;
  }

  const ModelSpec& model_;
  const std::vector<PlanStep>& steps_;
  const PlanOptions& options_;
  const int n_, S_;  // nodes, steps
  MemoryPlan plan_;
  std::vector<std::vector<int>> consumers_;   // by step
  std::vector<std::vector<int>> edge_block_;  // by step and input: its edge gradient's block, or -1
};

}  // namespace

MemoryPlan plan_memory(const ModelSpec& model, const std::vector<PlanStep>& steps, const PlanOptions& options) {
  return Planner(model, steps, options).run();
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
