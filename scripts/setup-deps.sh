#!/usr/bin/env bash
# Installs what building and testing rworker needs on a Debian machine, as root.
# Idempotent: asks apt only for packages that are missing, and runs nothing else twice.
set -euo pipefail

PACKAGES=(
    apache2        # /usr/sbin/apache2, the stock modules, /etc/apache2
    apache2-dev    # httpd and APR headers for bindgen, apxs
    apache2-utils  # ab
    libclang-dev   # bindgen
    clang
    pkg-config
    binutils       # nm, readelf (static checks)
    wrk
    curl
    nghttp2-client # h2load (tests/park_modules.rs)
    libssl-dev     # rworker-diff's and rworker-ab --tls's TLS client (the openssl crate)
    openssl        # the test certificates: rworker-diff, rworker-ab --tls, bench/slow-senders
    ca-certificates  # curl to https (the rustup command below)
    dpkg-dev       # scripts/build-deb.sh: dpkg-shlibdeps, dpkg-parsechangelog
    lintian        # tests/package.rs checks the .deb
)

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup-deps: missing packages: ${missing[*]}; run as root: bash scripts/setup-deps.sh" >&2
        exit 1
    fi
    echo "setup-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
else
    echo "setup-deps: all Debian packages present"
fi

# Rust comes from rustup, not from Debian (bindgen and the edition need a recent toolchain).
if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    cat >&2 <<'MSG'
setup-deps: cargo not found. Install a Rust toolchain (1.85 or newer) with rustup:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
    . "$HOME/.cargo/env"
then run this script again.
MSG
    exit 1
fi
# The module builds with 1.77 (bindgen's dependencies); the suite's test dependencies
# (tempfile, ureq) need 1.85. A toolchain older than that fails in the middle of a build.
rustc_version=$(rustc --version | awk '{print $2}')
if [[ $(printf '%s\n' 1.85.0 "$rustc_version" | sort -V | head -n 1) != 1.85.0 ]]; then
    echo "setup-deps: rustc $rustc_version is older than 1.85; update it with: rustup update stable" >&2
    exit 1
fi
echo "setup-deps: $(cargo --version)"
