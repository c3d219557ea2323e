/* Sends itself SIGUSR1 as fast as it can, in argv[1] threads (default 1), and checks
 * after every kill that the handler ran (a signal to oneself is delivered before the
 * system call returns). Stops when stdin reaches end of file; prints
 * "sent N lost M" and exits 0 when no signal was lost. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static __thread volatile long handled;
static volatile int done;
static long sent_total, lost_total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void on_usr1(int sig) { (void)sig; handled++; }

static void *pinger(void *arg) {
    (void)arg;
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    long sent = 0, lost = 0;
    while (!done) {
        long before = handled;
        syscall(SYS_tgkill, pid, tid, SIGUSR1);
        sent++;
        if (handled != before + 1) {
            lost++;
            handled = before + 1;
        }
    }
    pthread_mutex_lock(&lock);
    sent_total += sent;
    lost_total += lost;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    pthread_t ids[64];
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigaction(SIGUSR1, &action, NULL);
    if (threads < 1 || threads > 64)
        return 2;
    for (int i = 0; i < threads; i++)
        pthread_create(&ids[i], NULL, pinger, NULL);
    printf("ready\n");
    fflush(stdout);
    char byte;
    while (read(0, &byte, 1) > 0)
        ;
    done = 1;
    for (int i = 0; i < threads; i++)
        pthread_join(ids[i], NULL);
    printf("sent %ld lost %ld\n", sent_total, lost_total);
    return lost_total != 0;
}
