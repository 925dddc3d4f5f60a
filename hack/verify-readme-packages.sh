#!/usr/bin/env bash
# Fails when the README's "How it is built" section does not name a Go
# package of the module. A package is named by its path in backticks
# (`internal/loop`), or covered by a parent written with /* (`internal/tools/*`).
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
section=$(awk '/^## How it is built/{on=1; next} on && /^## /{exit} on' README.md)
missing=0
for pkg in $(go list ./...); do
	rel=${pkg#"$module"/}
	named=no
	if grep -qF "\`$rel\`" <<<"$section"; then
		named=yes
	else
		parent=$rel
		while [[ $parent == */* ]]; do
			parent=${parent%/*}
			if grep -qF "\`$parent/*\`" <<<"$section"; then
				named=yes
				break
			fi
		done
	fi
	if [[ $named == no ]]; then
		echo "README.md, How it is built: package $rel is not named" >&2
		missing=1
	fi
done
exit $missing
