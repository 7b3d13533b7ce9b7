/* rworker's C shim: only what needs httpd's C macros.
 *
 * The directive table uses AP_INIT_TAKE1 and the LISTEN_COMMANDS /
 * AP_GRACEFUL_SHUTDOWN_TIMEOUT_COMMAND macros from the installed headers, so the
 * Listen family matches this httpd build exactly (Debian adds ListenTCPDeferAccept).
 * Every MPM directive goes to one Rust handler, rworker_set_directive()
 * (src/mpm/directives.rs), which tells them apart by name: the names below are the
 * only thing this table and the Rust side share. */
#include "wrapper.h"

/* ListenTCPDeferAccept is a Debian patch: Debian's LISTEN_COMMANDS names
 * ap_set_listentcpdeferaccept, which an upstream httpd does not export, so a module that
 * referenced it strongly would not load there. Reach it through a weak reference and a
 * wrapper instead (the macro below is expanded inside LISTEN_COMMANDS); with headers
 * that lack the directive, the wrapper is simply unused. */
extern const char *ap_set_listentcpdeferaccept(cmd_parms *cmd, void *dummy, const char *arg)
    __attribute__((weak));

static __attribute__((unused)) const char *rworker_listentcpdeferaccept(cmd_parms *cmd,
                                                                        void *dummy,
                                                                        const char *arg)
{
    if (ap_set_listentcpdeferaccept == NULL) {
        return "ListenTCPDeferAccept is not supported by this httpd (a Debian patch; "
               "rworker was built against Debian's headers)";
    }
    return ap_set_listentcpdeferaccept(cmd, dummy, arg);
}
#define ap_set_listentcpdeferaccept rworker_listentcpdeferaccept

const char *rworker_set_directive(cmd_parms *cmd, void *dummy, const char *arg);

#define RW_DIRECTIVE(name, help) \
    AP_INIT_TAKE1(name, rworker_set_directive, NULL, RSRC_CONF, help)

const command_rec rworker_shim_cmds[] = {
    LISTEN_COMMANDS,
    RW_DIRECTIVE("StartServers", "Number of child processes launched at server startup"),
    RW_DIRECTIVE("MinSpareThreads", "Minimum number of idle threads, to handle request spikes"),
    RW_DIRECTIVE("MaxSpareThreads", "Maximum number of idle threads"),
    RW_DIRECTIVE("MaxRequestWorkers", "Maximum number of threads alive at the same time"),
    RW_DIRECTIVE("MaxClients", "Deprecated name of MaxRequestWorkers"),
    RW_DIRECTIVE("ThreadsPerChild", "Number of threads each child creates"),
    RW_DIRECTIVE("ServerLimit", "Maximum number of child processes for this run of Apache"),
    RW_DIRECTIVE("ThreadLimit", "Maximum number of worker threads per child process for this run of Apache - Upper limit for ThreadsPerChild"),
    RW_DIRECTIVE("RWorkerQueue", "Listener-to-worker queue: 'atomic' (rworker's own, the default) or 'apr' (httpd's own fdqueue, for A/B tests)"),
    RW_DIRECTIVE("RWorkerAccept", "Who accepts connections: 'workers' (idle workers, each blocked in accept; the default where the child has one listening socket) or 'listener' (the listener thread hands each connection over through the fdqueue, the stock worker's way)"),
    RW_DIRECTIVE("RWorkerKeepAlive", "What holds an idle keep-alive connection: 'park' (nothing, the default: it waits in its child's event set, which idle workers take turns on) or 'thread' (its worker, the stock worker's way)"),
    RW_DIRECTIVE("AsyncRequestWorkerFactor", "mpm_event's: how many additional connections are accepted per idle worker thread (accepted for configurations ported from event; no effect with rworker)"),
    AP_GRACEFUL_SHUTDOWN_TIMEOUT_COMMAND,
    { NULL }
};
