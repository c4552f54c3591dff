package stack

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/tables"
)

// LocalStackTablePrefix names the tables the LocalStack hook creates; it is the prefix
// `terret dev` and `terret token` use with --dynamodb-endpoint (terret-log, …).
const LocalStackTablePrefix = "terret-"

// LocalStackHookPath is where LocalStack finds the hook, relative to the repository root
// (docker-compose.yml mounts localstack/init at /etc/localstack/init).
const LocalStackHookPath = "localstack/init/ready.d/10-tables.sh"

// LocalStackHook renders the LocalStack "ready" init hook that creates every table of
// defs with awslocal, exactly as template.yaml defines it (keys, streams, TTL), under
// LocalStackTablePrefix. The hook skips tables that already exist.
func LocalStackHook(defs []tables.Definition) []byte {
	names := tables.NamesWithPrefix(defs, LocalStackTablePrefix)
	var b bytes.Buffer
	b.WriteString(`#!/usr/bin/env bash
# Generated from template.yaml by internal/stack; do not edit. Regenerate with
#   go test ./internal/stack -run TestLocalStackHook -update
# LocalStack runs this once it is ready: it creates terret-ws's tables as template.yaml
# defines them, named as ` + "`terret dev --dynamodb-endpoint`" + ` expects them.
set -euo pipefail

# create_table NAME TTL_ATTRIBUTE|- CREATE_TABLE_ARGS...
create_table() {
  local name=$1 ttl=$2
  shift 2
  if awslocal dynamodb describe-table --table-name "$name" >/dev/null 2>&1; then
    echo "terret-ws: table $name exists"
    return 0
  fi
  awslocal dynamodb create-table --table-name "$name" "$@" >/dev/null
  awslocal dynamodb wait table-exists --table-name "$name"
  if [ "$ttl" != - ]; then
    awslocal dynamodb update-time-to-live --table-name "$name" \
      --time-to-live-specification "Enabled=true,AttributeName=$ttl" >/dev/null
  fi
  echo "terret-ws: created table $name"
}
`)
	for _, d := range defs {
		name := names[d.LogicalID]
		in := d.Input
		fmt.Fprintf(&b, "\n# %s (template.yaml)\n", d.LogicalID)
		ttl := d.TTLAttr
		if ttl == "" {
			ttl = "-"
		}
		fmt.Fprintf(&b, "create_table %s %s \\\n", name, ttl)
		fmt.Fprintf(&b, "  --billing-mode %s \\\n", in.BillingMode)
		var attrs []string
		for _, a := range in.AttributeDefinitions {
			attrs = append(attrs, fmt.Sprintf("AttributeName=%s,AttributeType=%s", aws.ToString(a.AttributeName), a.AttributeType))
		}
		fmt.Fprintf(&b, "  --attribute-definitions %s \\\n", strings.Join(attrs, " "))
		var keys []string
		for _, k := range in.KeySchema {
			keys = append(keys, fmt.Sprintf("AttributeName=%s,KeyType=%s", aws.ToString(k.AttributeName), k.KeyType))
		}
		fmt.Fprintf(&b, "  --key-schema %s", strings.Join(keys, " "))
		if len(in.GlobalSecondaryIndexes) > 0 {
			var gsis []string
			for _, g := range in.GlobalSecondaryIndexes {
				var ks []string
				for _, k := range g.KeySchema {
					ks = append(ks, fmt.Sprintf(`{"AttributeName":"%s","KeyType":"%s"}`, aws.ToString(k.AttributeName), k.KeyType))
				}
				proj := fmt.Sprintf(`{"ProjectionType":"%s"`, g.Projection.ProjectionType)
				if len(g.Projection.NonKeyAttributes) > 0 {
					proj += fmt.Sprintf(`,"NonKeyAttributes":["%s"]`, strings.Join(g.Projection.NonKeyAttributes, `","`))
				}
				proj += "}"
				gsis = append(gsis, fmt.Sprintf(`{"IndexName":"%s","KeySchema":[%s],"Projection":%s}`, aws.ToString(g.IndexName), strings.Join(ks, ","), proj))
			}
			fmt.Fprintf(&b, " \\\n  --global-secondary-indexes '[%s]'", strings.Join(gsis, ","))
		}
		if s := in.StreamSpecification; s != nil {
			fmt.Fprintf(&b, " \\\n  --stream-specification StreamEnabled=true,StreamViewType=%s", s.StreamViewType)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}
