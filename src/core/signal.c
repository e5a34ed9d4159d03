/* Signals for long-running commands: SIGHUP/SIGINT/SIGTERM caught by a
 * handler (in whichever thread the kernel picks) and queued on a self-pipe
 * that the waiting thread reads. See kl_signal_catch in include/keel/core.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "keel/core.h"

static int fds[2] = {-1, -1};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const int sigs[3] = {SIGHUP, SIGINT, SIGTERM};

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(fds[1], &b, 1);   /* async-signal-safe; a full pipe drops the repeat */
    (void)w;
    errno = saved;
}

int kl_signal_catch(kl_err *e) {
    int rc = KL_OK;
    pthread_mutex_lock(&lock);
    if (fds[0] < 0 && pipe2(fds, O_CLOEXEC) != 0) {
        rc = kl_err_set(e, KL_EINTERNAL, "signal pipe: %s", strerror(errno));
        goto done;
    }
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, NULL);
    /* a mask blocked earlier by this thread would keep the signals pending forever */
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < 3; i++) sigaddset(&set, sigs[i]);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
done:
    pthread_mutex_unlock(&lock);
    return rc;
}

int kl_signal_wait(void) {
    for (;;) {
        unsigned char b;
        ssize_t r = read(fds[0], &b, 1);
        if (r == 1) return b;
        if (r < 0 && errno == EINTR) continue;
        return SIGTERM;   /* the pipe is gone: treat as a stop request */
    }
}

void kl_signal_release(void) {
    for (int i = 0; i < 3; i++) signal(sigs[i], SIG_DFL);
}
