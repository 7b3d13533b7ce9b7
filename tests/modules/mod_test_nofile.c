/* A test-only httpd module: lets a test move the open-file limit of the child that serves
 * it, from inside that child (a process may lower its own soft limit and raise it again up
 * to its hard limit without privileges), to bring about EMFILE as a module that holds
 * descriptors would. tests/park_shortage.rs builds and loads it.
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
 *
 * Answers "soft=N\n". Not for production use. */
#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "ap_config.h"
#include "http_core.h"
#include "apr_portable.h"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

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
