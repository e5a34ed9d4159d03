/* kl_signal_*: a process-directed signal reaches kl_signal_wait even when it
 * is sent while other threads (with nothing blocked) are running. */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "keel/core.h"
#include "../harness.h"

static void *spin(void *arg) {
    int *stop = arg;
    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) usleep(1000);
    return NULL;
}

KL_TEST(core_signal_queued_to_waiter) {
    kl_err e = {0};
    int stop = 0;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, spin, &stop);
    KT_OK(kl_signal_catch(&e), &e);
    for (int k = 0; k < 20; k++) {   /* whichever thread the kernel picks, the waiter gets it */
        kill(getpid(), k % 2 ? SIGHUP : SIGTERM);
        KT_EQ_INT(kl_signal_wait(), k % 2 ? SIGHUP : SIGTERM);
    }
    kl_signal_release();
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}
