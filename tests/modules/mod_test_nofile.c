/* A test-only httpd module: brings about, in the child that serves it, the shortages a
 * parking child must survive. It moves the child's open-file limit from inside that child (a
 * process may lower its own soft limit and raise it again up to its hard limit without
 * privileges), to bring about EMFILE as a module that holds descriptors would; and for
 * what cannot be brought about for one process alone (the system's file table, the epoll
 * watches every process of a user shares), it installs a seccomp filter in every thread of
 * the child that fails the one system call with that errno, for the rest of the child's
 * life. tests/park_shortage.rs builds and loads it.
 *
 * The kernel gives a new descriptor the lowest free number, and fails with EMFILE when that
 * number is not below the soft limit; so a soft limit at the lowest free number leaves the
 * process no descriptor, whatever it holds above it.
 *
 *   GET /nofile?hold      soft limit = the lowest free number now: the next accept meets
 *                         EMFILE while this connection stays open
 *   GET /nofile?hold-after-close
 *                         the same, counting this connection's own number as free: once it
 *                         closes (Connection: close), the child has no descriptor left
 *   GET /nofile?release   soft limit = the hard limit
 *   GET /nofile?enfile    every accept fails with ENFILE (the system's file table is full)
 *   GET /nofile?refuse-listener
 *                         EPOLL_CTL_ADD of the first listening socket fails with ENOSPC
 *                         (fs.epoll.max_user_watches reached)
 *
 * Answers "soft=N\n". Not for production use. */
#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "ap_config.h"
#include "http_core.h"
#include "apr_portable.h"
#include "ap_listen.h"
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#if defined(__x86_64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* From now on, in every thread of the process, the system call `nr` fails with `err` when
 * the low 32 bits of its first `n` (at most 2) arguments `arg[i]` equal `val[i]`. 0 on
 * success. */
static int fail_syscall(int nr, int err, int n, const unsigned *arg, const __u32 *val)
{
#ifdef TEST_AUDIT_ARCH
    __u32 off[4] = { offsetof(struct seccomp_data, arch), offsetof(struct seccomp_data, nr) };
    __u32 k[4] = { TEST_AUDIT_ARCH, (__u32)nr };
    struct sock_filter prog[10];
    unsigned short checks = (unsigned short)(2 + n), pc = 0;
    unsigned short allow = (unsigned short)(2 * checks + 1);
    struct sock_fprog fprog;
    int i;
    if (n < 0 || n > 2) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        off[2 + i] = (__u32)(offsetof(struct seccomp_data, args) + arg[i] * sizeof(__u64));
        k[2 + i] = val[i];
    }
    /* Each check loads a word and, unless it matches, jumps to ALLOW. */
    for (i = 0; i < checks; i++) {
        struct sock_filter load = BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off[i]);
        struct sock_filter match = BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k[i], 0,
                                            (unsigned char)(allow - pc - 2));
        prog[pc++] = load;
        prog[pc++] = match;
    }
    {
        struct sock_filter fail = BPF_STMT(BPF_RET | BPF_K,
                                           SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA));
        struct sock_filter pass = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        prog[pc++] = fail;
        prog[pc++] = pass;
    }
    fprog.len = pc;
    fprog.filter = prog;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return -1;
    }
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                        &fprog);
#else
    (void)nr; (void)err; (void)n; (void)arg; (void)val;
    return -1;
#endif
}

/* accept4 and accept fail with ENFILE. */
static int fail_accept(void)
{
    return fail_syscall(__NR_accept4, ENFILE, 0, NULL, NULL)
           || fail_syscall(__NR_accept, ENFILE, 0, NULL, NULL);
}

/* epoll_ctl(_, EPOLL_CTL_ADD, fd, _) fails with ENOSPC. */
static int refuse_watch(int fd)
{
    const unsigned arg[2] = { 1, 2 };
    const __u32 val[2] = { EPOLL_CTL_ADD, (__u32)fd };
    return fail_syscall(__NR_epoll_ctl, ENOSPC, 2, arg, val);
}

/* The lowest free descriptor number (-1 if none). */
static long lowest_free(void)
{
    int fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    close(fd);
    return fd;
}

static int nofile_handler(request_rec *r)
{
    struct rlimit rl;
    long free_fd;
    apr_os_sock_t own = -1;
    if (!r->handler || strcmp(r->handler, "test-nofile") != 0) {
        return DECLINED;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    if (r->args && strcmp(r->args, "release") == 0) {
        rl.rlim_cur = rl.rlim_max;
    }
    else if (r->args && strcmp(r->args, "enfile") == 0) {
        if (fail_accept() != 0) {
            return HTTP_INTERNAL_SERVER_ERROR;
        }
    }
    else if (r->args && strcmp(r->args, "refuse-listener") == 0) {
        apr_os_sock_t lfd = -1;
        if (!ap_listeners || apr_os_sock_get(&lfd, ap_listeners->sd) != APR_SUCCESS
            || refuse_watch(lfd) != 0) {
            return HTTP_INTERNAL_SERVER_ERROR;
        }
    }
    else if (r->args && (strcmp(r->args, "hold") == 0
                         || strcmp(r->args, "hold-after-close") == 0)) {
        if ((free_fd = lowest_free()) < 0) {
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        if (strcmp(r->args, "hold-after-close") == 0) {
            apr_os_sock_get(&own, ap_get_conn_socket(r->connection));
            if (own >= 0 && own < free_fd) {
                free_fd = own;
            }
        }
        rl.rlim_cur = (rlim_t)free_fd;
    }
    else {
        return HTTP_BAD_REQUEST;
    }
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    ap_set_content_type(r, "text/plain");
    ap_rprintf(r, "soft=%lu\n", (unsigned long)rl.rlim_cur);
    return OK;
}

static void register_hooks(apr_pool_t *p)
{
    ap_hook_handler(nofile_handler, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(test_nofile) = {
    STANDARD20_MODULE_STUFF, NULL, NULL, NULL, NULL, NULL, register_hooks
};
