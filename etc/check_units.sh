#!/bin/sh
# Verifies the installed units with systemd-analyze. ExecStart names the install path, which
# does not exist in a build tree: a stand-in executable takes its place in a scratch root.
set -eu
analyze=$1 service=$2 socket=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$service")
sed "s|$exec_path|$dir/tandemd|" "$service" > "$dir/tandemd.service"
cp "$socket" "$dir/tandemd.socket"
printf '#!/bin/sh\n' > "$dir/tandemd" && chmod +x "$dir/tandemd"
# "Unknown user" / missing documentation are about the host, not the files.
out=$("$analyze" verify --man=no "$dir/tandemd.socket" "$dir/tandemd.service" 2>&1) || true
echo "$out"
if echo "$out" | grep -v -e 'Failed to resolve user' -e 'Failed to resolve group' \
      -e 'Documentation' -e '^$' | grep -q .; then
  echo "check_units: systemd-analyze reported problems" >&2
  exit 1
fi
echo "check_units: ok"
