# README.md's documentation list is complete and its links resolve: every
# docs/*.md is linked from README.md, every relative link in README.md names
# a file that exists, and so does every deploy/ file docs/deployment.md names.
. "$KEEL_SRC/tests/integration/lib.sh"
cd "$KEEL_SRC"
missing=""
for f in docs/*.md; do
  grep -q "](${f})" README.md || missing="$missing $f"
done
[ -z "$missing" ] && pass docs_readme_links_every_guide || fail docs_readme_links_every_guide "README.md does not link:$missing"
broken=""
for l in $(grep -o '](\([^)#:]*\)[)#]' README.md | sed 's/^](//; s/[)#]$//' | sort -u); do
  case $l in http*|mailto*|../*) continue ;; esac
  [ -e "$l" ] || broken="$broken $l"
done
[ -z "$broken" ] && pass docs_readme_links_resolve || fail docs_readme_links_resolve "README.md links to missing files:$broken"
# deploy/ files named in docs/deployment.md exist
bad=""
for p in $(grep -o 'deploy/[a-z0-9/_.-]*\.\(service\|conf\|yaml\)' docs/deployment.md | sort -u); do
  [ -e "$p" ] || bad="$bad $p"
done
[ -z "$bad" ] && pass docs_deployment_files_exist || fail docs_deployment_files_exist "named in docs/deployment.md but missing:$bad"
