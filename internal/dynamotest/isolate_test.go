package dynamotest

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamolocal"
)

func TestStampKey(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a SigV4 header", "AWS4-HMAC-SHA256 Credential=local/20261207/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=ab",
			"AWS4-HMAC-SHA256 Credential=KEY/20261207/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=ab"},
		{"another proxy's stamp", "AWS4-HMAC-SHA256 Credential=TESTAB12/20261207/us-east-1/dynamodb/aws4_request, Signature=ab",
			"AWS4-HMAC-SHA256 Credential=KEY/20261207/us-east-1/dynamodb/aws4_request, Signature=ab"},
		{"no credential", "Bearer x", "Bearer x"},
		{"a credential without scope", "AWS4-HMAC-SHA256 Credential=local", "AWS4-HMAC-SHA256 Credential=local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stampKey(tc.in, "KEY"); got != tc.want {
				t.Errorf("stampKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestIsolate: a top-level test keeps one proxy, not the server itself; a table made
// through one proxy's key is in that key's database only, and a proxy in front of
// another (a child test binary's) leaves the nearer one's key in force.
func TestIsolate(t *testing.T) {
	ep := Endpoint(t)
	if again := Endpoint(t); again != ep {
		t.Fatalf("a second call gave %s, the first %s", again, ep)
	}
	server := pick(t, endpoints)
	if ep == server {
		t.Fatalf("Endpoint gave the server %s itself", server)
	}
	ctx := context.Background()
	a, err := startProxy(server, newAccessKey())
	if err != nil {
		t.Fatal(err)
	}
	b, err := startProxy(server, newAccessKey())
	if err != nil {
		t.Fatal(err)
	}
	outer, err := startProxy(a, newAccessKey()) // a child binary's proxy in front of a
	if err != nil {
		t.Fatal(err)
	}
	name := UniqueName("iso")
	if _, err := dynamolocal.Client(outer).CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &name, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = dynamolocal.Client(a).DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	for _, c := range []struct {
		via  string
		url  string
		want bool
	}{{"the proxy nearest the server", a, true}, {"the proxy in front of it", outer, true}, {"another key's proxy", b, false}, {"the server itself", server, false}} {
		out, err := dynamolocal.Client(c.url).ListTables(ctx, &dynamodb.ListTablesInput{})
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(out.TableNames, name); got != c.want {
			t.Errorf("through %s: table listed %v, want %v (%v)", c.via, got, c.want, out.TableNames)
		}
	}
}
