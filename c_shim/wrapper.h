/* Headers bindgen reads for rworker. Everything comes from the installed httpd and
 * APR headers (located by build.rs through apxs / apr-1-config). */
#include "httpd.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "http_connection.h"
#include "http_protocol.h"
#include "http_vhost.h"
#include "http_request.h"
#include "http_ssl.h"
#include "ap_mpm.h"
#include "ap_listen.h"
#include "ap_mmn.h"
#include "mpm_common.h"
#include "scoreboard.h"
#include "unixd.h"
#include "util_mutex.h"
#include "apr_thread_proc.h"
#include "apr_portable.h"
#include "apr_poll.h"
#include "apr_strings.h"
#include "apr_signal.h"
#include "apr_buckets.h"
#include "apr_optional_hooks.h"
#include "mod_status.h"

/* Filled by c_shim/rworker_shim.c: the directive table (only C macros can build it,
 * e.g. LISTEN_COMMANDS, which carries Debian's ListenTCPDeferAccept). */
extern const command_rec rworker_shim_cmds[];
