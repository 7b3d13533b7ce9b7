#!/usr/bin/env bash
# Builds the Debian package libapache2-mpm-rworker with dpkg-deb:
#
#   bash scripts/build-deb.sh            # -> target/debian/libapache2-mpm-rworker_<version>_<arch>.deb
#
# It packages target/release/libmod_mpm_rworker.so as it is (running `cargo build --release`
# only when that file is missing), so build first after changing the sources.
# Everything that ties the package to the httpd it was built for is read from the build
# machine, never written down here: the module directory (apxs -q LIBEXECDIR), the module
# magic number (ap_mmn.h, as Debian's virtual package apache2-api-<MMN>), the httpd and APR
# versions of the headers, and the shared-library dependencies (dpkg-shlibdeps).
# The package version is the top entry of pkg/deb/changelog (RWORKER_DEB_VERSION overrides it,
# for the upgrade test only); its upstream part must be Cargo.toml's version.
# Prints the path of the .deb as the last line of its output.
set -euo pipefail

cd "$(dirname "$0")/.."
PKG=libapache2-mpm-rworker
SRC=pkg/deb
SO=target/release/libmod_mpm_rworker.so
OUTDIR=target/debian

die() { echo "build-deb: $*" >&2; exit 1; }

if [[ ! -f $SO ]]; then
    if [[ -x "$HOME/.cargo/bin/cargo" ]]; then PATH="$HOME/.cargo/bin:$PATH"; fi
    cargo build --release
fi

# --- what the module was built against ---------------------------------------------------
INCLUDEDIR=$(apxs -q INCLUDEDIR)
LIBEXEC=$(apxs -q LIBEXECDIR)
MMN=$(sed -n 's/^#define MODULE_MAGIC_NUMBER_MAJOR \([0-9]\+\)$/\1/p' "$INCLUDEDIR/ap_mmn.h")
[[ $MMN =~ ^[0-9]{8}$ ]] || die "no MODULE_MAGIC_NUMBER_MAJOR in $INCLUDEDIR/ap_mmn.h"
# Headers and server must agree, or the Depends below would name an API the module was not
# compiled for.
dpkg-query -W -f='${Provides}' apache2-bin | tr ',' '\n' | grep -qx " *apache2-api-$MMN" ||
    die "the installed apache2-bin does not provide apache2-api-$MMN (headers from another httpd?)"

release_number() { sed -n "s/^#define AP_SERVER_$1_NUMBER *\([0-9]\+\)$/\1/p" "$INCLUDEDIR/ap_release.h"; }
HTTPD_VERSION=$(release_number MAJORVERSION).$(release_number MINORVERSION).$(release_number PATCHLEVEL)
[[ $HTTPD_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "no version in $INCLUDEDIR/ap_release.h"

# "libapr1 (>= 1.7.2)": the Debian package owning the library that <tool> links, at least the
# version of the headers the bindings were generated from.
apr_depend() {
    local tool=$1 lib=$2 dir owner
    dir=$("$tool" --link-ld | sed -n 's/.*-L\([^ ]*\).*/\1/p')
    owner=$(dpkg -S "$(readlink -f "$dir/$lib")" | cut -d: -f1)
    [[ -n $owner ]] || die "no package owns $dir/$lib"
    echo "$owner (>= $("$tool" --version))"
}
APR_DEPENDS="$(apr_depend apr-1-config libapr-1.so), $(apr_depend apu-1-config libaprutil-1.so)"

# --- version ----------------------------------------------------------------------------
CARGO_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
VERSION=${RWORKER_DEB_VERSION:-$(dpkg-parsechangelog -l "$SRC/changelog" -S Version)}
[[ ${VERSION%-*} == "$CARGO_VERSION" ]] ||
    die "version $VERSION does not match Cargo.toml's $CARGO_VERSION (add a pkg/deb/changelog entry)"
ARCH=$(dpkg --print-architecture)

# --- file tree --------------------------------------------------------------------------
ROOT=$OUTDIR/root
rm -rf "$ROOT"
mkdir -p "$ROOT/DEBIAN"
umask 022
DOC=usr/share/doc/$PKG
install -d "$ROOT/$LIBEXEC" "$ROOT/etc/apache2/mods-available" "$ROOT/$DOC" \
    "$ROOT/usr/share/lintian/overrides"

# Debian ships modules stripped (the release profile keeps debug info for perf and gdb);
# --strip-unneeded keeps the dynamic symbol table, so mpm_rworker_module stays exported.
strip --remove-section=.comment --remove-section=.note --strip-unneeded \
    -o "$ROOT/$LIBEXEC/mod_mpm_rworker.so" "$SO"
chmod 0644 "$ROOT/$LIBEXEC/mod_mpm_rworker.so"

# The .load names the module where this httpd's apxs says modules live.
sed "s#^LoadModule mpm_rworker_module .*#LoadModule mpm_rworker_module $LIBEXEC/mod_mpm_rworker.so#" \
    apache-conf/mpm_rworker.load >"$ROOT/etc/apache2/mods-available/mpm_rworker.load"
grep -qx "LoadModule mpm_rworker_module $LIBEXEC/mod_mpm_rworker.so" \
    "$ROOT/etc/apache2/mods-available/mpm_rworker.load" || die "no LoadModule line in apache-conf/mpm_rworker.load"
install -m 0644 apache-conf/mpm_rworker.conf "$ROOT/etc/apache2/mods-available/"

install -m 0644 "$SRC/copyright" "$ROOT/$DOC/copyright"
gzip -9n <README.md >"$ROOT/$DOC/README.md.gz"
gzip -9n <"$SRC/changelog" >"$ROOT/$DOC/changelog.Debian.gz"
install -m 0644 "$SRC/lintian-overrides" "$ROOT/usr/share/lintian/overrides/$PKG"

# --- control area -----------------------------------------------------------------------
# prerm and postrm share the "switch apache2 away from rworker" function; it is inlined at
# the #SWITCH_AWAY# line so that each script stands alone (postrm purge runs after the
# package's files are gone).
for script in postinst prerm postrm; do
    sed -e "/^#SWITCH_AWAY#$/{r $SRC/switch-away.sh" -e 'd}' "$SRC/$script" >"$ROOT/DEBIAN/$script"
    chmod 0755 "$ROOT/DEBIAN/$script"
done
printf '/etc/apache2/mods-available/%s\n' mpm_rworker.load mpm_rworker.conf >"$ROOT/DEBIAN/conffiles"

# dpkg-shlibdeps insists on a debian/control naming the package; give it a scratch one.
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
mkdir "$SCRATCH/debian"
printf 'Source: rworker\n\nPackage: %s\nArchitecture: any\n' "$PKG" >"$SCRATCH/debian/control"
SO_ABS=$(readlink -f "$ROOT/$LIBEXEC/mod_mpm_rworker.so")
SHLIBS=$(cd "$SCRATCH" && dpkg-shlibdeps -O "$SO_ABS" | sed -n 's/^shlibs:Depends=//p')
[[ -n $SHLIBS ]] || die "dpkg-shlibdeps found no dependencies"

DEPENDS="apache2-api-$MMN, apache2-bin (>= $HTTPD_VERSION), $APR_DEPENDS, $SHLIBS"
INSTALLED_SIZE=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@DEPENDS@/$DEPENDS/" \
    -e "s/@INSTALLED_SIZE@/$INSTALLED_SIZE/" "$SRC/control.in" >"$ROOT/DEBIAN/control"

# md5sums of every shipped file except the conffiles (dpkg tracks those itself).
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -print | sed 's#^\./##' | sort |
    grep -vxF -f <(sed 's#^/##' DEBIAN/conffiles) | xargs md5sum) >"$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles" "$ROOT/DEBIAN/md5sums"

DEB=$OUTDIR/${PKG}_${VERSION}_${ARCH}.deb
rm -f "$OUTDIR/${PKG}_"*.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "build-deb: built $DEB (Depends: $DEPENDS)"
readlink -f "$DEB"
