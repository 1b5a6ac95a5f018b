#!/usr/bin/env bash
# Runs the Python package's suite on Debian 13's PyTorch (2.6) inside a
# Debian 13 root, with the library built on this host:
#   tests/trixie/run.sh ROOT MIRROR PACKAGE...
# The root is made with mmdebstrap on first use and again whenever the
# package list changes (it is written into ROOT/.metalcore-packages last, so
# an interrupted build is redone). The repository is bind-mounted at
# ROOT/src while the suite runs. Needs root, or sudo without a password:
# mmdebstrap, mount and chroot do.
set -euo pipefail
root=$1 mirror=$2
shift 2
packages="$*"
sudo=""
if [ "$(id -u)" != 0 ]; then
	if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
		echo "tests/trixie/run.sh: needs root or sudo without a password (mmdebstrap, mount, chroot)" >&2
		exit 1
	fi
fi
root=$(realpath -m "$root")
# Unmounts whatever is mounted at or under the root (a run that was killed
# leaves the repository bound at ROOT/src), deepest first, and fails if
# anything stays: removing the root with the repository still bound inside
# would delete the repository.
unmount_all() {
	local m
	for m in $(findmnt -rn -o TARGET | grep -E "^$root(/|$)" | sort -r); do
		$sudo umount "$m" || $sudo umount -l "$m" || true
	done
	! findmnt -rn -o TARGET | grep -qE "^$root(/|$)"
}
unmount_all || { echo "tests/trixie/run.sh: cannot unmount what is mounted under $root" >&2; exit 1; }
stamp="$root/.metalcore-packages"
if [ "$($sudo cat "$stamp" 2>/dev/null)" != "$packages" ]; then
	echo "== making the Debian 13 root at $root: $packages"
	start=$(date +%s)
	$sudo rm -f "$stamp"  # first: a removal cut short leaves no stamp behind
	$sudo rm -rf "$root"
	$sudo mmdebstrap --quiet --variant=minbase --include="${packages// /,}" trixie "$root" "$mirror"
	echo "$packages" | $sudo tee "$stamp" >/dev/null
	echo "== root made in $(($(date +%s) - start)) s, $($sudo du -sh "$root" | cut -f1)"
fi
trap unmount_all EXIT
$sudo mkdir -p "$root/src"
$sudo mount --bind "$(pwd)" "$root/src"
# without /proc torch loses its CPU features (cpuinfo)
$sudo mount -t proc proc "$root/proc"
# the package from the source tree, the library this host built; gloo on
# loopback without libuv (Debian's PyTorch has none)
$sudo chroot "$root" env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
	PYTHONPATH=/src/overrides/python METALCORE_LIBRARY=/src/build/libmetalcore.so USE_LIBUV=0 GLOO_SOCKET_IFNAME=lo \
	sh -c 'cd /src && python3 -c "import torch; print(\"PyTorch\", torch.__version__)" &&
		python3 -m pytest -q -p no:cacheprovider -rs overrides/python/tests'
