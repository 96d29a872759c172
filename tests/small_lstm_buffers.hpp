// The buffers of one forward and backward of trainbench's own small-LSTM kernel
// (engine/cpu/kernels: SmallLstm) around given inputs, weights and output gradient, and the
// kernel's view of them. test_cpu_kernels.cpp checks the kernel against the reference with them;
// bench_cpu_kernels.cpp times it.
#pragma once

#include <utility>
#include <vector>

#include "engine/cpu/kernels/kernels.hpp"

namespace tb::testing_support {

struct SmallLstmBuffers {
  using i64 = cpu::kernels::i64;
  using Vec = std::vector<float>;

  // x (T, N, I), wx (I, 4H), wh (H, 4H), bias (4H), dh (T, N, H).
  SmallLstmBuffers(i64 T, i64 N, i64 I, i64 H, Vec x_, Vec wx_, Vec wh_, Vec bias_, Vec dh_)
      : T(T),
        N(N),
        I(I),
        H(H),
        x(std::move(x_)),
        wx(std::move(wx_)),
        wh(std::move(wh_)),
        bias(std::move(bias_)),
        dh(std::move(dh_)),
        h(std::size_t(T * N * H)),
        gates(std::size_t(T * N * 4 * H)),
        cells(h.size()),
        tanh_cells(h.size()),
        act(std::size_t(4 * H), 1.0f),
        dx(x.size()),
        dwx(wx.size()),
        dwh(wh.size()),
        dbias(bias.size()),
        dgates(std::size_t(N * 4 * H)),
        dh_next(std::size_t(N * H)),
        dc_next(dh_next.size()) {
    for (i64 j = 2 * H; j < 3 * H; ++j) act[std::size_t(j)] = 2.0f;  // the cell gate's tanh
  }
  // The view holds pointers into the buffers: they stay where they are.
  SmallLstmBuffers(const SmallLstmBuffers&) = delete;
  SmallLstmBuffers& operator=(const SmallLstmBuffers&) = delete;

  cpu::kernels::SmallLstm view() {
    return {.T = T,
            .N = N,
            .I = I,
            .H = H,
            .x = x.data(),
            .wx = wx.data(),
            .wh = wh.data(),
            .bias = bias.data(),
            .h = h.data(),
            .gates = gates.data(),
            .cells = cells.data(),
            .tanh_cells = tanh_cells.data(),
            .act_scale = act.data(),
            .dh = dh.data(),
            .dx = dx.data(),
            .dwx = dwx.data(),
            .dwh = dwh.data(),
            .dbias = dbias.data(),
            .dgates = dgates.data(),
            .dh_next = dh_next.data(),
            .dc_next = dc_next.data()};
  }

  i64 T, N, I, H;
  Vec x, wx, wh, bias, dh;                            // given
  Vec h, gates, cells, tanh_cells, act;               // forward's output, saved, gate scales
  Vec dx, dwx, dwh, dbias, dgates, dh_next, dc_next;  // backward's gradients and scratch
};

}  // namespace tb::testing_support
