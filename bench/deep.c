/* The deep workload of bench/perf_script.py: threads recursing 10-70 calls deep through
 * three mutually recursive functions (no frame pointers at -O2), for `perf record
 * --call-graph dwarf`. Usage: deep SECONDS THREADS */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static unsigned long leaf(unsigned long x) {
    unsigned long s = 0;
    for (int i = 0; i < 400; i++) s += (x * (unsigned long)i) ^ (s >> 3);
    return s;
}
__attribute__((noinline)) static unsigned long walk_a(int depth, unsigned long x);
__attribute__((noinline)) static unsigned long walk_b(int depth, unsigned long x) {
    if (depth <= 0) return leaf(x);
    unsigned long r = walk_a(depth - 1, x * 3 + 1);
    return r + (x & 7);
}
__attribute__((noinline)) static unsigned long walk_c(int depth, unsigned long x) {
    if (depth <= 0) return leaf(x ^ 0x55);
    return walk_b(depth - 1, x + 11) ^ leaf(x);
}
__attribute__((noinline)) static unsigned long walk_a(int depth, unsigned long x) {
    if (depth <= 0) return leaf(x + 1);
    unsigned long r = (x & 1) ? walk_b(depth - 1, x + 7) : walk_c(depth - 1, x ^ 5);
    return r * 2 + 1;
}
static double seconds;
static void *run(void *arg) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned long x = (unsigned long)arg;
    for (;;) {
        for (int d = 10; d < 70; d += 3) sink += walk_a(d, x++);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds) break;
    }
    return 0;
}
int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 5;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    pthread_t t[64];
    for (int i = 1; i < threads && i < 64; i++) pthread_create(&t[i], 0, run, (void *)(long)i);
    run(0);
    for (int i = 1; i < threads && i < 64; i++) pthread_join(t[i], 0);
    return 0;
}
