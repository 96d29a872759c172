// A benchmark, not a test: each of trainbench's own CPU kernels (engine/cpu/kernels) in every ISA
// this machine runs, on the shapes the models give them: LeNet-5's first convolution (3 -> 6
// channels, 5x5, 32x32, batch 100) forward and weight gradient, its second convolution's weight
// and input gradients from channel blocks (6 -> 16 channels, 5x5, 14x14), its 2x2 max poolings
// (plain after the first convolution, over channel blocks after the second), the sine
// LSTM (5 units, 50 steps, batch 20), SGD and Adam over the MLP's 1.8 M parameters, and a
// gradient sum of ResNet-152 32x32's largest (128 x 256 x 8 x 8). One thread, so that the ISAs
// compare without the machine's thread count in the way (but exchange/two_threads, the cost of
// data moving between two cores); docs/cpu-kernels.md shows a run.
//   build/release/tests/bench_cpu_kernels [--benchmark_filter=conv] [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
#include <string>
#include <vector>

#include "engine/cpu/isa.hpp"
#include "engine/cpu/kernels/kernels.hpp"
#include "tests/small_lstm_buffers.hpp"

namespace {

using namespace tb::cpu;
using kernels::i64;

std::vector<float> random_floats(i64 n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

struct LeNetConv {
  kernels::SmallConv s{.N = 100, .C = 3, .O = 6, .K = 5, .HP = 32, .WP = 32, .OH = 28, .OW = 28};
  std::vector<float> x = random_floats(s.N * s.C * s.HP * s.WP, 1), w = random_floats(s.O * 75, 2),
                     bias = random_floats(s.O, 3), y = std::vector<float>(std::size_t(s.N * s.O * 28 * 28)),
                     dy = random_floats(s.N * s.O * 28 * 28, 4), dw = std::vector<float>(std::size_t(s.O * 75)),
                     db = std::vector<float>(std::size_t(s.O));
  LeNetConv() { s.x = x.data(), s.w = w.data(), s.bias = bias.data(), s.y = y.data(), s.dy = dy.data(); }
};

void conv_forward(benchmark::State& state, Isa isa) {
  const kernels::Table& k = kernels::table(isa);
  LeNetConv c;
  for (auto _ : state) k.small_conv_forward(c.s, 0, c.s.N * c.s.OH);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 100 * 6 * 28 * 28 * 75 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void conv_weight_grad(benchmark::State& state, Isa isa) {
  const kernels::Table& k = kernels::table(isa);
  LeNetConv c;
  for (auto _ : state) k.small_conv_weight_grad(c.s, 0, c.s.N, c.dw.data(), c.db.data());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 100 * 6 * 28 * 28 * 75 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// LeNet-5's second convolution's weight gradient (6 -> 16 channels, 5x5 over 14x14, batch 100)
// from its output gradient in blocks of `block` channels (16 as oneDNN's AVX-512 forward writes
// them, 8 as its AVX2 forward does).
void blocked_weight_grad(benchmark::State& state, Isa isa, i64 block) {
  const kernels::Table& k = kernels::table(isa);
  kernels::BlockedConvGrad s{.N = 100, .C = 6, .H = 14, .W = 14, .O = 16, .K = 5, .OH = 10, .OW = 10, .B = block};
  const std::vector<float> x = random_floats(s.N * s.C * 14 * 14, 15), dy = random_floats(s.N * s.O * 100, 16);
  std::vector<float> dw(std::size_t(s.O * s.C * 25)), db(std::size_t(s.O));
  s.x = x.data(), s.dy = dy.data();
  for (auto _ : state) k.blocked_conv_weight_grad(s, 0, s.N, dw.data(), db.data());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 100 * 16 * 10 * 10 * 150 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Its input gradient from the same blocks (and the weights in them: O / B, K, K, C, B).
void blocked_data_grad(benchmark::State& state, Isa isa, i64 block) {
  const kernels::Table& k = kernels::table(isa);
  kernels::BlockedConvGrad s{.N = 100, .C = 6, .H = 14, .W = 14, .O = 16, .K = 5, .OH = 10, .OW = 10, .B = block};
  const std::vector<float> w = random_floats(s.O * s.C * 25, 17), dy = random_floats(s.N * s.O * 100, 16);
  std::vector<float> dx(std::size_t(s.N * s.C * 14 * 14));
  s.dy = dy.data();
  for (auto _ : state) k.blocked_conv_data_grad(s, w.data(), 0, s.N, dx.data());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 100 * 16 * 10 * 10 * 150 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Its 2x2 max pooling over those blocks (16 channels, 10x10), forward and backward.
void blocked_pool(benchmark::State& state, Isa isa, i64 block) {
  const kernels::Table& k = kernels::table(isa);
  std::vector<float> x = random_floats(100 * 16 * 100, 18), y(100 * 16 * 25), dy = random_floats(100 * 16 * 25, 19),
                     dx(x.size());
  std::vector<std::int32_t> arg(y.size());
  kernels::BlockedPool p{.planes = 100 * 16 / block, .B = block, .K = 2, .H = 10, .W = 10, .OH = 5, .OW = 5};
  p.x = x.data(), p.y = y.data(), p.argmax = arg.data(), p.dy = dy.data(), p.dx = dx.data();
  for (auto _ : state) {
    k.blocked_pool_forward(p, 0, p.planes);
    k.blocked_pool_backward(p, 0, p.planes);
  }
}

void pool_forward(benchmark::State& state, Isa isa) {
  const kernels::Table& k = kernels::table(isa);
  std::vector<float> x = random_floats(600 * 28 * 28, 5), y(600 * 14 * 14);
  std::vector<std::int32_t> arg(y.size());
  kernels::PlainPool p{.planes = 600, .K = 2, .H = 28, .W = 28, .OH = 14, .OW = 14};
  p.x = x.data(), p.y = y.data(), p.argmax = arg.data();
  for (auto _ : state) k.plain_pool_forward(p, 0, p.planes * p.OH);
}

void lstm_step(benchmark::State& state, Isa isa) {
  const kernels::Table& k = kernels::table(isa);
  const i64 T = 35, N = 20, I = 5, H = 5, G = 4 * H;
  tb::testing_support::SmallLstmBuffers b(T, N, I, H, random_floats(T * N * I, 6), random_floats(I * G, 7),
                                          random_floats(H * G, 8), random_floats(G, 9), random_floats(T * N * H, 10));
  const kernels::SmallLstm s = b.view();
  for (auto _ : state) {
    k.small_lstm_forward(s);
    k.small_lstm_backward(s);
  }
}

void update(benchmark::State& state, Isa isa, bool adam) {
  const kernels::Table& k = kernels::table(isa);
  const i64 n = 1796010;  // the MLP's parameters
  std::vector<float> p = random_floats(n, 11), g = random_floats(n, 12), m(static_cast<std::size_t>(n)),
                     v(static_cast<std::size_t>(n));
  kernels::Update u{.n = n,
                    .params = p.data(),
                    .grads = g.data(),
                    .first = m.data(),
                    .second = v.data(),
                    .lr = 1e-3f,
                    .momentum = 0.9f,
                    .beta1 = 0.9f,
                    .beta2 = 0.999f,
                    .eps = 1e-8f};
  for (auto _ : state) (adam ? k.adam : k.sgd)(u);
  state.counters["GB/s"] = benchmark::Counter(double(n) * 4 * (adam ? 7 : 5) * double(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void add(benchmark::State& state, Isa isa) {
  const kernels::Table& k = kernels::table(isa);
  const i64 n = 128 * 256 * 8 * 8;
  std::vector<float> a = random_floats(n, 13), b = random_floats(n, 14);
  for (auto _ : state) k.add(a.data(), b.data(), n);
}

// Not a kernel: what the machine charges for data one core wrote and another reads, the cost that
// lanes (engine/cpu/network.hpp) avoid. Two threads each add 1 to 1 MB of floats, then swap halves
// at a barrier, so every pass reads what the other core wrote last (Time: one pass). On the
// 2-core VM it was 19-22 us while LeNet-5's cpu row ran 29,000 samples/s on one network and 41-44
// us while it ran 21,500 (the vCPUs on cores that share no cache).
void exchange(benchmark::State& state) {
  const i64 n = i64(1) << 18;  // 1 MB of floats per half
  std::vector<float> halves(std::size_t(2 * n), 0.0f);
  i64 passes = 0;
  for (auto _ : state) {
#pragma omp parallel num_threads(2)
    {
      float* mine = halves.data() + ((passes + omp_get_thread_num()) & 1) * n;
      for (i64 i = 0; i < n; ++i) mine[i] += 1.0f;
    }
    ++passes;
  }
  benchmark::DoNotOptimize(halves.data());
}

int register_all() {
  benchmark::RegisterBenchmark("exchange/two_threads", exchange)->UseRealTime();
  for (Isa isa : runnable_isas()) {
    const std::string name = isa_name(isa);
    benchmark::RegisterBenchmark(("conv_forward/lenet5/" + name).c_str(), conv_forward, isa);
    benchmark::RegisterBenchmark(("conv_weight_grad/lenet5/" + name).c_str(), conv_weight_grad, isa);
    for (const i64 block : {8, 16})
      if (block % kernels::table(isa).lanes == 0)
        benchmark::RegisterBenchmark(
            ("blocked_weight_grad/lenet5_conv2/b" + std::to_string(block) + "/" + name).c_str(), blocked_weight_grad,
            isa, block);
    for (const i64 block : {8, 16})
      if (block % kernels::table(isa).lanes == 0) {
        const std::string b = std::string("b").append(std::to_string(block)).append("/").append(name);
        benchmark::RegisterBenchmark(("blocked_data_grad/lenet5_conv2/" + b).c_str(), blocked_data_grad, isa, block);
        benchmark::RegisterBenchmark(("blocked_pool_forward_backward/lenet5_pool2/" + b).c_str(), blocked_pool, isa,
                                     block);
      }
    benchmark::RegisterBenchmark(("pool_forward/lenet5/" + name).c_str(), pool_forward, isa);
    benchmark::RegisterBenchmark(("lstm_forward_backward/sine/" + name).c_str(), lstm_step, isa);
    benchmark::RegisterBenchmark(("sgd/mlp/" + name).c_str(), update, isa, false);
    benchmark::RegisterBenchmark(("adam/mlp/" + name).c_str(), update, isa, true);
    benchmark::RegisterBenchmark(("add/resnet152/" + name).c_str(), add, isa);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
