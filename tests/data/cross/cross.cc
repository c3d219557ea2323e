// Cross-architecture core corpus, C++: an exception in flight ends in abort(). "throw":
// nothing catches it, so __cxa_throw calls std::terminate; "cleanup": a destructor run
// while the exception unwinds its frame aborts.
#include <cstdlib>
#include <cstring>
#include <stdexcept>

volatile int sink;

struct Guard {
    bool fatal;
    explicit Guard(bool f) : fatal(f) {}
    __attribute__((noinline)) ~Guard() { if (fatal) std::abort(); sink++; }
};

__attribute__((noinline)) void thrower(int n) {
    if (n <= 0)
        throw std::runtime_error("in flight");
    thrower(n - 1);
    sink++;
}

__attribute__((noinline)) void guarded(int n, bool fatal) {
    Guard guard(fatal);
    thrower(n);
    sink++;
}

int main(int argc, char **argv) {
    const char *scenario = argc > 1 ? argv[1] : "throw";
    int depth = argc > 2 ? std::atoi(argv[2]) : 3;
    if (!std::strcmp(scenario, "cleanup")) {
        try {
            guarded(depth, true);
        } catch (const std::exception &) {
            sink++;
        }
    } else
        guarded(depth, false);
    return 0;
}
