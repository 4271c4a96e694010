#!/usr/bin/env bash
# tools/device_env.sh - sourced by the scripts that build Rapid on the GPU host the
# `device` tool lends (Ubuntu 24.04, no internet, no -dev packages): unpacks the
# Debian 12 packages carried in DEBDIR under /tmp/rapid-sys (never over /), points
# their pkg-config files there, and exports PKG_CONFIG_PATH, LD_LIBRARY_PATH and
# RP_PKGCONF (the pkg-config to hand CMake). The system's own libcurl is used when it
# has one.
#
# The packages are fetched on the development machine, into a folder the device call
# carries (.device/debs is git-ignored through .git/info/exclude), with
#   apt-get download libmicrohttpd-dev libmicrohttpd12 libjansson-dev libjansson4 \
#     libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libxxhash-dev libxxhash0 \
#     libcurl4-openssl-dev libcurl4 pkgconf pkgconf-bin libpkgconf3 libcmocka-dev libcmocka0
#
# Usage: . tools/device_env.sh DEBDIR
rp_debs=${1:?DEBDIR}
rp_sys=/tmp/rapid-sys
rp_lib=$rp_sys/usr/lib/x86_64-linux-gnu
mkdir -p "$rp_sys"
rp_syscurl=$(ls /usr/lib/x86_64-linux-gnu/libcurl.so.4 2>/dev/null || true)
for d in "$rp_debs"/*.deb; do
    case "$d" in *"/libcurl4_"*) [ -n "$rp_syscurl" ] && continue ;; esac
    dpkg-deb -x "$d" "$rp_sys"
done
[ -n "$rp_syscurl" ] && ln -sf "$rp_syscurl" "$rp_lib/libcurl.so"
for pc in "$rp_lib"/pkgconfig/*.pc "$rp_sys"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i -e "s|=/usr|=$rp_sys/usr|" -e "s|-L/usr|-L$rp_sys/usr|g" -e "s|-I/usr|-I$rp_sys/usr|g" \
        -e "/^Requires.private:/d" "$pc"
done
export PKG_CONFIG_PATH=$rp_lib/pkgconfig:$rp_sys/usr/share/pkgconfig
export LD_LIBRARY_PATH=$rp_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
RP_PKGCONF=$(command -v pkg-config || echo "$rp_sys/usr/bin/pkgconf")
export RP_PKGCONF
