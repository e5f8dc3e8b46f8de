#!/usr/bin/env bash
# quietgo.sh runs a command (a go build) and folds the "go: downloading
# MODULE VERSION" lines that a fresh machine prints by the thousand into
# one progress line: rewritten in place on a terminal, every 250 modules
# otherwise. Every other line (compiler errors) is shown as it comes. The
# exit code is the command's.
set -uo pipefail

"$@" 2>&1 | {
	n=0
	while IFS= read -r line; do
		case $line in
		"go: downloading "*)
			n=$((n + 1))
			if [[ -t 1 ]]; then
				printf '\r  go: downloading modules from the Go module proxy: %d' "$n"
			elif ((n % 250 == 0)); then
				echo "  go: downloading modules from the Go module proxy: $n so far"
			fi
			;;
		*)
			if ((n > 0)) && [[ -t 1 ]]; then printf '\n'; fi
			echo "$line"
			;;
		esac
	done
	if ((n > 0)); then
		[[ -t 1 ]] && printf '\n'
		echo "  go: downloaded $n modules"
	fi
}
exit "${PIPESTATUS[0]}"
