/* rworker's C shim: only what needs httpd's C macros.
 *
 * The directive table uses AP_INIT_TAKE1 and the LISTEN_COMMANDS /
 * AP_GRACEFUL_SHUTDOWN_TIMEOUT_COMMAND macros from the installed headers, so the
 * Listen family matches this httpd build exactly (Debian adds ListenTCPDeferAccept).
 * Every MPM directive goes to one Rust setter, rworker_set_directive(); cmd->info
 * carries which directive it is (the RW_DIRECTIVE_* numbers in src/mpm/config.rs). */
#include "wrapper.h"

const char *rworker_set_directive(cmd_parms *cmd, void *dummy, const char *arg);

#define RW_DIRECTIVE(name, id, help) \
    AP_INIT_TAKE1(name, rworker_set_directive, (void *)(apr_uintptr_t)(id), RSRC_CONF, help)

const command_rec rworker_shim_cmds[] = {
    LISTEN_COMMANDS,
    RW_DIRECTIVE("StartServers", 1, "Number of child processes launched at server startup"),
    RW_DIRECTIVE("MinSpareThreads", 2, "Minimum number of idle threads, to handle request spikes"),
    RW_DIRECTIVE("MaxSpareThreads", 3, "Maximum number of idle threads"),
    RW_DIRECTIVE("MaxRequestWorkers", 4, "Maximum number of threads alive at the same time"),
    RW_DIRECTIVE("MaxClients", 5, "Deprecated name of MaxRequestWorkers"),
    RW_DIRECTIVE("ThreadsPerChild", 6, "Number of threads each child creates"),
    RW_DIRECTIVE("ServerLimit", 7, "Maximum number of child processes for this run of Apache"),
    RW_DIRECTIVE("ThreadLimit", 8, "Maximum number of worker threads per child process for this run of Apache - Upper limit for ThreadsPerChild"),
    RW_DIRECTIVE("RWorkerQueue", 9, "Listener-to-worker queue: 'atomic' (rworker's own, the default) or 'apr' (httpd's own fdqueue, for A/B tests)"),
    AP_GRACEFUL_SHUTDOWN_TIMEOUT_COMMAND,
    { NULL }
};
