// Running a test's replicas on threads of their own (test_parallel.cpp, test_cuda.cpp).
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace tb::testing_support {

// Runs fn(rank) on `n` threads and rethrows the first failure.
inline void on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tb::testing_support
