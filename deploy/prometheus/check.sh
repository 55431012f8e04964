#!/usr/bin/env bash
# Checks the Prometheus artifacts: the alert rules parse, their unit tests pass, and the sample
# scrape configuration is valid. Installs promtool (Debian package `prometheus`) when missing.
# Run from anywhere; it works from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "== installing promtool (Debian package prometheus)"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi
promtool --version | head -n 1

echo "== promtool check rules"
promtool check rules deploy/prometheus/alerts.yml

echo "== promtool test rules"
promtool test rules deploy/prometheus/tests/*.yml

echo "== promtool check config"
promtool check config deploy/prometheus/prometheus.yml
