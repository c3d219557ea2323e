// A C++ program for the perf parity tests: templates, std::map, std::sort, exceptions,
// lambdas and a .cold clone, busy for the given number of milliseconds.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace work {
template <typename T> struct Box { T value; };

__attribute__((noinline)) int thrower(int x) {
    if (x % 97 == 0) throw std::runtime_error("ninety-seven");
    return x * 3;
}

template <typename K>
__attribute__((noinline)) long fill(std::map<K, Box<long>> &table, int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        table[static_cast<K>(i * 7919 % 10007)].value += i;
        try { sum += thrower(i); } catch (const std::exception &) { sum -= 1; }
    }
    return sum;
}

__attribute__((noinline)) long sorter(std::vector<std::string> &words) {
    std::sort(words.begin(), words.end(), [](const std::string &a, const std::string &b) {
        return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    return static_cast<long>(words.front().size());
}
}  // namespace work

int main(int argc, char **argv) {
    int millis = argc > 1 ? std::atoi(argv[1]) : 500;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(millis);
    long total = 0;
    while (std::chrono::steady_clock::now() < end) {
        std::map<long, work::Box<long>> table;
        total += work::fill(table, 20000);
        std::vector<std::string> words;
        for (int i = 0; i < 20000; ++i) words.push_back(std::to_string(i * 2654435761u));
        total += work::sorter(words);
    }
    return total == 42 ? 1 : 0;
}
