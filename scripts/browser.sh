#!/usr/bin/env bash
# Installs what the JavaScript side needs: for the browser test of the dev web page
# (internal/webui), Debian's Chromium and ChromeDriver (/usr/bin/chromium,
# /usr/bin/chromedriver) and the playwright-core pinned in web-tests/ (which drives that
# Chromium; it never downloads a browser of its own); for the TypeScript client, the
# toolchain pinned in client-ts/ (typescript, esbuild, ws). Idempotent and quick when
# everything is in place. Where nothing can be installed (no apt-get, or neither root nor
# passwordless sudo) it only warns: the test then skips, or fails under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "browser: chromium is missing and installing it needs root: the browser test will not run (apt-get install chromium chromium-driver)" >&2
      sudo="none"
    fi
  fi
  if [ "$sudo" != none ] && ! command -v apt-get >/dev/null 2>&1; then
    echo "browser: chromium is missing and there is no apt-get: the browser test will not run" >&2
    sudo="none"
  fi
  if [ "$sudo" != none ]; then
    echo "browser: installing chromium and chromium-driver (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq -o Dpkg::Use-Pty=0 chromium chromium-driver >/dev/null
  fi
fi

need_npm() { command -v npm >/dev/null 2>&1 || { echo "browser: npm is required (Node 20+)" >&2; exit 1; }; }
for dir in web-tests client-ts; do
  stamp=$dir/node_modules/.terret-installed
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    need_npm
    echo "browser: installing $dir's pinned packages (npm ci in $dir)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$stamp"
  fi
done
