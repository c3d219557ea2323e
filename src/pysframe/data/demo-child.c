/* The child process of `sframe demo`: a short chain of calls that blocks in read(2) on
 * its standard input, so its stack is known; it exits when that pipe is closed, or by
 * itself after 60 s (alarm) if the demo was killed before it could clean up.
 * Built by tools/build-demo-child.sh with gas --gsframe (own .sframe section). */
#include <unistd.h>

__attribute__((noinline)) static long wait_for_parent(void) {
    char byte;
    return read(0, &byte, 1);
}
__attribute__((noinline)) static long inner(int depth) {
    long result = wait_for_parent();
    __asm__ volatile("" ::: "memory");  /* no tail call: keep this frame */
    return result + depth;
}
__attribute__((noinline)) static long middle(int depth) {
    long result = inner(depth + 1);
    __asm__ volatile("" ::: "memory");
    return result + 1;
}
__attribute__((noinline)) long outer(int depth) {
    long result = middle(depth + 1);
    __asm__ volatile("" ::: "memory");
    return result + 1;
}
int main(void) {
    alarm(60);
    static const char ready[] = "ready\n";
    if (write(1, ready, sizeof ready - 1) < 0)
        return 1;
    return outer(0) < 0;
}
