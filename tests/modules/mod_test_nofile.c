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

#define ARG_LOW(n) (offsetof(struct seccomp_data, args) + (n) * sizeof(__u64))

/* Installs `prog` in every thread of the process (0 on success). */
static int install(struct sock_filter *prog, unsigned short len)
{
    struct sock_fprog fprog = { len, prog };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return -1;
    }
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                        &fprog);
}

/* accept4 and accept fail with ENFILE. */
static int fail_accept(void)
{
#ifdef TEST_AUDIT_ARCH
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_AUDIT_ARCH, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_accept4, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_accept, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENFILE),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return install(prog, sizeof(prog) / sizeof(prog[0]));
#else
    return -1;
#endif
}

/* epoll_ctl(_, EPOLL_CTL_ADD, fd, _) fails with ENOSPC. */
static int refuse_watch(int fd)
{
#ifdef TEST_AUDIT_ARCH
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_AUDIT_ARCH, 0, 7),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_epoll_ctl, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(1)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, EPOLL_CTL_ADD, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(2)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)fd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSPC),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return install(prog, sizeof(prog) / sizeof(prog[0]));
#else
    (void)fd;
    return -1;
#endif
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
