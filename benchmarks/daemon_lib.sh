# Shared by the GPU benchmark scripts that drive tandemd: start a daemon on a socket, wait until
# it answers health, stop every daemon started. Needs TANDEM, TANDEMD, TARGET, WORK, OUT and a
# log function (MAX_MODEL_LEN optional); sourced, not run.
PIDS=()
start_daemon() {  # name, flags...: starts tandemd on $WORK/<name>.sock; 0 when it serves
  local name=$1
  shift
  local sock=$WORK/$name.sock
  rm -f "$sock"
  "$TANDEMD" --model "$TARGET" --socket "$sock" ${MAX_MODEL_LEN:+--max-model-len "$MAX_MODEL_LEN"} "$@" > "$OUT/tandemd-$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 900); do
    [ -S "$sock" ] && "$TANDEM" health --socket "$sock" > /dev/null 2>&1 && return 0
    kill -0 "$pid" 2> /dev/null || { log "tandemd $name exited: $(tail -n 2 "$OUT/tandemd-$name.log")"; return 1; }
    sleep 0.2
  done
  log "tandemd $name did not become ready"
  return 1
}
stop_daemons() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2> /dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2> /dev/null; done
  PIDS=()
}
trap stop_daemons EXIT
