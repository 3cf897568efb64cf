# phases.sh: logging with timestamps and timed phases, shared by testkit's build scripts.
# Source it after setting LOG_NAME (the prefix of every line) and PHASE (the first phase):
#   log MESSAGE            a line on stderr
#   phase NAME [DETAIL]    ends the current phase (logging its time) and starts NAME
#   end_phase              ends the current phase
#   since START            seconds since START (an $EPOCHREALTIME value), one decimal
# $phase_report collects "name Ns" of every ended phase; $current_phase names the running one.
log() { printf '[%s %(%H:%M:%S)T] %s\n' "$LOG_NAME" -1 "$*" >&2; }

script_start=$EPOCHREALTIME
current_phase="$PHASE"
phase_start=$EPOCHREALTIME
phase_report=""
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
end_phase() {
  local d
  d=$(since "$phase_start")
  phase_report+="${phase_report:+, }$current_phase ${d}s"
  log "phase '$current_phase' done in ${d}s"
}
phase() {
  end_phase
  current_phase=$1
  phase_start=$EPOCHREALTIME
  log "=== phase: $1${2:+ ($2)}"
}
