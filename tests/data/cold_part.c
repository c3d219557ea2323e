/* A function split by gcc -O2 into `work` and `work.cold` (the block calling the cold
   function is moved to .text.unlikely), blocked in the cold part's callee. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile int sink;

__attribute__((noinline, cold)) void wait_here(int n)
{
    sink = n;
    printf("ready\n");
    fflush(stdout);
    pause();
    sink = 0;
}

__attribute__((noinline)) int work(int n, char **argv)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        total += argv[0][i % 3];
        if (total > 1000) {
            wait_here(n);
            sink = total * 3;
            total = sink + 1;
        }
    }
    return total;
}

int main(int argc, char **argv)
{
    return work(argc > 1 ? atoi(argv[1]) : 3, argv) + sink;
}
