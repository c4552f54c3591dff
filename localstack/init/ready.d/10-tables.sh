#!/usr/bin/env bash
# Generated from template.yaml by internal/stack; do not edit. Regenerate with
#   go test ./internal/stack -run TestLocalStackHook -update
# LocalStack runs this once it is ready: it creates terret-ws's tables as template.yaml
# defines them, named as `terret dev --dynamodb-endpoint` expects them.
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

# AgentsTable (template.yaml)
create_table terret-agents expires_at \
  --billing-mode PAY_PER_REQUEST \
  --attribute-definitions AttributeName=pk,AttributeType=S AttributeName=sk,AttributeType=S \
  --key-schema AttributeName=pk,KeyType=HASH AttributeName=sk,KeyType=RANGE

# ConnectionsTable (template.yaml)
create_table terret-connections expires_at \
  --billing-mode PAY_PER_REQUEST \
  --attribute-definitions AttributeName=pk,AttributeType=S \
  --key-schema AttributeName=pk,KeyType=HASH \
  --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES

# LogTable (template.yaml)
create_table terret-log expires_at \
  --billing-mode PAY_PER_REQUEST \
  --attribute-definitions AttributeName=session_id,AttributeType=S AttributeName=seq,AttributeType=N \
  --key-schema AttributeName=session_id,KeyType=HASH AttributeName=seq,KeyType=RANGE \
  --stream-specification StreamEnabled=true,StreamViewType=NEW_IMAGE
