/* Cross-architecture core corpus (tests/test_cross_cores.py): each scenario ends the
   program with abort() (or a fault) in a chosen frame, so that qemu-user writes a core.
   Scenario and depth come from the command line: cross SCENARIO [DEPTH]. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

volatile int sink;
int *volatile nowhere;

__attribute__((noinline)) void die(void) { abort(); }

__attribute__((noinline)) int recurse(int n) {
    if (n <= 0)
        die();
    int r = recurse(n - 1);
    sink += r;
    return r + 1;
}

static void on_signal(int signo) { sink = signo; die(); }

__attribute__((noinline)) void deliver(void) { raise(SIGUSR1); sink++; }

/* A leaf without a frame of its own: the fault leaves its return address in the link
   register (AArch64 x30, s390x r14). */
__attribute__((noinline)) void leaf(int value) { *nowhere = value; }

__attribute__((noinline)) void to_leaf(int n) { if (n > 0) to_leaf(n - 1); else leaf(n); sink++; }

static int compares;

static int compare(const void *a, const void *b) {
    if (++compares == 5)
        die();
    return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) void sort(void) {
    int values[16];
    for (int i = 0; i < 16; i++)
        values[i] = (i * 7) % 16;
    qsort(values, 16, sizeof values[0], compare);
    sink = values[0];
}

int main(int argc, char **argv) {
    const char *scenario = argc > 1 ? argv[1] : "recurse";
    int depth = argc > 2 ? atoi(argv[2]) : 3;
    if (!strcmp(scenario, "recurse"))
        recurse(depth);
    else if (!strcmp(scenario, "signal")) {
        signal(SIGUSR1, on_signal);
        deliver();
    } else if (!strcmp(scenario, "segv")) {
        signal(SIGSEGV, on_signal);
        to_leaf(depth);
    } else if (!strcmp(scenario, "leaf"))
        to_leaf(depth);
    else if (!strcmp(scenario, "qsort"))
        sort();
    return 0;
}
