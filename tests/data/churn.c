/* Thread churn for the `sframe stack` tests and bench: argv[1] creator threads (default 2)
 * each create and join short-lived threads in a loop, so threads appear and vanish all the
 * time. With argv[2] = N > 0 the process calls exit() after N milliseconds (its threads
 * still churning); otherwise it runs until stdin reaches end of file. Prints "ready" once
 * the creators run, and "created N" at the end of a normal run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int done;
static volatile long sink;
static long created;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void *short_lived(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++)
        sink += i;
    return NULL;
}

__attribute__((noinline)) static void *creator(void *arg) {
    (void)arg;
    long count = 0;
    while (!done) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, short_lived, NULL) == 0) {
            pthread_join(thread, NULL);
            count++;
        }
    }
    pthread_mutex_lock(&lock);
    created += count;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    int creators = argc > 1 ? atoi(argv[1]) : 2;
    long lifetime = argc > 2 ? atol(argv[2]) : 0;
    pthread_t ids[64];
    if (creators < 1 || creators > 64)
        return 2;
    for (int i = 0; i < creators; i++)
        pthread_create(&ids[i], NULL, creator, NULL);
    printf("ready\n");
    fflush(stdout);
    if (lifetime > 0) {
        usleep((useconds_t)(lifetime * 1000));
        exit(0); /* every thread dies at once, whatever it is doing */
    }
    char byte;
    while (read(0, &byte, 1) > 0)
        ;
    done = 1;
    for (int i = 0; i < creators; i++)
        pthread_join(ids[i], NULL);
    printf("created %ld\n", created);
    return 0;
}
