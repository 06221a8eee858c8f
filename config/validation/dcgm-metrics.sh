#!/usr/bin/env bash
# The DCGM exporter serves the utilisation metric for every GPU it should watch.
# Each scrape opens a new connection, so the Service spreads them over the exporter pods
# of all nodes; GPUs are counted by UUID across scrapes until all are seen.
#   METRICS_HOST, METRICS_PORT, METRICS_PATH  where the exporter's Service answers
#   METRIC             the metric to find (default DCGM_FI_DEV_GPU_UTIL)
#   EXPECTED_GPUS      how many distinct GPUs must report it
#   DEADLINE_SECONDS   how long to keep scraping
#   POLL_SECONDS       pause between scrapes (default 3)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-dcgm-metrics}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

host=${METRICS_HOST:-}
port=${METRICS_PORT:-9400}
path=${METRICS_PATH:-/metrics}
metric=${METRIC:-DCGM_FI_DEV_GPU_UTIL}
expected=${EXPECTED_GPUS:-}
require_set METRICS_HOST "$host"
require_int METRICS_PORT "$port"
require_int EXPECTED_GPUS "$expected"
read_deadline_and_poll 300 3
[[ $metric =~ ^[A-Za-z_:][A-Za-z0-9_:]*$ ]] || fail "METRIC '$metric' is not a metric name"
url="http://${host}:${port}${path}"

# fetch: one HTTP/1.0 GET over bash's /dev/tcp (the image needs no curl); prints the response.
fetch() {
  timeout 10 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 7
    printf "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: text/plain\r\nConnection: close\r\n\r\n" "$3" "$1" >&3
    cat <&3' fetch "$host" "$port" "$path"
}

declare -A gpus=()
problem="no scrape yet"
scrapes=0
while :; do
  scrapes=$(( scrapes + 1 ))
  if response=$(fetch 2>&1); then
    status_line=${response%%$'\n'*}
    if [[ ! $status_line =~ ^HTTP/[0-9.]+\ 200 ]]; then
      problem="$url answered '${status_line%$'\r'}'"
    else
      found=0
      while IFS= read -r line; do
        if [[ $line =~ ^${metric}\{(.*)\}\ [-0-9.eE+]+ ]]; then
          labels=${BASH_REMATCH[1]}
          if [[ $labels =~ UUID=\"([^\"]+)\" ]]; then
            uuid=${BASH_REMATCH[1]}
            node=""
            [[ $labels =~ Hostname=\"([^\"]*)\" ]] && node=${BASH_REMATCH[1]}
            if [[ -z ${gpus[$uuid]:-} ]]; then
              info "GPU $uuid on ${node:-?} reports $metric"
            fi
            gpus[$uuid]=${node:-?}
            found=$(( found + 1 ))
          fi
        fi
      done <<<"${response//$'\r'/}"
      if (( found == 0 )); then
        problem="$url serves no $metric (is it in dcgmExporter.metrics?)"
      else
        problem="$metric seen for ${#gpus[@]} GPU(s), expected $expected"
      fi
    fi
  else
    problem="cannot fetch $url: $(tail -n 1 <<<"$response")"
    [[ -n $response ]] || problem="cannot fetch $url"
  fi
  if (( ${#gpus[@]} >= expected && expected > 0 )); then
    pass "$metric reported for ${#gpus[@]} GPU(s) by $url (${scrapes} scrape(s))"
  fi
  poll_again "$problem"
done
