/* A multi-threaded program for the `sframe stack` tests: every thread blocks at a known
 * point under a chain of its own calls, then main prints "ready" and joins them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_barrier_t barrier;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int pipe_fds[2];
static volatile long sink;

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) static void sleep_long(void) { sleep(600); KEEP_FRAME(); }
__attribute__((noinline)) static void sleeper_body(void) { sleep_long(); KEEP_FRAME(); }

__attribute__((noinline)) static long read_pipe(void) {
    char byte;
    long got = read(pipe_fds[0], &byte, 1);
    KEEP_FRAME();
    return got;
}
__attribute__((noinline)) static long reader_body(void) { long r = read_pipe(); KEEP_FRAME(); return r + 1; }

__attribute__((noinline)) static void wait_forever(void) {
    pthread_mutex_lock(&lock);
    for (;;)
        pthread_cond_wait(&never, &lock);
}

__attribute__((noinline)) static long recurse(int depth) {
    char pad[64];
    pad[depth % 64] = (char)depth;
    sink = pad[depth % 64];
    if (depth == 0) {
        pause();
        return 0;
    }
    long result = recurse(depth - 1);
    KEEP_FRAME();
    return result + pad[depth % 64];
}

static void *sleeper(void *arg) { (void)arg; pthread_setname_np(pthread_self(), "sleeper");
    pthread_barrier_wait(&barrier); sleeper_body(); return NULL; }
static void *reader(void *arg) { (void)arg; pthread_setname_np(pthread_self(), "reader");
    pthread_barrier_wait(&barrier); sink = reader_body(); return NULL; }
static void *waiter(void *arg) { (void)arg; pthread_setname_np(pthread_self(), "waiter");
    pthread_barrier_wait(&barrier); wait_forever(); return NULL; }
static void *recurser(void *arg) { (void)arg; pthread_setname_np(pthread_self(), "recurser");
    pthread_barrier_wait(&barrier); sink = recurse(arg ? 2000 : 12); return NULL; }

int main(int argc, char **argv) {
    /* argv[1] = number of extra deep recursers (for the interruption tests) */
    int extra = argc > 1 ? atoi(argv[1]) : 0;
    pthread_t threads[4 + 512];
    void *(*bodies[4])(void *) = {sleeper, reader, waiter, recurser};
    if (pipe(pipe_fds) != 0 || extra < 0 || extra > 512)
        return 1;
    pthread_barrier_init(&barrier, NULL, 5 + extra);
    for (int i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, bodies[i], NULL);
    for (int i = 0; i < extra; i++)
        pthread_create(&threads[4 + i], NULL, recurser, (void *)1);
    pthread_barrier_wait(&barrier);
    usleep(100000); /* let every thread reach its blocking call */
    printf("ready\n");
    fflush(stdout);
    pthread_join(threads[0], NULL);
    return 0;
}
