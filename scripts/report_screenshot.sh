#!/usr/bin/env bash
# Regenerate the README's picture of the HTML report: `explain --html` on an example intent, rendered by
# headless Chromium (Debian's `chromium`). Deterministic input; the PNG depends on the browser's fonts.
#   bash scripts/report_screenshot.sh [INTENT] [OUT.png] [HEIGHT]
set -euo pipefail
cd "$(dirname "$0")/.."
intent=${1:-examples/intents/deepseek-v3-1024xh100.yaml}
out=${2:-docs/report.png}
height=${3:-2330}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "error: chromium is not installed (Debian package chromium; scripts/setup-env.sh installs it)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! .venv/bin/automodel-dist explain "$intent" --top 5 --html "$work/report.html" >/dev/null 2>"$work/log"; then
  cat "$work/log" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --force-device-scale-factor=1 \
  --user-data-dir="$work/profile" --window-size="1240,$height" --screenshot="$work/report.png" \
  "file://$work/report.html" >/dev/null 2>&1
cp "$work/report.png" "$out"
echo "wrote $out ($(wc -c <"$out") bytes) from $intent" >&2
