#!/usr/bin/env bash
# Deployment checks for kdedup: Prometheus rules and their unit tests, the compose file,
# the Helm chart, and the Go checks of the tools/ module.
#
#   deploy/ci-checks.sh                    install what is missing, then run every static check
#   deploy/ci-checks.sh check_metrics URL  lint a live /metrics endpoint with promtool
#   deploy/ci-checks.sh live_check [FLAGS] the dashboard and alerts evaluated by a real Prometheus
#                                          on a live worker (about 110s; tools/README.md)
#   source deploy/ci-checks.sh             define the functions only (for .ci/run)
#
# Needs root (or the tools already installed) for apt-get, and Go for helm and tools/.

HELM_VERSION=v3.22.0
KUBE_VERSION=1.31.0
KDEDUP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '==> %s\n' "$*" >&2; }

# install_tools installs prometheus and promtool, docker-compose and curl (Debian packages) and
# helm (built from source with go install, pinned) when they are missing.
install_tools() {
	local missing=()
	command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
	command -v docker-compose >/dev/null || missing+=(docker-compose)
	command -v curl >/dev/null || missing+=(curl)
	if ((${#missing[@]})); then
		log "apt-get install ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	PATH="$(go env GOPATH)/bin:$PATH"
	export PATH
	# go install leaves helm's version string as "v3.22" (no ldflags).
	if ! helm version --template '{{.Version}}' 2>/dev/null | grep -qx "${HELM_VERSION}\|${HELM_VERSION%.0}"; then
		log "go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
		GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
	fi
}

check_rules() {
	log "promtool check rules / test rules / check config"
	(
		cd "$KDEDUP_ROOT/deploy/prometheus" &&
			promtool check rules alerts.yml &&
			promtool test rules alerts_test.yml &&
			promtool check config prometheus.yml
	)
}

check_compose() {
	log "docker-compose config -q"
	docker-compose -f "$KDEDUP_ROOT/deploy/docker-compose.yml" config -q &&
		docker-compose -f "$KDEDUP_ROOT/deploy/docker-compose.yml" -f "$KDEDUP_ROOT/deploy/docker-compose.secured.yml" config -q
}

check_helm() {
	local chart="$KDEDUP_ROOT/deploy/helm/kdedup"
	log "helm lint --strict / helm template"
	helm lint --strict "$chart" &&
		helm template kdedup "$chart" --kube-version "$KUBE_VERSION" >/dev/null &&
		helm template kdedup "$chart" --kube-version "$KUBE_VERSION" \
			--set replicaCount=1 --set dedup.scope=global \
			--set serviceMonitor.enabled=false --set podMonitor.enabled=true >/dev/null &&
		helm template kdedup "$chart" --kube-version "$KUBE_VERSION" --set checkpoint.store=dir >/dev/null &&
		helm template kdedup "$chart" --kube-version "$KUBE_VERSION" --set kafka.tls.enabled=true \
			--set kafka.tls.caSecret=kafka-ca --set kafka.tls.clientCertSecret=kdedup-tls \
			--set kafka.sasl.mechanism=SCRAM-SHA-512 --set kafka.sasl.credentialsSecret=kdedup-kafka >/dev/null
}

check_tools() {
	log "cd tools && go test ./..."
	(cd "$KDEDUP_ROOT/tools" && go test ./...)
}

# check_metrics URL fetches a live /metrics endpoint and lints it with promtool
# (naming conventions, units, _total suffixes, help texts). Fails when the fetch fails
# or promtool reports a problem.
check_metrics() {
	local url=${1:?usage: check_metrics URL}
	log "promtool check metrics $url"
	local body
	body=$(curl -sSf --max-time 10 "$url") || return 1
	printf '%s\n' "$body" | promtool check metrics
}

# live_check [FLAGS] runs tools/cmd/livecheck: Debian's prometheus scrapes a worker under three
# embedded loadtests (healthy with a restart, under event time with late records; handover: a
# second worker joins and leaves, then a rebuild from the output topic; degraded: overfilled
# filter, unwritable checkpoint store and produce faults), then every dashboard target, the
# duplicate ratio and throughput against the loadtest's verifier, the late records against those
# sent, the estimated false-positive rate against the measured loss, and the alerts (for:
# shortened) are checked. FLAGS go to livecheck (-keep, -rate, ...).
# It stops every process it starts and fails naming the panel, alert or check at fault.
live_check() {
	log "cd tools && go run ./cmd/livecheck $*"
	(cd "$KDEDUP_ROOT/tools" && go run ./cmd/livecheck -repo "$KDEDUP_ROOT" "$@")
}

# run_all stops at the first failing check, whether or not the caller uses set -e.
run_all() {
	install_tools || return 1
	check_rules || return 1
	check_compose || return 1
	check_helm || return 1
	check_tools || return 1
	log "deploy checks passed"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	set -euo pipefail
	if (($#)); then
		install_tools
		"$@"
	else
		run_all
	fi
fi
