# shellcheck shell=bash
# Progress lines of scripts/setup_env.sh, sourced by it (and by tests/unit/deploy/test_setup_progress.py):
# pip's own output folded into a few lines per environment, each saying which environment and how long it has run,
# so `make up` on a fresh clone (minutes of downloads) is never silent and `make envs` (both at once) stays readable.
#   say TEXT             "[INFO] <kind> env m:ss TEXT"
#   pip_progress         stdin: pip's output; stdout: at most one "collecting" line per PIP_PROGRESS_EVERY_S (the
#                        count so far and the latest package), the install step and its end, pip's warnings and
#                        errors as they come ("[WARN] <kind> env m:ss pip: …"), and "still working" after
#                        PIP_PROGRESS_EVERY_S of silence
# The caller sets `kind` (app|engine) and may set `installer` (pip, the default, or uv: it names the warnings' source);
# SECONDS is bash's clock of the script. uv's "Resolved N packages" and "Installed N packages" give the same counts.

PIP_PROGRESS_EVERY_S=${PIP_PROGRESS_EVERY_S:-10}

elapsed() {
  printf '%d:%02d' $((SECONDS / 60)) $((SECONDS % 60))
}

say() {
  printf '[INFO] %s env %s %s\n' "${kind:?}" "$(elapsed)" "$*"
}

pip_progress() {
  local line collected=0 latest="" shown=$SECONDS quiet_since=$SECONDS packages
  while true; do
    if IFS= read -r -t "$PIP_PROGRESS_EVERY_S" line; then
      quiet_since=$SECONDS
    else
      [ $? -gt 128 ] || break  # end of pip's output (a timeout returns more than 128)
      say "still working ($((SECONDS - quiet_since)) s since pip's last line)"
      continue
    fi
    case "$line" in
      Collecting\ *)
        collected=$((collected + 1))
        latest=${line#Collecting }
        latest=${latest%% *}
        if [ $((SECONDS - shown)) -ge "$PIP_PROGRESS_EVERY_S" ]; then
          say "collecting packages: $collected so far ($latest)"
          shown=$SECONDS
        fi ;;
      Installing\ collected\ packages:*)
        packages=${line#*: }
        [ "$collected" -eq 0 ] || say "collected $collected package(s)"
        say "installing $(($(printf '%s' "$packages" | tr -cd ',' | wc -c) + 1)) package(s)" ;;
      Resolved\ *\ package*)  # uv
        collected=$(printf '%s' "$line" | cut -d' ' -f2)
        say "collected $collected package(s)" ;;
      Installed\ *\ package*)  # uv
        say "installed $(printf '%s' "$line" | cut -d' ' -f2) package(s)" ;;
      Successfully\ installed\ *)
        packages=${line#Successfully installed }
        say "installed $(printf '%s\n' "$packages" | wc -w) package(s)" ;;
      *"is ignored: it is neither a file nor a directory"*) ;;  # the local wheel folder option, where there is none
      ERROR:*|WARNING:*|error:*|warning:*|*Error:*)
        printf '[WARN] %s env %s %s: %s\n' "$kind" "$(elapsed)" "${installer:-pip}" "$line" ;;
    esac
  done
  return 0
}
