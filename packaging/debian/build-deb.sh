#!/bin/sh
# Builds hookgate's Debian package from a built binary, with dpkg-deb (README "Install"):
#
#   packaging/debian/build-deb.sh target/x86_64-unknown-linux-musl/dist/hookgate [OUT_DIR] [VERSION]
#
# The package holds the binary, the systemd unit, /etc/hookgate/hookgate.yaml and
# /etc/default/hookgate (conffiles: an upgrade keeps the admin's edits), the man pages and
# shell completions the binary generates, and maintainer scripts that make the `hookgate`
# system user and /var/lib/hookgate. VERSION defaults to the workspace's.
set -eu
binary=$1
out=${2:-target/debian}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
version=${3:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -n 1)}
arch=$(dpkg --print-architecture)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/hookgate_${version}_$arch"
install -D -m 0755 "$binary" "$root/usr/bin/hookgate"
install -D -m 0644 "$here/../systemd/hookgate.service" "$root/lib/systemd/system/hookgate.service"
install -D -m 0644 "$here/hookgate.yaml" "$root/etc/hookgate/hookgate.yaml"
install -D -m 0600 "$here/default" "$root/etc/default/hookgate"
install -d -m 0755 "$root/etc/hookgate/plugins"
install -d "$root/usr/share/doc/hookgate"
printf 'hookgate\nSource: https://github.com/hookgate/hookgate\nLicense: Apache-2.0\n' \
    > "$root/usr/share/doc/hookgate/copyright"
install -d "$root/usr/share/man/man1"
"$binary" man --dir "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
"$binary" completions bash > "$root/usr/share/bash-completion/completions/hookgate"
"$binary" completions zsh > "$root/usr/share/zsh/vendor-completions/_hookgate"
"$binary" completions fish > "$root/usr/share/fish/vendor_completions.d/hookgate.fish"

install -d "$root/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "$here/$script" "$root/DEBIAN/$script"
done
printf '/etc/hookgate/hookgate.yaml\n/etc/default/hookgate\n' > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: hookgate
Version: $version
Architecture: $arch
Maintainer: hookgate developers <hookgate@users.noreply.github.com>
Installed-Size: $size
Depends: adduser, procps
Section: net
Priority: optional
Homepage: https://github.com/hookgate/hookgate
Description: webhook delivery gateway
 hookgate stores the events your apps post durably (SQLite, or PostgreSQL for a
 cluster) and delivers each to every subscribed endpoint, with retries by policy,
 endpoint health, recovery calls, a web console and sandboxed WebAssembly plugins.
CONTROL

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/hookgate_${version}_$arch.deb" >/dev/null
echo "$out/hookgate_${version}_$arch.deb"
