#!/usr/bin/env bash
# browser.sh — Debian's Chromium, for the live view's headless-browser test.
#
#   bash scripts/browser.sh install   install the chromium package with apt-get if it is missing,
#                                     then print the path of the browser (a no-op when present)
#   bash scripts/browser.sh path      print the browser's path, or fail when it is not installed
#
# install needs apt-get and root. Without them it says so and exits 0, so a developer's machine
# without apt skips the browser test (cmd/differential's TestLiveViewInBrowser runs only when
# DIFFERENTIAL_TEST_BROWSER names a browser); under CI (CI=true) it exits 1 instead: CI runs the
# test and must not skip it silently. apt-get waits up to 5 minutes for a dpkg lock another
# install holds. fonts-liberation gives the page's text real glyphs in a screenshot.
#
# Environment:
#   DIFFERENTIAL_BROWSER  the browser's path (default: /usr/bin/chromium)
set -euo pipefail

browser="${DIFFERENTIAL_BROWSER:-/usr/bin/chromium}"

log() { echo "browser.sh: $*" >&2; }

cmd_path() {
	if [[ -x "$browser" ]]; then
		echo "$browser"
		return 0
	fi
	log "no browser at $browser (bash scripts/browser.sh install)"
	return 1
}

# unavailable WHY: skip outside CI, fail in CI.
unavailable() {
	if [[ "${CI:-}" == "true" ]]; then
		log "error: cannot install chromium: $*"
		exit 1
	fi
	log "cannot install chromium ($*): the browser test will be skipped"
	exit 0
}

cmd_install() {
	if [[ -x "$browser" ]]; then
		log "$("$browser" --version 2>/dev/null || echo "$browser") already installed"
		echo "$browser"
		return 0
	fi
	command -v apt-get >/dev/null || unavailable "no apt-get"
	((EUID == 0)) || unavailable "not root"
	local apt=(apt-get -o DPkg::Lock::Timeout=300 -y -q)
	# An install fails on package lists that are missing or name versions the mirror
	# no longer has; one update is enough for both.
	if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends chromium fonts-liberation >/dev/null; then
		DEBIAN_FRONTEND=noninteractive "${apt[@]}" update >/dev/null || unavailable "apt-get update failed"
		DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends chromium fonts-liberation >/dev/null ||
			unavailable "apt-get install chromium failed"
	fi
	[[ -x "$browser" ]] || unavailable "the chromium package installed no $browser"
	log "installed $("$browser" --version 2>/dev/null || echo "$browser")"
	echo "$browser"
}

case "${1:-}" in
install) cmd_install ;;
path) cmd_path ;;
*)
	sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
