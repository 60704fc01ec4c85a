#!/usr/bin/env bash
# Renders the loadtest's HTML report in headless Chromium and checks the screenshot
# (TestHTMLScreenshot), installing Chromium first when it is missing.
#
# Source it and call the function (from the repository root, e.g. in .ci/run):
#
#   source loadtest/ci-render.sh && loadtest_render_check
#
# or run it directly: bash loadtest/ci-render.sh
# It needs root (or sudo) and Debian's package repositories to install Chromium.

loadtest_render_check() {
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	if ! command -v chromium >/dev/null 2>&1; then
		echo "== installing chromium for the loadtest render check"
		local sudo=""
		if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
	fi
	echo "== loadtest HTML report: headless Chromium screenshot"
	(cd "$root" && KDEDUP_TEST_TIERS=process LOADTEST_RENDER=1 go test -count=1 -run '^TestHTMLScreenshot$' -v ./loadtest/)
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	loadtest_render_check
fi
