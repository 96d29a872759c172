// The one memory planner of both backends. A backend describes how it runs a model (one step
// per layer it executes: a node, or several nodes fused into one layer) and what each layer's
// backward reads; the planner gives every value and every gradient a lifetime in the step's
// timeline and an offset in one arena, so that values whose lives never overlap share bytes,
// as a framework frees a tensor when its last user is done.
//
// Timeline of one training step with S steps: time 0 is the batch's upload; forward of step s
// is at time s + 1 (1..S); backward of step s at 2S - s (S + 1..2S), the last step first. A
// value lives from its step's forward to the last of: its consumers' forwards, the backwards of
// the consumers that read their inputs, its own step's backward if that reads its output. A
// gradient lives from the backward of its producer's last consumer (the first in backward,
// which writes it; later ones add into it) to its producer's backward, which reads it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/core/spec.hpp"

namespace tb {

// What a layer's backward reads besides its output gradient. Where a layer does not say, it
// is planned as reading everything.
struct BackwardReads {
  std::vector<bool> inputs;  // by input position; missing entries count as read
  bool output = true;
  static BackwardReads all() { return {{}, true}; }
  static BackwardReads only_inputs() { return {{}, false}; }
  static BackwardReads only_output(std::size_t inputs) { return {std::vector<bool>(inputs, false), true}; }
  static BackwardReads nothing(std::size_t inputs) { return {std::vector<bool>(inputs, false), false}; }
  bool reads_input(std::size_t position) const { return position >= inputs.size() || inputs[position]; }
};

// One layer as a backend runs it.
struct PlanStep {
  std::vector<int> nodes;   // model nodes it computes, in order; the last one's output is its output
  std::vector<int> inputs;  // nodes whose outputs it reads, in order (node 0: the model input)
  std::size_t bytes = 0;    // its output value and that value's gradient; 0: none in the arena (a loss)
  BackwardReads reads = BackwardReads::all();
  bool output_over_input = false;    // elementwise: may write its output over inputs[0]
  bool dinput_over_doutput = false;  // may write inputs[0]'s gradient over its output gradient
  // Its output can be made again in backward from what its backward keeps anyway (a batch norm
  // and ReLU from the batch norm's input and statistics): the value is then not kept between its
  // last use in forward and its first use in backward, where the network recomputes it (at the
  // same offset) before that use.
  bool recompute_output = false;
  int node() const { return nodes.back(); }
};

struct PlanOptions {
  // Every value and gradient lives for the whole step and nothing shares bytes: for tests that
  // read intermediate values and gradients after the pass that made them.
  bool keep_all = false;
  std::size_t alignment = 256;  // of every region's offset and size
};

struct Region {
  std::size_t offset = 0, bytes = 0;
  bool empty() const { return bytes == 0; }
  bool overlaps(const Region& o) const {
    return bytes && o.bytes && offset < o.offset + o.bytes && o.offset < offset + bytes;
  }
};

// Where one input's gradient goes in a step's backward: the producer's gradient itself
// (direct: the producer's last consumer, first use), else an edge region that the network adds
// into the producer's gradient after the step's backward. None for the model input.
struct InputGrad {
  bool direct = false;
  Region edge;  // when !direct
};

struct MemoryPlan {
  // One block of the arena: a value, a gradient (several, where a layer works in place), or an
  // edge, alive from `begin` to `end` inclusive, except in its hole (a recomputed value's time
  // between its forward and its backward lives), when its bytes are others'.
  struct Block {
    Region region;
    int begin = 0, end = 0;
    int hole_begin = 0, hole_end = -1;  // empty unless hole_begin <= hole_end
    std::string what;                   // "value of layer1.0.a.conv", ...
    bool alive(int t) const { return begin <= t && t <= end && !(hole_begin <= t && t <= hole_end); }
    bool meets(const Block& other) const;  // alive at some same time
  };
  std::size_t arena_bytes = 0;
  int steps = 0;                                    // S
  std::vector<Region> values, grads;                // by node; empty where the node has none in the arena
  std::vector<int> value_block, grad_block;         // by node; -1 where none
  std::vector<std::vector<InputGrad>> input_grads;  // by step, by input position
  // By step: the steps whose outputs the network recomputes just before this step's backward.
  std::vector<std::vector<int>> recompute_before;
  std::vector<Block> blocks;
  int step_of_node(int node) const;  // -1 for the input and nodes fused into a later step
  std::vector<int> node_step;        // by node

  int forward_time(int step) const { return step + 1; }
  int backward_time(int step) const { return 2 * steps - step; }
  int last_time() const { return 2 * steps; }
  // Blocks whose life (or forward life, before a hole) ends at `time`: their bytes may be reused
  // after it.
  std::vector<int> ending_at(int time) const;
  // Whether the bytes of `block` still hold what it held when its life ended, at `time`: no
  // block that overlaps it starts a life after its end (born then, or a recomputed value back
  // from its hole), for reads of values after forward and of gradients after backward in tests.
  bool intact_at(int block, int time) const;
  // Throws tb::Error naming `name`'s `what` ("model/node", "output") unless `block` (-1:
  // none) can be read at `time`: alive, or past its life with its bytes intact and not poisoned.
  void check_readable(int block, int time, bool poisoned, const std::string& name, const char* what) const;
  // Bytes alive at the busiest time: the arena can be no smaller.
  std::size_t peak_live_bytes() const;
};

// Throws tb::Error naming the node where the steps do not describe the model (a node computed
// twice, an input read before it is computed, a value never read).
MemoryPlan plan_memory(const ModelSpec& model, const std::vector<PlanStep>& steps, const PlanOptions& options);

// The invariant every plan must keep: two blocks alive at one time never share bytes, and
// every block lies inside the arena. Throws tb::Error naming both blocks otherwise.
void check_plan(const MemoryPlan& plan);

}  // namespace tb
