// The memory planner (engine/core/planner.hpp) on hand-made graphs (lifetimes, in-place layers,
// edges, recomputed values), its invariant over every workload on both backends' plans, the
// plans against the networks that use them, and the memory targets read off the plans.
#include <gtest/gtest.h>
#include <omp.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/backends.hpp"
#include "engine/core/error.hpp"
#include "engine/core/planner.hpp"
#include "engine/cpu/network.hpp"
#include "engine/cuda/plan.hpp"
#include "models/models.hpp"

namespace tb {
namespace {

constexpr std::size_t kBytes = 1024;  // every value of the hand-made graphs

// input -> a -> b -> c (-> loss), one step per node, reading what `reads` says.
struct Chain {
  ModelSpec model;
  std::vector<PlanStep> steps;
};

Chain chain(int layers, bool loss) {
  Chain c;
  c.model.name = "chain";
  int x = c.model.add("input", InputSpec{{4}}, {});
  for (int i = 0; i < layers; ++i) x = c.model.add(fmt::format("l{}", i), ReLUSpec{}, {x});
  if (loss) x = c.model.add("loss", MSESpec{}, {x});
  for (int node = 1; node < int(c.model.nodes.size()); ++node)
    c.steps.push_back(PlanStep{.nodes = {node},
                               .inputs = c.model.nodes[std::size_t(node)].inputs,
                               .bytes = loss && node == x ? 0 : kBytes,
                               .reads = BackwardReads::nothing(1)});
  return c;
}

// input -> a -> b, sum = a + b (a read by two consumers), then double = sum + sum where asked;
// one step per node, each backward reading nothing.
Chain fork(bool doubled) {
  Chain c;
  c.model.name = "fork";
  const int x = c.model.add("input", InputSpec{{4}}, {});
  const int a = c.model.add("a", ReLUSpec{}, {x});
  const int b = c.model.add("b", ReLUSpec{}, {a});
  const int s = c.model.add("sum", AddSpec{}, {a, b});
  if (doubled) c.model.add("double", AddSpec{}, {s, s});
  for (int node = 1; node < int(c.model.nodes.size()); ++node) {
    const std::vector<int>& inputs = c.model.nodes[std::size_t(node)].inputs;
    c.steps.push_back(
        PlanStep{.nodes = {node}, .inputs = inputs, .bytes = kBytes, .reads = BackwardReads::nothing(inputs.size())});
  }
  return c;
}

// `c` with the output of its step `step` recomputed before that step's own backward, which reads
// only that output (as a batch norm and ReLU's is on the GPU).
Chain with_recomputed(Chain c, std::size_t step) {
  c.steps[step].recompute_output = true;
  c.steps[step].reads = BackwardReads::only_output(1);
  return c;
}

const MemoryPlan::Block& value_block(const MemoryPlan& p, int node) {
  return p.blocks.at(std::size_t(p.value_block.at(std::size_t(node))));
}

TEST(Planner, ValueLivesUntilItsLastForwardUseWhenBackwardReadsNothing) {
  Chain c = chain(3, true);  // steps: l0, l1, l2, loss; S = 4
  const MemoryPlan p = plan_memory(c.model, c.steps, {.alignment = 256});
  check_plan(p);
  EXPECT_EQ(value_block(p, 1).begin, p.forward_time(0));
  EXPECT_EQ(value_block(p, 1).end, p.forward_time(1)) << "read by l1's forward only";
  // At most two values, or two gradients, live at any time.
  EXPECT_EQ(p.arena_bytes, 2 * kBytes);
  EXPECT_LT(p.arena_bytes, p.blocks.size() * kBytes);
}

TEST(Planner, BackwardReadsKeepAValueUntilThatBackward) {
  Chain c = chain(3, true);
  c.steps[1].reads = BackwardReads::only_inputs();  // l1's backward reads l0's output
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_EQ(value_block(p, 1).end, p.backward_time(1));
  c.steps[1].reads = BackwardReads::only_output(1);  // l1's backward reads its own output
  const MemoryPlan q = plan_memory(c.model, c.steps, {});
  EXPECT_EQ(value_block(q, 2).end, q.backward_time(1));
  EXPECT_EQ(value_block(q, 1).end, q.forward_time(1));
}

TEST(Planner, GradientLivesFromItsConsumersBackwardToItsProducers) {
  Chain c = chain(3, true);
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  const auto& g = p.blocks.at(std::size_t(p.grad_block[2]));  // gradient of l1's output
  EXPECT_EQ(g.begin, p.backward_time(2)) << "written by l2's backward";
  EXPECT_EQ(g.end, p.backward_time(1)) << "read by l1's backward";
  EXPECT_LT(p.grad_block[0], 0) << "the model input has no gradient";
  EXPECT_LT(p.value_block[4], 0) << "the loss keeps nothing in the arena";
}

TEST(Planner, ElementwiseLayersWorkInPlaceWhereNothingElseReads) {
  Chain c = chain(3, true);
  for (PlanStep& s : c.steps) {
    s.output_over_input = s.dinput_over_doutput = true;
    s.reads = BackwardReads::only_output(1);
  }
  c.steps[0].output_over_input = false;  // l0 reads the model input, which is not in the arena
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  // l1 reads l0's output only in its forward... but l0's backward reads its own output, so l1
  // may not write over it; nor l2 over l1's. Without those reads it may:
  for (PlanStep& s : c.steps) s.reads = BackwardReads::nothing(1);
  c.steps[0].output_over_input = false;
  const MemoryPlan q = plan_memory(c.model, c.steps, {});
  check_plan(q);
  EXPECT_EQ(q.value_block[1], q.value_block[2]);
  EXPECT_EQ(q.value_block[2], q.value_block[3]);
  EXPECT_EQ(q.grad_block[3], q.grad_block[2]) << "l2 writes l1's gradient over its own";
  EXPECT_EQ(q.arena_bytes, kBytes) << "one value block, then (after forward) one gradient block";
  EXPECT_NE(p.value_block[1], p.value_block[2]);
}

TEST(Planner, KeepAllSharesNothing) {
  Chain c = chain(3, true);
  const MemoryPlan p = plan_memory(c.model, c.steps, {.keep_all = true});
  check_plan(p);
  std::size_t sum = 0;
  for (const auto& b : p.blocks) sum += b.region.bytes;
  EXPECT_EQ(p.arena_bytes, sum);
}

TEST(Planner, SecondConsumerWritesAnEdgeThatTheFirstAddsInto) {
  const Chain c = fork(false);
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_TRUE(p.input_grads[2][0].direct) << "sum is a's last consumer: it writes a's gradient";
  EXPECT_FALSE(p.input_grads[1][0].direct) << "b's gradient for a goes to an edge, added after b's backward";
  EXPECT_EQ(p.input_grads[1][0].edge.bytes, kBytes);
}

TEST(Planner, RecomputedValueLendsItsBytesBetweenForwardAndBackward) {
  const Chain c = with_recomputed(chain(4, true), 1);  // l0 .. l3, loss
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  const auto& v = value_block(p, 2);
  EXPECT_EQ(v.hole_begin, p.forward_time(2) + 1) << "l2's forward is its last use in forward";
  EXPECT_EQ(v.hole_end, p.backward_time(1) - 1) << "l1's own backward is its first use in backward";
  ASSERT_EQ(p.recompute_before[1].size(), 1u);
  EXPECT_EQ(p.recompute_before[1][0], 1);
  EXPECT_FALSE(v.alive(p.forward_time(3)));
  EXPECT_FALSE(p.intact_at(p.value_block[2], p.forward_time(3)));
}

// A value read after its last use: allowed while its bytes are intact and not poisoned, refused
// once another block has them, or with poison_dead; a node without a block (-1) always readable.
TEST(Planner, ReadingAValueAfterItsLifeNeedsItsBytesIntact) {
  Chain c = chain(6, true);  // l0 .. l5, loss: each value is dead once the next layer ran
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  const auto refusal = [&](int block, int time, bool poisoned) -> std::string {
    try {
      p.check_readable(block, time, poisoned, "chain/l", "output");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(-1, p.last_time(), true), "");
  // Every value at every time: readable exactly while alive, or dead with its bytes intact and
  // not poisoned; the refusal names the node and the way out.
  int dead_intact = 0, reused = 0;
  for (int node = 1; node < int(c.model.nodes.size()) - 1; ++node) {
    const int block = p.value_block[std::size_t(node)];
    for (int t = 0; t <= p.last_time(); ++t) {
      const bool alive = t <= p.blocks[std::size_t(block)].end;
      const bool intact = alive || p.intact_at(block, t);
      dead_intact += !alive && intact;
      reused += !intact;
      EXPECT_EQ(refusal(block, t, false).empty(), intact) << "node " << node << " at " << t;
      EXPECT_EQ(refusal(block, t, true).empty(), alive) << "node " << node << " at " << t << ", poisoned";
      if (!intact) {
        EXPECT_NE(refusal(block, t, false).find("chain/l: its output shares bytes"), std::string::npos);
      }
      if (!alive) {
        EXPECT_NE(refusal(block, t, true).find("keep_values"), std::string::npos);
      }
    }
  }
  EXPECT_GT(dead_intact, 0) << "some dead values keep their bytes for a while";
  EXPECT_GT(reused, 0) << "a chain's values reuse each other's bytes";
}

// A value read after its life is intact only while no block that overlaps its bytes starts a
// life after its end: a recomputed value, which lent its bytes in its hole, takes them back at
// its first backward use and writes over whatever lived there.
TEST(Planner, ARecomputedValueTakingBackItsBytesEndsTheIntactnessOfWhatLivedInItsHole) {
  const Chain c = with_recomputed(chain(4, true), 1);  // l0 .. l3, loss
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  const int r = p.value_block[2];
  const MemoryPlan::Block& recomputed = p.blocks[std::size_t(r)];
  ASSERT_LE(recomputed.hole_begin, recomputed.hole_end);
  int lodgers = 0;
  for (int b = 0; b < int(p.blocks.size()); ++b) {
    const MemoryPlan::Block& m = p.blocks[std::size_t(b)];
    if (b == r || !m.region.overlaps(recomputed.region) || m.end >= recomputed.hole_end + 1) continue;
    ++lodgers;
    for (int t = recomputed.hole_end + 1; t <= p.last_time(); ++t) {
      EXPECT_FALSE(p.intact_at(b, t)) << m.what << " at " << t << ": " << recomputed.what << " took its bytes back";
      EXPECT_THROW(p.check_readable(b, t, false, "chain/l", "gradient"), Error);
    }
  }
  EXPECT_GT(lodgers, 0) << "some block lives in the recomputed value's bytes during its hole";
}

// Every region's offset and size are multiples of the alignment: 1000-byte values take 1024
// bytes at 256, and a chain still needs two of them.
TEST(Planner, EveryRegionIsAlignedInOffsetAndSize) {
  Chain c = chain(3, true);
  for (PlanStep& s : c.steps)
    if (s.bytes) s.bytes = 1000;
  const MemoryPlan p = plan_memory(c.model, c.steps, {.alignment = 256});
  check_plan(p);
  for (const MemoryPlan::Block& b : p.blocks) {
    EXPECT_EQ(b.region.bytes, 1024u) << b.what;
    EXPECT_EQ(b.region.offset % 256, 0u) << b.what;
  }
  EXPECT_EQ(p.arena_bytes, 2048u);
}

// Offsets go to the largest blocks first. l0 (times 1-2), l1 (2-3), l2 twice as large (3-4), l3
// (4-5): l2 first at 0 leaves l0 at 0 and l1, l3 beside it, 3 KiB, the live peak; the small
// ones first would put l0 and l3 at 0, l1 at 1 KiB, and l2 (meeting both) at 2 KiB, 4 KiB.
TEST(Planner, LargestBlocksFirstKeepTheArenaAtTheLivePeak) {
  Chain c = chain(4, true);  // l0 .. l3, loss; S = 5
  c.steps[2].bytes = 2 * kBytes;
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_EQ(p.peak_live_bytes(), 3 * kBytes) << "l1 and l2 at time 3, the gradients of l2 and l1 at 8";
  EXPECT_EQ(p.arena_bytes, 3 * kBytes);
}

// Two blocks meet where both are alive at one time: a recomputed value (2-9, hole 4-8) meets
// what lives at 2-3 or at 9, either way round, and nothing that lives only in its hole.
TEST(Planner, ABlockMeetsAnotherOnlyWhereBothAreAliveOutsideTheirHoles) {
  const auto block = [](int begin, int end, int hole_begin = 0, int hole_end = -1) {
    MemoryPlan::Block b;
    b.begin = begin, b.end = end, b.hole_begin = hole_begin, b.hole_end = hole_end;
    return b;
  };
  const MemoryPlan::Block recomputed = block(2, 9, 4, 8);
  for (const auto& [other, meets] : std::vector<std::pair<MemoryPlan::Block, bool>>{{block(1, 2), true},
                                                                                    {block(3, 3), true},
                                                                                    {block(4, 4), false},
                                                                                    {block(4, 8), false},
                                                                                    {block(8, 8), false},
                                                                                    {block(9, 10), true},
                                                                                    {block(5, 7, 6, 6), false},
                                                                                    {block(3, 9, 4, 8), true}}) {
    EXPECT_EQ(recomputed.meets(other), meets) << other.begin << "-" << other.end;
    EXPECT_EQ(other.meets(recomputed), meets) << other.begin << "-" << other.end;
  }
}

// ending_at gives a recomputed value's block at its last forward use, when its bytes are lent,
// and again at its last backward use; not in its hole.
TEST(Planner, ARecomputedValueEndsAtItsLastForwardUseAndAtItsEnd) {
  const Chain c = with_recomputed(chain(4, true), 1);  // l0 .. l3, loss; S = 5
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  const int v = p.value_block[2];
  const auto ends = [&](int time) {
    const std::vector<int> e = p.ending_at(time);
    return std::find(e.begin(), e.end(), v) != e.end();
  };
  EXPECT_TRUE(ends(p.forward_time(2))) << "l2's forward is its last use in forward";
  EXPECT_FALSE(ends(p.forward_time(2) + 1)) << "the first time of its hole";
  EXPECT_TRUE(ends(p.backward_time(1)));
  for (int t = 0; t <= p.last_time(); ++t)
    if (t != p.forward_time(2) && t != p.backward_time(1)) {
      EXPECT_FALSE(ends(t)) << t;
    }
}

// A recomputed value that no backward reads is not recomputed: it dies after its last forward
// use like any other, with no hole.
TEST(Planner, ARecomputedValueThatNoBackwardReadsHasNoHole) {
  Chain c = chain(3, true);  // l0 .. l2, loss; S = 4
  c.steps[1].recompute_output = true;
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  const MemoryPlan::Block& v = value_block(p, 2);
  EXPECT_GT(v.hole_begin, v.hole_end);
  EXPECT_EQ(v.end, p.forward_time(2));
  for (const std::vector<int>& before : p.recompute_before) EXPECT_TRUE(before.empty());
}

// A block that lives at one time only (an edge gradient) keeps its bytes after it while no
// block starts a life in them: nothing starts after sum's backward in this fork.
TEST(Planner, AnEdgeGradientIsIntactAfterItsBackwardWhileNothingStartsInItsBytes) {
  const Chain c = fork(false);
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  int edge = -1;
  for (int i = 0; i < int(p.blocks.size()); ++i)
    if (p.blocks[std::size_t(i)].what.starts_with("edge gradient a -> b")) edge = i;
  ASSERT_GE(edge, 0);
  EXPECT_EQ(p.blocks[std::size_t(edge)].begin, p.backward_time(1));
  EXPECT_EQ(p.blocks[std::size_t(edge)].end, p.backward_time(1));
  EXPECT_TRUE(p.intact_at(edge, p.last_time())) << "a's backward starts no life";
  EXPECT_NO_THROW(p.check_readable(edge, p.last_time(), false, "fork/b", "edge"));
}

// The live peak counts every time up to the last backward: l0's value, 4 KiB and recomputed
// for its own backward at time 8, is alive there beside its 4 KiB gradient, 8 KiB, where no
// earlier time holds more than 5 KiB.
TEST(Planner, PeakLiveBytesCountsTheLastBackward) {
  Chain c = with_recomputed(chain(3, true), 0);  // l0 .. l2, loss; S = 4
  c.steps[0].bytes = 4 * kBytes;
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_EQ(p.peak_live_bytes(), 8 * kBytes);
  EXPECT_GE(p.arena_bytes, 8 * kBytes);
}

// A producer read by two consumers: its gradient lives from the backward of the later one (sum,
// the first in backward, which writes it), and a consumer reading one producer twice writes the
// first read's gradient directly and adds the second from an edge.
TEST(Planner, AGradientIsWrittenByTheFirstBackwardOfItsConsumersAndOnlyOnce) {
  const Chain c = fork(true);
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  const MemoryPlan::Block& ga = p.blocks.at(std::size_t(p.grad_block[1]));  // a, node 1
  EXPECT_EQ(ga.begin, p.backward_time(2)) << "sum's backward, before b's";
  EXPECT_EQ(ga.end, p.backward_time(0));
  EXPECT_TRUE(p.input_grads[3][0].direct);
  EXPECT_FALSE(p.input_grads[3][1].direct) << "double's second read of sum adds through an edge";
  EXPECT_EQ(p.input_grads[3][1].edge.bytes, kBytes);
}

// The last step's gradient, which nothing consumes, is given once forward is done: it lives
// from the last forward (time S) to its own backward (S + 1).
TEST(Planner, TheOutputGradientLivesFromTheEndOfForward) {
  Chain c = chain(2, false);  // l0, l1; S = 2
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  const MemoryPlan::Block& g = p.blocks.at(std::size_t(p.grad_block[2]));
  EXPECT_EQ(g.begin, p.forward_time(1));
  EXPECT_EQ(g.begin, 2);
  EXPECT_EQ(g.end, p.backward_time(1));
}

// A layer writes its input's gradient over its output gradient only where the two are the same
// size: a 2 KiB input's gradient does not go into a 1 KiB block.
TEST(Planner, AnInputGradientTakesTheOutputGradientsBlockOnlyAtItsSize) {
  Chain c = chain(3, true);
  for (PlanStep& s : c.steps) s.dinput_over_doutput = true;
  c.steps[0].bytes = 2 * kBytes;
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_NE(p.grad_block[1], p.grad_block[2]);
  EXPECT_EQ(p.grads[1].bytes, 2 * kBytes);
  EXPECT_EQ(p.grad_block[2], p.grad_block[3]) << "l1's and l2's gradients are the same size";
}

// A recomputed value is not kept in its hole even where its layer could write over its input:
// it takes a block of its own, with the hole.
TEST(Planner, ARecomputedValueKeepsItsHoleWhereItCouldWorkInPlace) {
  Chain c = with_recomputed(chain(4, true), 1);  // l0 .. l3, loss; S = 5
  c.steps[1].output_over_input = true;
  const MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  EXPECT_NE(p.value_block[1], p.value_block[2]);
  EXPECT_EQ(value_block(p, 2).hole_begin, p.forward_time(2) + 1);
  EXPECT_EQ(value_block(p, 2).hole_end, p.backward_time(1) - 1);
}

// check_plan refuses a block past the arena's end and one that ends before it begins.
TEST(Planner, CheckFindsABlockPastTheArenaOrEndingBeforeItBegins) {
  Chain c = chain(3, true);
  MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  MemoryPlan small = p;
  small.arena_bytes -= 1;
  EXPECT_THROW(check_plan(small), Error);
  // l0's gradient (times 7-8, alone at 8) made to run from 8 back to 7: it meets no other block.
  MemoryPlan backwards = p;
  MemoryPlan::Block& g = backwards.blocks.at(std::size_t(p.grad_block[1]));
  ASSERT_EQ(g.begin, 7);
  ASSERT_EQ(g.end, 8);
  std::swap(g.begin, g.end);
  EXPECT_THROW(check_plan(backwards), Error);
}

TEST(Planner, CheckFindsTwoLiveBlocksSharingBytes) {
  Chain c = chain(3, true);
  MemoryPlan p = plan_memory(c.model, c.steps, {});
  check_plan(p);
  // Put l0's and l1's values, alive together at l1's forward, at one offset.
  p.blocks[std::size_t(p.value_block[2])].region.offset = p.blocks[std::size_t(p.value_block[1])].region.offset;
  EXPECT_THROW(check_plan(p), Error);
}

TEST(Planner, StepsThatDoNotDescribeTheModelAreRefused) {
  Chain c = chain(3, true);
  std::vector<PlanStep> missing(c.steps.begin() + 1, c.steps.end());
  EXPECT_THROW(plan_memory(c.model, missing, {}), Error);
  std::vector<PlanStep> backwards = c.steps;
  std::swap(backwards[0], backwards[1]);
  EXPECT_THROW(plan_memory(c.model, backwards, {}), Error);
}

// Each refusal names the node: one computed twice, one fused into a later layer but read by
// another, one whose output nobody reads.
TEST(Planner, StepsThatComputeANodeTwiceReadAFusedNodeOrLeaveAnOutputUnreadAreRefused) {
  const auto refusal = [](const Chain& c, const std::vector<PlanStep>& steps) -> std::string {
    try {
      plan_memory(c.model, steps, {});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  Chain c = chain(3, true);  // nodes: input 0, l0 1, l1 2, l2 3, loss 4
  std::vector<PlanStep> twice = c.steps;
  twice[0].nodes = {1, 1};
  EXPECT_NE(refusal(c, twice).find("chain/l0: computed by two plan steps"), std::string::npos) << refusal(c, twice);
  std::vector<PlanStep> fused{PlanStep{.nodes = {1, 2}, .inputs = {0}, .bytes = kBytes},
                              PlanStep{.nodes = {3}, .inputs = {1}, .bytes = kBytes}, c.steps[3]};
  EXPECT_NE(refusal(c, fused).find("chain/l0: fused into a later layer, but chain/l2 reads it"), std::string::npos)
      << refusal(c, fused);
  std::vector<PlanStep> unread = c.steps;
  unread[2].inputs = {1};  // l2 reads l0, and nothing reads l1
  EXPECT_NE(refusal(c, unread).find("chain/l1: output is never used"), std::string::npos) << refusal(c, unread);
}

// ---- Every workload, both backends ----

std::size_t sum_of_blocks(const MemoryPlan& p) {
  std::size_t sum = 0;
  for (const auto& b : p.blocks) sum += b.region.bytes;
  return sum;
}

void expect_sound(const MemoryPlan& p, const std::string& what) {
  EXPECT_NO_THROW(check_plan(p)) << what;
  EXPECT_GE(p.arena_bytes, p.peak_live_bytes()) << what;
  EXPECT_LE(p.arena_bytes, sum_of_blocks(p)) << what;
}

TEST(PlannerWorkloads, NoTwoLiveValuesShareBytesOnEitherBackend) {
  for (const models::Workload& w : models::workloads()) {
    const i64 batch = w.model == "resnet152" ? 2 : w.batch;
    expect_sound(cpu::plan_network_memory(w.spec, batch), w.model + " cpu");
    for (const char* precision : {"fp32", "tf32", "fp16", "bf16"})
      for (const cuda::Layout layout : {cuda::Layout::NCHW, cuda::Layout::NHWC}) {
        if (layout == cuda::Layout::NHWC && w.model == "lenet5") continue;  // its flatten needs NCHW
        const std::string what = fmt::format("{} gpu {} {}", w.model, precision, cuda::layout_name(layout));
        expect_sound(cuda::plan_network_memory(w.spec, batch, cuda::parse_precision(precision), false, layout), what);
      }
  }
}

TEST(PlannerWorkloads, CpuNetworkAllocatesTheArenaItsPlanSays) {
  for (const models::Workload& w : models::workloads()) {
    if (w.model == "resnet152") continue;  // the same code path; ResNet blocks run in test_models
    const int lanes = cpu::cpu_lanes(w.spec, w.batch, omp_get_max_threads());
    const MemoryPlan p = cpu::plan_network_memory(w.spec, w.batch / lanes);
    cpu::CpuNetwork net(w.spec, NetworkOptions{.batch = w.batch, .optimizer = w.optimizer});
    EXPECT_EQ(net.lanes(), lanes) << w.model;
    EXPECT_EQ(std::size_t(net.activation_bytes()), p.arena_bytes * std::size_t(lanes)) << w.model;
  }
}

TEST(PlannerWorkloads, SharingCutsResnet152ToAFractionOfOneBufferPerValue) {
  const ModelSpec m = models::workload("resnet152", "imagenet").spec;
  const MemoryPlan shared = cuda::plan_network_memory(m, 8, cuda::Precision::BF16);
  const MemoryPlan whole = cuda::plan_network_memory(m, 8, cuda::Precision::BF16, /*keep_all=*/true);
  EXPECT_LT(shared.arena_bytes * 2, whole.arena_bytes) << shared.arena_bytes << " of " << whole.arena_bytes;
}

// The targets on an 80 GB H100, read off the plan (CudaNetwork allocates exactly this
// arena; the weights, gradients, optimizer state, batch buffers and workspaces are added as the
// network allocates them): at or below PyTorch 2.11's peak at batch 128 (bf16 11.8 GB, fp32
// 22.3 GB, rounded up to 12 and 23 GB), and batch 256 in bf16 under a 24 GiB cap.
TEST(PlannerWorkloads, Resnet152OnAGpuPlansWithinThePyTorchFootprint) {
  const ModelSpec m = models::workload("resnet152", "imagenet").spec;
  const auto total = [&](i64 batch, const char* precision) {
    const MemoryPlanBytes p = memory_plan(Backend::Cuda, m, batch, precision, /*adam=*/false);
    EXPECT_EQ(p.arena, cuda::plan_network_memory(m, batch, cuda::parse_precision(precision)).arena_bytes);
    return double(p.total());
  };
  EXPECT_LE(total(128, "bf16"), 12e9);
  EXPECT_LE(total(128, "fp32"), 23e9);
  EXPECT_LE(total(256, "bf16"), 24.0 * (1 << 30));
  // The harness's batch for a card: 128 fits an 80 GB H100 in every precision, a 16 GiB card less.
  for (const char* precision : {"fp32", "tf32", "fp16", "bf16"})
    EXPECT_EQ(gpu_batch_that_fits(m, 128, precision, false, std::size_t(79) << 30), 128) << precision;
  const i64 small = gpu_batch_that_fits(m, 128, "fp32", false, std::size_t(16) << 30);
  EXPECT_LT(small, 128);
  EXPECT_LE(total(small, "fp32"), double(std::size_t(16) << 30));
  EXPECT_GT(total(small * 2, "fp32"), double(std::size_t(16) << 30)) << "the largest power of two that fits";
}

// PyTorch 1.13 peaked at 2.8 GB of resident memory training this on the CPU; the plan (arena,
// weights, gradients, momentum, the batch) must leave room under 3 GB for oneDNN's own buffers.
TEST(PlannerWorkloads, Resnet152OnTheCpuPlansUnderThreeGigabytes) {
  const ModelSpec m = models::workload("resnet152", "imagenet").spec;
  const MemoryPlanBytes p = memory_plan(Backend::Cpu, m, 8, "fp32", /*adam=*/false);
  EXPECT_EQ(p.arena, cpu::plan_network_memory(m, 8).arena_bytes);
  EXPECT_EQ(double(p.fixed), double(model_cost(m).parameters) * 4 * 3 + 8.0 * 3 * 224 * 224 * 4)
      << "weights, gradients, momentum, the batch";
  EXPECT_LE(double(p.total()), 2.5e9) << "arena " << p.arena << ", fixed " << p.fixed;
}

}  // namespace
}  // namespace tb
