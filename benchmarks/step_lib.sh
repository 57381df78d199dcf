# Shared by the GPU benchmark scripts: `step NAME LIMIT COMMAND...` runs COMMAND under `timeout
# LIMIT` with its output in $OUT/NAME.log, and appends "NAME rc=.. N s" to $OUT/summary.txt (and
# stdout); with T0 set (date +%s at the script's start), also the time since then. Returns the
# command's exit status. Sourced, not run.
step() {
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local now
  now=$(date +%s)
  printf '%-24s rc=%-3s %4ss%s\n' "$name" "$rc" "$((now - t0))" \
    "${T0:+ (t=$((now - T0))s)}" | tee -a "$OUT/summary.txt"
  return $rc
}
